/*
 * errors DIR N
 *
 * Failing calls; after each one the program checks the return value and
 * that errno is exactly the expected value (the hook must preserve it),
 * and exits 3 otherwise.  errno is set to 0 before each failing call.
 *   N x read(BAD, 10)           -> -1 EBADF
 *   N x write(BAD, 10)          -> -1 EBADF
 *   N x pread(BAD, 10, 0)       -> -1 EBADF
 *   N x close(BAD)              -> -1 EBADF
 *   N x open(DIR/missing)       -> -1 ENOENT
 *   N x fopen(DIR/missing, "r") -> NULL ENOENT
 * Then successful calls with errno preset to 4242, which must still be
 * 4242 afterwards (glibc does not touch errno on success):
 *   fd = open("/dev/zero"); N x read(fd, 10) -> 10; close(fd)
 * BAD is an fd number checked to be closed (fcntl, not hooked).
 *
 * Totals: read 2N (errors N, bytes 10N), write N (errors N), pread N
 * (errors N), close N+1 (errors N), open N+1 (errors N), fopen N (errors N).
 */
#include "common.h"
#include <fcntl.h>
#include <unistd.h>

#define BAD 987

static void expect(int failed, int want, const char *what, long i) {
    int e = errno;
    if (!failed) {
        fprintf(stderr, "%s #%ld: did not fail\n", what, i);
        exit(3);
    }
    if (e != want) {
        fprintf(stderr, "%s #%ld: errno %d, want %d\n", what, i, e, want);
        exit(3);
    }
}

int main(int argc, char **argv) {
    const char *dir = arg_str(argc, argv, 1, "DIR");
    long n = arg_long(argc, argv, 2, "N");
    char buf[10];
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    CHECK(fcntl(BAD, F_GETFD) == -1 && errno == EBADF, "fd %d is open", BAD);

    for (long i = 0; i < n; i++) {
        errno = 0;
        expect(read(BAD, buf, sizeof buf) == -1, EBADF, "read", i);
    }
    for (long i = 0; i < n; i++) {
        errno = 0;
        expect(write(BAD, buf, sizeof buf) == -1, EBADF, "write", i);
    }
    for (long i = 0; i < n; i++) {
        errno = 0;
        expect(pread(BAD, buf, sizeof buf, 0) == -1, EBADF, "pread", i);
    }
    for (long i = 0; i < n; i++) {
        errno = 0;
        expect(close(BAD) == -1, EBADF, "close", i);
    }
    for (long i = 0; i < n; i++) {
        errno = 0;
        expect(open(missing, O_RDONLY) == -1, ENOENT, "open", i);
    }
    for (long i = 0; i < n; i++) {
        errno = 0;
        expect(fopen(missing, "r") == NULL, ENOENT, "fopen", i);
    }

    int fd = open("/dev/zero", O_RDONLY);
    CHECK(fd >= 0, "open /dev/zero");
    for (long i = 0; i < n; i++) {
        errno = 4242;
        ssize_t r = read(fd, buf, sizeof buf);
        if (r != 10 || errno != 4242) {
            fprintf(stderr, "read /dev/zero #%ld: ret %zd errno %d, want 10 and 4242\n", i, r, errno);
            exit(3);
        }
    }
    CHECK(close(fd) == 0, "close");
    return 0;
}
