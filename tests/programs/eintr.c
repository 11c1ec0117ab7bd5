/*
 * eintr MODE N
 *
 * MODE alarm: N times: arm a periodic 10 ms ITIMER_REAL (SIGALRM handler
 *   installed without SA_RESTART), read(pipe, 1 byte) on an empty pipe,
 *   which must return -1 with errno EINTR, disarm.  The handler makes no
 *   call.  Hooked calls: read x N, all failing with EINTR.  Prints
 *   "eintr N" and exits 0 when every read failed so.
 * MODE storm: a periodic 20 us ITIMER_REAL whose SIGALRM handler (SA_RESTART)
 *   makes one write(devnull, 8 bytes) and saves/restores errno, while the
 *   main thread makes N x write(devnull, 8 bytes); then disarms.  Prints
 *   "storm N H" where H is the number of handler calls.  Hooked calls:
 *   open x 1 (/dev/null), write x N + H, close x 1.
 */
#include "common.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

static volatile long handled;
static int devnull = -1;

static void on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    if (devnull >= 0) {
        char b[8] = {0};
        if (write(devnull, b, sizeof b) == (ssize_t)sizeof b) handled++;
    }
    errno = saved;
}

static void timer(long us) {
    struct itimerval it = {{0, us}, {0, us}};
    CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0, "setitimer");
}

int main(int argc, char **argv) {
    const char *mode = arg_str(argc, argv, 1, "MODE");
    long n = arg_long(argc, argv, 2, "N");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    if (strcmp(mode, "alarm") == 0) {
        int p[2];
        char c;
        CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
        CHECK(pipe(p) == 0, "pipe");
        for (long i = 0; i < n; i++) {
            timer(10000);
            ssize_t r = read(p[0], &c, 1);
            int e = errno;
            timer(0);
            if (!(r == -1 && e == EINTR)) {
                fprintf(stderr, "read returned %zd errno %d, want -1/EINTR (%d)\n", r, e, EINTR);
                return 1;
            }
        }
        printf("eintr %ld\n", n);
        return 0;
    }
    CHECK(strcmp(mode, "storm") == 0, "bad MODE %s", mode);
    devnull = open("/dev/null", O_WRONLY);
    CHECK(devnull >= 0, "open /dev/null");
    sa.sa_flags = SA_RESTART;
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
    char b[8] = {0};
    timer(20);
    for (long i = 0; i < n; i++) CHECK(write(devnull, b, sizeof b) == (ssize_t)sizeof b, "write");
    timer(0);
    int fd = devnull;
    devnull = -1;
    CHECK(close(fd) == 0, "close");
    printf("storm %ld %ld\n", n, handled);
    return 0;
}
