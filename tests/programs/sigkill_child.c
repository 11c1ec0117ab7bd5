/*
 * sigkill_child DIR N
 *
 * pipe(p); fork.
 * Child:  close(p[0]); open DIR/killed.dat; N x write(fd, 64 bytes);
 *         write(p[1], "r", 1) to tell the parent the N writes returned;
 *         then pause() forever (not hooked).
 *         Counts: close 1, open 1, write N+1 (N to the file, 1 to the pipe).
 * Parent: close(p[1]); read(p[0], 1 byte) (blocks until the child is done);
 *         kill(child, SIGKILL); waitpid; exits 0 when the child died of
 *         SIGKILL.  Counts: close 1, read 1.
 */
#include "common.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *dir = arg_str(argc, argv, 1, "DIR");
    long n = arg_long(argc, argv, 2, "N");
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        char path[4096];
        char buf[64];
        memset(buf, 'k', sizeof buf);
        CHECK(close(p[0]) == 0, "close");
        snprintf(path, sizeof path, "%s/killed.dat", dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0, "open %s", path);
        for (long i = 0; i < n; i++)
            CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf, "write");
        CHECK(write(p[1], "r", 1) == 1, "write pipe");
        for (;;) pause();
    }
    CHECK(close(p[1]) == 0, "close");
    char c;
    CHECK(read(p[0], &c, 1) == 1, "read pipe");
    CHECK(kill(pid, SIGKILL) == 0, "kill");
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        fprintf(stderr, "unexpected child status 0x%x\n", status);
        return 1;
    }
    return 0;
}
