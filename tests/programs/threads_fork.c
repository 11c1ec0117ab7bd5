/*
 * threads_fork DIR NTHREADS ITERS
 *
 * The parent starts NTHREADS threads, then forks while they run; the child
 * starts its own NTHREADS threads.  Thread t of the parent works on
 * DIR/p<t>.dat, thread t of the child on DIR/c<t>.dat.  Each thread does
 * exactly:
 *   1 x open(path, O_RDWR|O_CREAT|O_TRUNC)
 *   ITERS x write(fd, 100 bytes)              -> 100 each
 *   ITERS x pread(fd, 50 bytes, offset i)     -> 50 each
 *   ITERS x ioctl(fd, FIONREAD, &n)           -> 0
 *   1 x close(fd)
 *   ITERS x clock_gettime(CLOCK_MONOTONIC)
 * So each process does NTHREADS opens/closes and NTHREADS*ITERS of each of
 * write, pread, ioctl and clock_gettime.  Nothing else that LD_PRELOAD can
 * see (fork, waitpid and pthread_* are not hooked).
 * The child exits 0; the parent exits 0 when the child did.
 */
#include "common.h"
#include <fcntl.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *dir;
static long iters;

struct job {
    char path[4096];
};

static void *worker(void *arg) {
    struct job *job = arg;
    char buf[100];
    memset(buf, 'x', sizeof buf);
    int fd = open(job->path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "open %s", job->path);
    for (long i = 0; i < iters; i++)
        CHECK(write(fd, buf, 100) == 100, "write");
    for (long i = 0; i < iters; i++)
        CHECK(pread(fd, buf, 50, i) == 50, "pread");
    for (long i = 0; i < iters; i++) {
        int n = -1;
        CHECK(ioctl(fd, FIONREAD, &n) == 0, "ioctl");
    }
    CHECK(close(fd) == 0, "close");
    for (long i = 0; i < iters; i++) {
        struct timespec ts;
        CHECK(clock_gettime(CLOCK_MONOTONIC, &ts) == 0, "clock_gettime");
    }
    return NULL;
}

static void start(char role, long n, pthread_t *tids, struct job *jobs) {
    for (long t = 0; t < n; t++) {
        snprintf(jobs[t].path, sizeof jobs[t].path, "%s/%c%ld.dat", dir, role, t);
        int rc = pthread_create(&tids[t], NULL, worker, &jobs[t]);
        if (rc != 0) { errno = rc; DIE("pthread_create"); }
    }
}

static void join(long n, pthread_t *tids) {
    for (long t = 0; t < n; t++) {
        int rc = pthread_join(tids[t], NULL);
        if (rc != 0) { errno = rc; DIE("pthread_join"); }
    }
}

int main(int argc, char **argv) {
    dir = arg_str(argc, argv, 1, "DIR");
    long n = arg_long(argc, argv, 2, "NTHREADS");
    iters = arg_long(argc, argv, 3, "ITERS");
    pthread_t *tids = calloc(n, sizeof *tids);
    struct job *jobs = calloc(n, sizeof *jobs);
    CHECK(tids && jobs, "calloc");

    start('p', n, tids, jobs);
    pid_t child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0) {
        /* Only this thread exists in the child; the parent's threads are gone. */
        pthread_t *ctids = calloc(n, sizeof *ctids);
        struct job *cjobs = calloc(n, sizeof *cjobs);
        CHECK(ctids && cjobs, "calloc");
        start('c', n, ctids, cjobs);
        join(n, ctids);
        exit(0);
    }
    join(n, tids);
    int status;
    CHECK(waitpid(child, &status, 0) == child, "waitpid");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "child failed: status 0x%x\n", status);
        return 1;
    }
    return 0;
}
