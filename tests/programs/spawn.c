/*
 * spawn MODE DIR N M
 *
 * MODE vfork:        the parent writes N times to DIR/parent.dat
 *                    (open + N x write(64 bytes) + close), then vfork()s.
 *                    Between vfork and exec the child does, on the parent's
 *                    memory and TLS:
 *                      open("/dev/null", O_WRONLY), 3 x write(fd, 1 byte),
 *                      dup2(fd, 100), close(100), close(fd)
 *                    and then execs itself as "spawn child DIR N M".
 *                    None of these calls may be attributed to the parent.
 * MODE posix_spawn:  the same parent work, then posix_spawn()s itself as
 *                    "spawn child DIR N M".
 * MODE child:        writes M times to DIR/child.dat
 *                    (open + M x write(64 bytes) + close) and exits 0.
 *
 * The parent waits for the child and exits 0 when the child exited 0.
 * Parent counts: open 1, write N, close 1.  Child image counts: open 1,
 * write M, close 1.
 */
#include "common.h"
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void write_file(const char *dir, const char *name, long n) {
    char path[4096];
    char buf[64];
    memset(buf, 'w', sizeof buf);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "open %s", path);
    for (long i = 0; i < n; i++)
        CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf, "write");
    CHECK(close(fd) == 0, "close");
}

static int wait_ok(pid_t pid) {
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "child failed: status 0x%x\n", status);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = arg_str(argc, argv, 1, "MODE");
    const char *dir = arg_str(argc, argv, 2, "DIR");
    long n = arg_long(argc, argv, 3, "N");
    long m = arg_long(argc, argv, 4, "M");
    char *child_argv[] = {argv[0], "child", argv[2], argv[3], argv[4], NULL};

    if (strcmp(mode, "child") == 0) {
        write_file(dir, "child.dat", m);
        return 0;
    }
    if (strcmp(mode, "vfork") == 0) {
        write_file(dir, "parent.dat", n);
        pid_t pid = vfork();
        if (pid == 0) {
            /* vfork child: only async-signal-safe calls, then exec or _exit. */
            int fd = open("/dev/null", O_WRONLY);
            if (fd < 0) _exit(101);
            for (int i = 0; i < 3; i++)
                if (write(fd, "v", 1) != 1) _exit(102);
            if (dup2(fd, 100) != 100) _exit(103);
            if (close(100) != 0) _exit(104);
            if (close(fd) != 0) _exit(105);
            execve(argv[0], child_argv, environ);
            _exit(127);
        }
        CHECK(pid > 0, "vfork");
        return wait_ok(pid);
    }
    if (strcmp(mode, "posix_spawn") == 0) {
        write_file(dir, "parent.dat", n);
        pid_t pid;
        int rc = posix_spawn(&pid, argv[0], NULL, NULL, child_argv, environ);
        if (rc != 0) { errno = rc; DIE("posix_spawn"); }
        return wait_ok(pid);
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
