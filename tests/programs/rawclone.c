/*
 * rawclone N
 *
 * Makes two processes that no fork handler sees: one with glibc's clone(fn, stack,
 * SIGCHLD, arg) and one with syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0) (which returns
 * twice, like fork). Each child makes N x write(/dev/null, 8 bytes) and exits 0 with _exit;
 * the parent makes N x write as well, while the children run, then waits for both.
 * Exact hooked calls: parent open 1 (/dev/null), write N; each child write N, _exit 0.
 * Each of the three must have its own lane: counts are exact per pid, nothing dropped.
 */
#define _GNU_SOURCE
#include "common.h"
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int fd;
static long n;
static char buf[8];

static void writes(void) {
    for (long i = 0; i < n; i++)
        CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf, "write");
}

static int child(void *arg) {
    (void)arg;
    writes();
    _exit(0);
}

int main(int argc, char **argv) {
    n = arg_long(argc, argv, 1, "N");
    fd = open("/dev/null", O_WRONLY);
    CHECK(fd >= 0, "open");
    static char stack[256 * 1024];
    pid_t a = clone(child, stack + sizeof stack, SIGCHLD, NULL);
    CHECK(a > 0, "clone");
    long b = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    CHECK(b >= 0, "syscall(SYS_clone)");
    if (b == 0) {
        writes();
        _exit(0);
    }
    writes();
    int status;
    CHECK(waitpid(a, &status, 0) == a && WIFEXITED(status) && WEXITSTATUS(status) == 0, "wait clone child");
    CHECK(waitpid((pid_t)b, &status, 0) == (pid_t)b && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "wait syscall child");
    printf("%d %d %ld\n", (int)getpid(), (int)a, b);
    return 0;
}
