/*
 * exit_child DIR N
 *
 * Forks a child that opens DIR/exit.dat, writes N x 64 bytes and calls
 * _exit(3) without closing the fd (no atexit handlers, no destructors).
 * The parent checks that the child exited with status 3 and exits 0.
 * Child counts: open 1, write N, close 0.  Parent: nothing hooked.
 */
#include "common.h"
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *dir = arg_str(argc, argv, 1, "DIR");
    long n = arg_long(argc, argv, 2, "N");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        char path[4096];
        char buf[64];
        memset(buf, 'x', sizeof buf);
        snprintf(path, sizeof path, "%s/exit.dat", dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(100);
        for (long i = 0; i < n; i++)
            if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) _exit(101);
        _exit(3);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 3) {
        fprintf(stderr, "unexpected child status 0x%x\n", status);
        return 1;
    }
    return 0;
}
