/* One pwrite to /dev/null every PACE_MS milliseconds, COUNT times, on absolute deadlines (no
 * drift), for --delay/--duration: the writes inside a window of D seconds number D / pace,
 * give or take one.
 * usage: paced_writer PACE_MS COUNT */
#include "common.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long pace_ms = arg_long(argc, argv, 1, "PACE_MS"), count = arg_long(argc, argv, 2, "COUNT");
    int fd = open("/dev/null", O_WRONLY);
    CHECK(fd >= 0, "open /dev/null");
    struct timespec next;
    CHECK(clock_gettime(CLOCK_MONOTONIC, &next) == 0, "clock_gettime");
    for (long i = 0; i < count; i++) {
        CHECK(pwrite(fd, "x", 1, 0) == 1, "pwrite");
        next.tv_nsec += pace_ms * 1000000L;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec += 1;
        }
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {
        }
    }
    return 0;
}
