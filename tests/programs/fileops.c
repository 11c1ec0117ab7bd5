/*
 * fileops DIR N        (1 <= N <= 100)
 *
 *   fd = creat(DIR/a.dat)                                  creat 1
 *   N x writev(fd, {10, 20 bytes})       -> 30             writev N
 *   N x pwritev(fd, {10, 20 bytes}, 0)   -> 30             pwritev N
 *   fsync(fd); fdatasync(fd)                               fsync 1, fdatasync 1
 *   close(fd)                                              close
 *   dfd = open(DIR, O_RDONLY|O_DIRECTORY)                  open 1
 *   fd = openat(dfd, "b.dat", O_RDWR|O_CREAT|O_TRUNC)      openat 1
 *   pwrite(fd, 4096 bytes, 0)            -> 4096           pwrite 1
 *   N x readv(fd, {10, 20 bytes})        -> 30             readv N
 *   N x lseek(fd, 0, SEEK_SET)           -> 0              lseek N
 *   N x preadv(fd, {10, 20 bytes}, 100)  -> 30             preadv N
 *   p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0)     mmap 1
 *   munmap(p, 4096)                                        munmap 1
 *   close(fd); close(dfd)                                  close 3 in all
 *
 * a.dat: bytes_written 60N.  b.dat: bytes_written 4096, bytes_read 60N.
 */
#include "common.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *dir = arg_str(argc, argv, 1, "DIR");
    long n = arg_long(argc, argv, 2, "N");
    if (n < 1 || n > 100) { fprintf(stderr, "N out of range\n"); return 2; }
    char path[4096];
    char b10[10], b20[20], big[4096];
    memset(b10, 'a', sizeof b10);
    memset(b20, 'b', sizeof b20);
    memset(big, 'c', sizeof big);
    struct iovec iov[2] = {{b10, sizeof b10}, {b20, sizeof b20}};

    snprintf(path, sizeof path, "%s/a.dat", dir);
    int fd = creat(path, 0644);
    CHECK(fd >= 0, "creat %s", path);
    for (long i = 0; i < n; i++)
        CHECK(writev(fd, iov, 2) == 30, "writev");
    for (long i = 0; i < n; i++)
        CHECK(pwritev(fd, iov, 2, 0) == 30, "pwritev");
    CHECK(fsync(fd) == 0, "fsync");
    CHECK(fdatasync(fd) == 0, "fdatasync");
    CHECK(close(fd) == 0, "close");

    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0, "open %s", dir);
    fd = openat(dfd, "b.dat", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "openat b.dat");
    CHECK(pwrite(fd, big, sizeof big, 0) == (ssize_t)sizeof big, "pwrite");
    for (long i = 0; i < n; i++)
        CHECK(readv(fd, iov, 2) == 30, "readv");
    for (long i = 0; i < n; i++)
        CHECK(lseek(fd, 0, SEEK_SET) == 0, "lseek");
    for (long i = 0; i < n; i++)
        CHECK(preadv(fd, iov, 2, 100) == 30, "preadv");
    volatile char *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED, "mmap");
    CHECK(p[0] == 'c', "mapped content");
    CHECK(munmap((void *)p, 4096) == 0, "munmap");
    CHECK(close(fd) == 0, "close");
    CHECK(close(dfd) == 0, "close");
    return 0;
}
