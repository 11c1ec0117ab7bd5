/*
 * writer PATH N EXIT [PAUSE_AT]
 *
 * open(PATH, O_WRONLY|O_CREAT|O_TRUNC); N x write(fd, 64 bytes); close(fd);
 * then prints "done N" on stdout and exits with status EXIT, or kills
 * itself with SIGKILL when EXIT is "sig9".
 * With PAUSE_AT (0 <= PAUSE_AT <= N): after PAUSE_AT writes it prints
 * "paused" on stdout and waits for one line on stdin before going on.
 * stdout/stdin go through stdio (glibc-internal calls, invisible to
 * LD_PRELOAD), so the hooked counts are exactly: open 1, write N, close 1.
 */
#include "common.h"
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *path = arg_str(argc, argv, 1, "PATH");
    long n = arg_long(argc, argv, 2, "N");
    const char *exit_arg = arg_str(argc, argv, 3, "EXIT");
    int sig9 = strcmp(exit_arg, "sig9") == 0;
    long code = sig9 ? 0 : arg_long(argc, argv, 3, "EXIT");
    long pause_at = argc > 4 ? arg_long(argc, argv, 4, "PAUSE_AT") : -1;
    char buf[64];
    memset(buf, 'w', sizeof buf);

    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "open %s", path);
    for (long i = 0; i <= n; i++) {
        if (i == pause_at) {
            char line[64];
            printf("paused\n");
            fflush(stdout);
            CHECK(fgets(line, sizeof line, stdin) != NULL, "fgets");
        }
        if (i < n)
            CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf, "write");
    }
    CHECK(close(fd) == 0, "close");
    printf("done %ld\n", n);
    fflush(stdout);
    if (sig9) raise(SIGKILL);
    return (int)code;
}
