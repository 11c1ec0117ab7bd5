/*
 * native_sites DIR N
 *
 * Calls from known native functions, for `mlprof-collect --sites` on threads
 * that run no Python: each call's site is its native caller, named by module
 * and function.  Built -O2 -fomit-frame-pointer (the callers keep no frame
 * pointers; mlprof reads only its own), with native_sites_lib.c as
 * libnative_sites.so beside it.  Every call's result is used, so that none is
 * a tail call (whose return address would be the caller's caller's).
 *
 *   writes_here(fd, N)       in the program: N writes of 8 bytes
 *   reads_in_lib(fd, N)      in the library: N reads of 4 bytes of /dev/zero
 *   thread_body (a thread):  N + 1 writes of 8 bytes
 *   closes_that_fail(N):     N close(BAD) -> -1 EBADF, errno checked after
 *                            each (the hook keeps it), exit 3 otherwise
 * main itself opens DIR/out and /dev/zero and closes both (2 open, 2 close).
 */
#include "common.h"
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#define BAD 987

long reads_in_lib(int fd, long n);

static int out_fd;
static long count;

__attribute__((noinline)) static long writes_here(int fd, long n) {
    long done = 0;
    for (long i = 0; i < n; i++) done += write(fd, "12345678", 8) == 8;
    return done;
}

__attribute__((noinline)) static void *thread_body(void *arg) {
    (void)arg;
    long done = 0;
    for (long i = 0; i < count + 1; i++) done += write(out_fd, "abcdefgh", 8) == 8;
    return (void *)done;
}

__attribute__((noinline)) static long closes_that_fail(long n) {
    long failed = 0;
    for (long i = 0; i < n; i++) {
        errno = 0;
        int ret = close(BAD);
        if (ret != -1 || errno != EBADF) {
            fprintf(stderr, "close #%ld: %d errno %d, want -1 EBADF\n", i, ret, errno);
            exit(3);
        }
        failed++;
    }
    return failed;
}

int main(int argc, char **argv) {
    const char *dir = arg_str(argc, argv, 1, "DIR");
    count = arg_long(argc, argv, 2, "N");
    char path[4096];
    snprintf(path, sizeof path, "%s/out", dir);
    out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(out_fd >= 0, "open %s", path);
    int zero = open("/dev/zero", O_RDONLY);
    CHECK(zero >= 0, "open /dev/zero");
    CHECK(writes_here(out_fd, count) == count, "writes");
    CHECK(reads_in_lib(zero, count) == count, "reads");
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, thread_body, NULL) == 0, "pthread_create");
    void *done = NULL;
    CHECK(pthread_join(thread, &done) == 0 && (long)done == count + 1, "thread");
    CHECK(closes_that_fail(count) == count, "closes");
    CHECK(close(zero) == 0 && close(out_fd) == 0, "close");
    return 0;
}
