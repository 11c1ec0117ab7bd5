/*
 * mtwriter DIR NTHREADS NWRITES SIZE MODE
 *
 * The main thread opens DIR/counters (open O_RDWR|O_CREAT, mmap MAP_SHARED;
 * ftruncate is not hooked) and DIR/tNN.dat for each thread NN (open
 * O_WRONLY|O_CREAT|O_TRUNC), then runs NTHREADS threads.  Thread t does
 * only NWRITES x write(fd_t, SIZE bytes) and, after each write returned,
 * stores its count of completed writes in counters[t] (u64, shared file
 * mapping, so it survives a SIGKILL of the process).  Worker threads make
 * no other hooked call.  Except in serial mode, all workers start together
 * (a barrier) and wait for each other once more after their first write, so
 * that they all hold (or fail to get) a ring lane at the same time.
 *
 * MODE:
 *   join        all threads at once; join; close the files; "done TOTAL"; exit 0.
 *   kill:US     all threads at once; once all have started, the main thread
 *               sleeps US microseconds and SIGKILLs the whole process.
 *   progress:K  all threads at once; when every thread has done K writes,
 *               prints "writing"; then as join, but exits 3.
 *   serial:K    at most K workers at a time; before starting a worker the
 *               main thread waits (reading the ring, see ringpeek.h) for a
 *               free lane and for the previous worker's first write, so that
 *               every worker gets a lane once the collector has freed the
 *               lanes of workers that exited.  Then as join.
 *   stopped     as join, but first waits (ringpeek) until the collector has
 *               drained the main thread's lane, so a test can SIGSTOP the
 *               collector and know what is already in it.  The test drives it
 *               through stdin: prints "ready", reads one line, then runs.
 *
 * stdout/stdin use stdio (not hooked).  Exact hooked calls of the workers:
 * write x NWRITES each, all succeeding with SIZE bytes.
 */
#include "ringpeek.h"
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>

static long nwrites;
static size_t size;
static volatile uint64_t *counters;
static int fds[1024];
static uint64_t first_done[1024];
static uint64_t finished;
static pthread_barrier_t barrier, first_barrier;
static int use_barrier;

static void *worker(void *arg) {
    long t = (long)arg;
    char *buf = malloc(size);
    CHECK(buf != NULL, "malloc");
    memset(buf, 'a' + (int)(t % 26), size);
    if (use_barrier) pthread_barrier_wait(&barrier);
    for (long i = 0; i < nwrites; i++) {
        CHECK(write(fds[t], buf, size) == (ssize_t)size, "write thread %ld", t);
        __atomic_store_n(&counters[t], (uint64_t)(i + 1), __ATOMIC_RELEASE);
        if (i == 0) __atomic_store_n(&first_done[t], 1, __ATOMIC_RELEASE);
        if (i == 0 && use_barrier) pthread_barrier_wait(&first_barrier);
    }
    if (nwrites == 0) {
        __atomic_store_n(&first_done[t], 1, __ATOMIC_RELEASE);
        if (use_barrier) pthread_barrier_wait(&first_barrier);
    }
    free(buf);
    __atomic_add_fetch(&finished, 1, __ATOMIC_ACQ_REL);
    return NULL;
}

int main(int argc, char **argv) {
    const char *dir = arg_str(argc, argv, 1, "DIR");
    long nthreads = arg_long(argc, argv, 2, "NTHREADS");
    nwrites = arg_long(argc, argv, 3, "NWRITES");
    size = (size_t)arg_long(argc, argv, 4, "SIZE");
    const char *mode = arg_str(argc, argv, 5, "MODE");
    CHECK(nthreads >= 1 && nthreads <= 1024 && size >= 1, "bad arguments");
    long kill_us = -1, progress = -1, serial = -1;
    int stopped = 0;
    if (strncmp(mode, "kill:", 5) == 0)
        kill_us = atol(mode + 5);
    else if (strncmp(mode, "progress:", 9) == 0)
        progress = atol(mode + 9);
    else if (strncmp(mode, "serial:", 7) == 0)
        serial = atol(mode + 7);
    else if (strcmp(mode, "stopped") == 0)
        stopped = 1;
    else
        CHECK(strcmp(mode, "join") == 0, "bad MODE %s", mode);

    char path[4096];
    snprintf(path, sizeof path, "%s/counters", dir);
    int cfd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(cfd >= 0, "open %s", path);
    CHECK(ftruncate(cfd, 8 * 1024) == 0, "ftruncate");
    counters = mmap(NULL, 8 * 1024, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
    CHECK(counters != MAP_FAILED, "mmap counters");
    for (long t = 0; t < nthreads; t++) {
        snprintf(path, sizeof path, "%s/t%02ld.dat", dir, t);
        fds[t] = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CHECK(fds[t] >= 0, "open %s", path);
    }

    struct ringpeek ring;
    if (serial > 0 || stopped) ringpeek_open(&ring);
    if (stopped) {
        RINGPEEK_WAIT(ringpeek_drained(&ring, (uint32_t)getpid()), "the collector to drain the main lane");
        char line[64];
        printf("ready\n");
        fflush(stdout);
        CHECK(fgets(line, sizeof line, stdin) != NULL, "fgets");
    }

    pthread_t *threads = calloc((size_t)nthreads, sizeof *threads);
    CHECK(threads != NULL, "calloc");
    if (serial > 0) {
        for (long t = 0; t < nthreads; t++) {
            RINGPEEK_WAIT(t - (long)__atomic_load_n(&finished, __ATOMIC_ACQUIRE) < serial, "a worker to finish");
            RINGPEEK_WAIT(ringpeek_free_lanes(&ring) >= 1, "a free lane");
            CHECK(pthread_create(&threads[t], NULL, worker, (void *)t) == 0, "pthread_create");
            RINGPEEK_WAIT(__atomic_load_n(&first_done[t], __ATOMIC_ACQUIRE), "the first write of a worker");
        }
    } else {
        use_barrier = 1;
        CHECK(pthread_barrier_init(&barrier, NULL, (unsigned)nthreads + 1) == 0, "barrier");
        CHECK(pthread_barrier_init(&first_barrier, NULL, (unsigned)nthreads) == 0, "barrier");
        for (long t = 0; t < nthreads; t++)
            CHECK(pthread_create(&threads[t], NULL, worker, (void *)t) == 0, "pthread_create");
        pthread_barrier_wait(&barrier);
    }
    if (kill_us >= 0) {
        usleep((useconds_t)kill_us);
        kill(getpid(), SIGKILL);
        for (;;) pause();
    }
    if (progress >= 0) {
        long want = progress < nwrites ? progress : nwrites;
        for (long t = 0; t < nthreads; t++)
            RINGPEEK_WAIT((long)__atomic_load_n(&counters[t], __ATOMIC_ACQUIRE) >= want, "progress");
        printf("writing\n");
        fflush(stdout);
    }
    for (long t = 0; t < nthreads; t++) CHECK(pthread_join(threads[t], NULL) == 0, "pthread_join");
    for (long t = 0; t < nthreads; t++) CHECK(close(fds[t]) == 0, "close");
    printf("done %ld\n", nthreads * nwrites);
    fflush(stdout);
    return progress >= 0 ? 3 : 0;
}
