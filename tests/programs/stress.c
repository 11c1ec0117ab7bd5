/*
 * stress DIR PROCS THREADS ITERS    (the tree)
 * stress leaf PATH N                (a leaf image)
 *
 * Tree: the first process forks PROCS children and waits for them; it exits
 * 0 when all exited 0.  Child i (0-based) runs, at the same time:
 *   - THREADS writer threads; thread t: open(DIR/f<i>_<t>.dat,
 *     O_WRONLY|O_CREAT|O_TRUNC), ITERS x write(64 bytes); odd threads then
 *     call pthread_exit() without closing (threads exiting while the others
 *     write); even threads close(fd) once the main thread is done with the
 *     steps below, and return.  (No descriptor number is reused by another
 *     thread while the process runs: see fdchurn.c for why.)
 *   - a reader thread doing EINTRS (= 4) x read(pipe, 1 byte) on an empty
 *     pipe; the child's main thread interrupts it with SIGUSR1 (handler
 *     installed without SA_RESTART) until each read returned -1/EINTR; any
 *     other result fails the child;
 *   - in the main thread, once every writer has opened its file, one after
 *     the other:
 *       vfork() + execv(self, "leaf", DIR/v<i>.dat, LEAF), waitpid;
 *       posix_spawn(self, "leaf", DIR/s<i>.dat, LEAF), waitpid;
 *       DLOPENS (= 5) x { dlopen(DIR/libplug.so), plug_write(DIR/d<i>.dat,
 *       PLUG (= 20)), dlclose }.
 * Leaf: open(PATH, O_WRONLY|O_CREAT|O_TRUNC), N x write(64), close, exit 0.
 * LEAF = 30.
 *
 * Exact hooked calls per child: open THREADS + 1 (d file) x DLOPENS ...; see
 * the test for the totals it checks.  Nothing else is hooked here (fork,
 * vfork, posix_spawn, waitpid, dlopen, pthread_*, sigaction, usleep are not
 * recorded; dlopen's own file reads are glibc-internal).
 */
#include "common.h"
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#define EINTRS 4
#define DLOPENS 5
#define PLUG 20
#define LEAF "30"

extern char **environ;
static const char *dir;
static const char *self;
static long iters;
static int child_index;
static int pipefd[2];
static volatile int reads_done;
static volatile int read_failed;
static int opened;
static int main_done;

static void leaf(const char *path, long n) {
    char buf[64];
    memset(buf, 'l', sizeof buf);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "open %s", path);
    for (long i = 0; i < n; i++) CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf, "write");
    CHECK(close(fd) == 0, "close");
    exit(0);
}

static void *writer(void *arg) {
    long t = (long)arg;
    char path[4096], buf[64];
    memset(buf, 'w', sizeof buf);
    snprintf(path, sizeof path, "%s/f%d_%ld.dat", dir, child_index, t);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "open %s", path);
    __atomic_add_fetch(&opened, 1, __ATOMIC_ACQ_REL);
    for (long i = 0; i < iters; i++) CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf, "write");
    if (t % 2) pthread_exit(NULL);
    while (!__atomic_load_n(&main_done, __ATOMIC_ACQUIRE)) usleep(200);
    CHECK(close(fd) == 0, "close");
    return NULL;
}

static void on_usr1(int sig) { (void)sig; }

static void *reader(void *arg) {
    (void)arg;
    char c;
    for (int i = 0; i < EINTRS; i++) {
        ssize_t r = read(pipefd[0], &c, 1);
        if (!(r == -1 && errno == EINTR)) {
            fprintf(stderr, "read returned %zd errno %d, want -1/EINTR\n", r, errno);
            read_failed = 1;
        }
        __atomic_add_fetch(&reads_done, 1, __ATOMIC_ACQ_REL);
    }
    return NULL;
}

static void wait_ok(pid_t pid, const char *what) {
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid %s", what);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (status %#x)", what, status);
}

static void child_main(long threads) {
    char path[4096];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART: blocked reads return EINTR */
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
    CHECK(pipe(pipefd) == 0, "pipe");
    pthread_t *ts = calloc((size_t)threads, sizeof *ts);
    pthread_t rt;
    for (long t = 0; t < threads; t++) CHECK(pthread_create(&ts[t], NULL, writer, (void *)t) == 0, "create");
    CHECK(pthread_create(&rt, NULL, reader, NULL) == 0, "create reader");
    for (long spins = 0; __atomic_load_n(&opened, __ATOMIC_ACQUIRE) < threads; spins++) {
        CHECK(spins < 100000, "writers never opened their files");
        usleep(200);
    }

    snprintf(path, sizeof path, "%s/v%d.dat", dir, child_index);
    pid_t pid = vfork();
    if (pid == 0) {
        execl(self, self, "leaf", path, LEAF, (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0, "vfork");
    wait_ok(pid, "vfork+exec leaf");

    snprintf(path, sizeof path, "%s/s%d.dat", dir, child_index);
    char *argv[] = {(char *)self, "leaf", path, LEAF, NULL};
    CHECK(posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0, "posix_spawn");
    wait_ok(pid, "posix_spawn leaf");

    char lib[4096];
    snprintf(lib, sizeof lib, "%s/libplug.so", dir);
    snprintf(path, sizeof path, "%s/d%d.dat", dir, child_index);
    for (int i = 0; i < DLOPENS; i++) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        CHECK(h != NULL, "dlopen %s: %s", lib, dlerror());
        int (*plug_write)(const char *, long) = (int (*)(const char *, long))dlsym(h, "plug_write");
        CHECK(plug_write != NULL, "dlsym");
        CHECK(plug_write(path, PLUG) == 0, "plug_write");
        CHECK(dlclose(h) == 0, "dlclose");
    }

    /* Interrupt the reader until all its reads came back. */
    for (long spins = 0; __atomic_load_n(&reads_done, __ATOMIC_ACQUIRE) < EINTRS; spins++) {
        CHECK(spins < 40000, "reader never interrupted");
        pthread_kill(rt, SIGUSR1);
        usleep(500);
    }
    CHECK(pthread_join(rt, NULL) == 0, "join reader");
    __atomic_store_n(&main_done, 1, __ATOMIC_RELEASE);
    for (long t = 0; t < threads; t++) CHECK(pthread_join(ts[t], NULL) == 0, "join");
    exit(read_failed ? 1 : 0);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "leaf") == 0) leaf(argv[2], arg_long(argc, argv, 3, "N"));
    dir = arg_str(argc, argv, 1, "DIR");
    long procs = arg_long(argc, argv, 2, "PROCS");
    long threads = arg_long(argc, argv, 3, "THREADS");
    iters = arg_long(argc, argv, 4, "ITERS");
    self = argv[0];
    pid_t *pids = calloc((size_t)procs, sizeof *pids);
    for (long i = 0; i < procs; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0, "fork");
        if (pid == 0) {
            child_index = (int)i;
            child_main(threads);
        }
        pids[i] = pid;
    }
    int ok = 1;
    for (long i = 0; i < procs; i++) {
        int status;
        CHECK(waitpid(pids[i], &status, 0) == pids[i], "waitpid");
        ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    return ok ? 0 : 1;
}
