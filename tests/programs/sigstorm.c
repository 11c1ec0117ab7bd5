/*
 * sigstorm N
 *
 * A signal storm against exact counts: SIGALRM every 100 us (setitimer), whose handler calls
 * clock_gettime(CLOCK_MONOTONIC) once and write(/dev/null, 1 byte) once, while the main loop
 * makes N x clock_gettime(CLOCK_MONOTONIC) and N/16 x write(/dev/null, 1 byte). Handlers that
 * interrupt a hooked call run inside it. Prints "handled H": the number of handler runs.
 * Exact: clock_gettime count N + H; writes: recorded + dropped (interrupted) = N/16 + H;
 * open 1.
 */
#include "common.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int fd;
static volatile sig_atomic_t handled;

static void on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char c = 0;
    if (write(fd, &c, 1) != 1) _exit(3);
    handled++;
    errno = saved;
}

int main(int argc, char **argv) {
    long n = arg_long(argc, argv, 1, "N");
    fd = open("/dev/null", O_WRONLY);
    CHECK(fd >= 0, "open");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
    struct itimerval every = {{0, 100}, {0, 100}};
    CHECK(setitimer(ITIMER_REAL, &every, NULL) == 0, "setitimer");
    struct timespec ts;
    char c = 0;
    for (long i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (i % 16 == 0 && write(fd, &c, 1) != 1) DIE("write");
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("handled %ld\n", (long)handled);
    return 0;
}
