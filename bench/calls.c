/*
 * calls.c - micro-benchmark of one libc call, used by bench/run.py.
 *
 *   calls OP N THREADS [RATE]
 *
 * OP is one of
 *   read           1-byte read() of /dev/zero (fd opened once per thread)
 *   write_null     1-byte write() to /dev/null (fd opened once per thread)
 *   clock_gettime  clock_gettime(CLOCK_MONOTONIC)
 *   open_close     open("/dev/null", O_RDONLY) + close()
 *   ioctl          ioctl(FIONREAD) on a pipe (created once per thread)
 *   cuda           cudaStreamQuery(0) of the real CUDA runtime named by $CALLS_CUDART
 *                  (dlopened RTLD_GLOBAL; the function is looked up with RTLD_DEFAULT, so a
 *                  preloaded interposer's definition wins, as for a program linked to it)
 *
 * Each thread sets up, warms up (N/10 calls, at most 100000), waits on a
 * barrier so that all threads run their measured loop together, then runs N
 * calls.
 *
 * With RATE (calls per second per thread) the loop is paced instead, the way a
 * training job makes its calls: no warm-up, and every 1 ms tick makes
 * RATE/1000 calls (the remainder spread over the ticks) and then sleeps until
 * the next tick with clock_nanosleep(TIMER_ABSTIME), so a run lasts N/RATE
 * seconds whatever the calls cost. bench/rate_cost.py uses it to measure the
 * CPU that recording adds at a given call rate. The loop is timed with two clock_gettime(CLOCK_MONOTONIC) calls per
 * thread (these may be intercepted by a preload library; two calls are
 * negligible against N).
 *
 * Output (stdout, one key=value per line; run.py parses them):
 *   ns_per_call=<mean over threads of loop wall time / N>
 *   ns_per_call_max=<slowest thread>
 *   wall_s=<barrier release to last thread done, seconds>
 *   calls=<N*THREADS>
 *   cpu_s=<getrusage(RUSAGE_SELF) user+sys of the whole process, at exit>
 *   utime_s=..., stime_s=...
 * Exit status 0 on success, 2 on usage error, 1 when a call fails.
 *
 * Built without _FORTIFY_SOURCE and without _FILE_OFFSET_BITS=64 so that the
 * program calls the plain symbols read/write/open/close/ioctl/clock_gettime.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum op { OP_READ, OP_WRITE_NULL, OP_CLOCK, OP_OPEN_CLOSE, OP_IOCTL, OP_CUDA };

static const struct { const char *name; enum op op; } ops[] = {
    {"read", OP_READ},
    {"write_null", OP_WRITE_NULL},
    {"clock_gettime", OP_CLOCK},
    {"open_close", OP_OPEN_CLOSE},
    {"ioctl", OP_IOCTL},
    {"cuda", OP_CUDA},
};

static int (*g_stream_query)(void *);

static enum op g_op;
static long g_n;
static long g_rate; /* calls/s per thread; 0 = as fast as possible */
static pthread_barrier_t g_barrier;
static struct timespec g_start; /* written by thread 0 after the barrier */

struct worker {
    pthread_t tid;
    int idx;
    double ns_per_call;
    struct timespec end;
    int failed;
    char err[160];
};

static inline uint64_t ts_ns(const struct timespec *t)
{
    return (uint64_t)t->tv_sec * 1000000000ull + (uint64_t)t->tv_nsec;
}

static void fail(struct worker *w, const char *what)
{
    if (!w->failed)
        snprintf(w->err, sizeof w->err, "%s: %s", what, strerror(errno));
    w->failed = 1;
}

/* One batch of `n` calls. Returns 0 or -1 (w->err set). */
static int run_batch(struct worker *w, long n, int fd, int pipe_rd)
{
    char buf[1];
    struct timespec ts;
    int avail;
    volatile uint64_t sink = 0;

    switch (g_op) {
    case OP_READ:
        for (long i = 0; i < n; i++)
            if (read(fd, buf, 1) != 1) { fail(w, "read /dev/zero"); return -1; }
        break;
    case OP_WRITE_NULL:
        buf[0] = 'x';
        for (long i = 0; i < n; i++)
            if (write(fd, buf, 1) != 1) { fail(w, "write /dev/null"); return -1; }
        break;
    case OP_CLOCK:
        for (long i = 0; i < n; i++) {
            if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) { fail(w, "clock_gettime"); return -1; }
            sink += (uint64_t)ts.tv_nsec;
        }
        break;
    case OP_OPEN_CLOSE:
        for (long i = 0; i < n; i++) {
            int f = open("/dev/null", O_RDONLY);
            if (f < 0) { fail(w, "open /dev/null"); return -1; }
            if (close(f) != 0) { fail(w, "close"); return -1; }
        }
        break;
    case OP_IOCTL:
        for (long i = 0; i < n; i++) {
            if (ioctl(pipe_rd, FIONREAD, &avail) != 0) { fail(w, "ioctl FIONREAD"); return -1; }
            sink += (uint64_t)avail;
        }
        break;
    case OP_CUDA:
        /* Without a GPU driver the real runtime fails fast (cudaErrorInsufficientDriver):
         * what is measured is the cost of the call path and of the hook around it. */
        for (long i = 0; i < n; i++)
            sink += (uint64_t)g_stream_query(0);
        break;
    }
    (void)sink;
    return 0;
}

/* N calls at g_rate calls/s: 1 ms ticks on absolute deadlines, so that a slow tick does not
 * push the following ones (the rate holds on average) and the sleeps need no clock reads. */
static int run_paced(struct worker *w, int fd, int pipe_rd)
{
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    long done = 0;
    uint64_t tick = 0;
    while (done < g_n) {
        tick++;
        /* Calls due by the end of this tick, with the rounding carried: rate*tick/1000. */
        long due = (long)((uint64_t)g_rate * tick / 1000);
        if (due > g_n) due = g_n;
        if (due > done && run_batch(w, due - done, fd, pipe_rd) != 0) return -1;
        done = due;
        next.tv_nsec += 1000000;
        if (next.tv_nsec >= 1000000000) { next.tv_nsec -= 1000000000; next.tv_sec++; }
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {}
    }
    return 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    int fd = -1, pfd[2] = {-1, -1};
    struct timespec t0, t1;
    long warm = g_n / 10;
    if (warm > 100000) warm = 100000;
    if (warm < 1) warm = 1;

    if (g_op == OP_READ && (fd = open("/dev/zero", O_RDONLY)) < 0) fail(w, "open /dev/zero");
    if (g_op == OP_WRITE_NULL && (fd = open("/dev/null", O_WRONLY)) < 0) fail(w, "open /dev/null");
    if (g_op == OP_IOCTL && pipe(pfd) != 0) fail(w, "pipe");

    if (!w->failed && g_rate == 0)
        run_batch(w, warm, fd, pfd[0]);

    /* All threads wait here even on failure so nobody deadlocks. */
    pthread_barrier_wait(&g_barrier);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (w->idx == 0)
        g_start = t0;
    if (!w->failed) {
        if (g_rate > 0)
            run_paced(w, fd, pfd[0]);
        else
            run_batch(w, g_n, fd, pfd[0]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);

    w->end = t1;
    w->ns_per_call = (double)(ts_ns(&t1) - ts_ns(&t0)) / (double)g_n;
    if (fd >= 0) close(fd);
    if (pfd[0] >= 0) { close(pfd[0]); close(pfd[1]); }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: calls OP N THREADS [RATE]\n  RATE: calls/s per thread, paced in 1 ms ticks\n  OP: read write_null clock_gettime open_close ioctl cuda\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) usage();
    size_t i;
    for (i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(argv[1], ops[i].name) == 0) break;
    if (i == sizeof ops / sizeof ops[0]) { fprintf(stderr, "calls: unknown OP '%s'\n", argv[1]); usage(); }
    g_op = ops[i].op;
    if (g_op == OP_CUDA) {
        const char *lib = getenv("CALLS_CUDART");
        if (!lib || !dlopen(lib, RTLD_NOW | RTLD_GLOBAL)) {
            fprintf(stderr, "calls: cannot load the CUDA runtime ($CALLS_CUDART=%s): %s\n",
                    lib ? lib : "(unset)", dlerror());
            return 1;
        }
        g_stream_query = (int (*)(void *))dlsym(RTLD_DEFAULT, "cudaStreamQuery");
        if (!g_stream_query) { fprintf(stderr, "calls: no cudaStreamQuery\n"); return 1; }
    }
    char *end;
    g_n = strtol(argv[2], &end, 10);
    if (*end || g_n < 1) { fprintf(stderr, "calls: bad N '%s'\n", argv[2]); usage(); }
    long nthreads = strtol(argv[3], &end, 10);
    if (*end || nthreads < 1 || nthreads > 1024) { fprintf(stderr, "calls: bad THREADS '%s'\n", argv[3]); usage(); }

    if (argc == 5) {
        g_rate = strtol(argv[4], &end, 10);
        if (*end || g_rate < 1) { fprintf(stderr, "calls: bad RATE '%s'\n", argv[4]); usage(); }
    }

    struct worker *ws = calloc((size_t)nthreads, sizeof *ws);
    if (!ws) { perror("calloc"); return 1; }
    pthread_barrier_init(&g_barrier, NULL, (unsigned)nthreads);
    for (long t = 0; t < nthreads; t++) {
        ws[t].idx = (int)t;
        int rc = pthread_create(&ws[t].tid, NULL, worker_main, &ws[t]);
        if (rc) { fprintf(stderr, "calls: pthread_create: %s\n", strerror(rc)); return 1; }
    }
    double sum = 0, mx = 0;
    uint64_t last_end = 0;
    int failed = 0;
    for (long t = 0; t < nthreads; t++) {
        pthread_join(ws[t].tid, NULL);
        if (ws[t].failed) { fprintf(stderr, "calls: thread %ld: %s\n", t, ws[t].err); failed = 1; }
        sum += ws[t].ns_per_call;
        if (ws[t].ns_per_call > mx) mx = ws[t].ns_per_call;
        if (ts_ns(&ws[t].end) > last_end) last_end = ts_ns(&ws[t].end);
    }
    if (failed) return 1;

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double ut = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
    double st = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    printf("ns_per_call=%.3f\n", sum / (double)nthreads);
    printf("ns_per_call_max=%.3f\n", mx);
    printf("wall_s=%.6f\n", (double)(last_end - ts_ns(&g_start)) / 1e9);
    printf("calls=%ld\n", g_n * nthreads);
    printf("cpu_s=%.6f\n", ut + st);
    printf("utime_s=%.6f\nstime_s=%.6f\n", ut, st);
    fflush(stdout);
    free(ws);
    return 0;
}
