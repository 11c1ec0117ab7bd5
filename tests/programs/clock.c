/*
 * clock N M
 *
 * N x clock_gettime(CLOCK_MONOTONIC), then M x gettimeofday().
 * Nothing else that LD_PRELOAD can see.
 */
#include "common.h"
#include <sys/time.h>
#include <time.h>

int main(int argc, char **argv) {
    long n = arg_long(argc, argv, 1, "N");
    long m = arg_long(argc, argv, 2, "M");
    struct timespec ts;
    struct timeval tv;
    for (long i = 0; i < n; i++)
        CHECK(clock_gettime(CLOCK_MONOTONIC, &ts) == 0, "clock_gettime");
    for (long i = 0; i < m; i++)
        CHECK(gettimeofday(&tv, NULL) == 0, "gettimeofday");
    return 0;
}
