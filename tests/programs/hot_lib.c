/*
 * libhot_tasks.so, for `mlprof-collect --sample` (tests/tests/hotspots.rs): two hot functions
 * with distinct code, each called by its own non-inlined caller, built -O2
 * -fomit-frame-pointer so that only DWARF CFI can find the callers.
 *
 *   run_alpha(ms): calls hot_alpha until ms milliseconds of CPU time have passed
 *   run_beta(ms):  the same with hot_beta
 *
 * The time is the thread's CPU clock (vdso, no system call), read between calls of some
 * hundreds of microseconds, so nearly every sample lands in the hot function.
 */
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) double hot_alpha(long n) {
    volatile double x = 0;
    for (long i = 0; i < n; i++) x += (double)i * 0.5;
    return x;
}

__attribute__((noinline)) long hot_beta(long n) {
    volatile long h = 1469598103934665603L;
    for (long i = 0; i < n; i++) h = (h ^ i) * 1099511628211L;
    return h;
}

__attribute__((noinline)) double run_alpha(int ms) {
    double end = now_ms() + ms, sum = 0;
    while (now_ms() < end) sum += hot_alpha(200000);
    return sum;
}

__attribute__((noinline)) long run_beta(int ms) {
    double end = now_ms() + ms;
    long sum = 0;
    while (now_ms() < end) sum += hot_beta(200000);
    return sum;
}
