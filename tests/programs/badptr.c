/*
 * badptr
 *
 * Every hooked libc function that takes a pointer, called with invalid pointers (1, 8,
 * an address in a PROT_NONE page, a string running into one) and with invalid flags or
 * modes next to a bad pointer. For each call it prints one line "name ret errno" to
 * stdout; the test runs it without and with mlprof and requires identical output (the
 * hook must return what libc returns, with the same errno, and never fault).
 * (fread/fwrite are left out: glibc itself crashes on a bad FILE*.)
 * Totals: open 6 (errors 4: the two good ones open /dev/null and /dev/zero), open64 1,
 * openat 2, openat64 1, creat 1, fopen 3, fopen64 1, readv 2, writev 2, preadv 1,
 * pwritev 1, read 1, write 1 (errors 0: /dev/null does not read the buffer), pread 1,
 * pwrite 1 (errors 0), ioctl 1, mmap 1 (errors 0); every other call fails.
 */
#include "common.h"
/* Bad pointers are the point of this program. */
#pragma GCC diagnostic ignored "-Wstringop-overread"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef O_TMPFILE
#define O_TMPFILE (020000000 | O_DIRECTORY)
#endif

static void show(const char *name, long ret) {
    printf("%s %ld %d\n", name, ret, ret < 0 ? errno : 0);
    fflush(stdout);
}

static void show_ptr(const char *name, void *ret) {
    printf("%s %s %d\n", name, ret ? "stream" : "null", ret ? 0 : errno);
    fflush(stdout);
}

int main(void) {
    /* A readable page followed by an inaccessible one; a string of 'a' that runs into it. */
    char *page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(page != MAP_FAILED, "mmap");
    memset(page, 'a', 4096);
    CHECK(mprotect(page + 4096, 4096, PROT_NONE) == 0, "mprotect");
    const char *bad1 = (const char *)1, *bad8 = (const char *)8;
    const char *guard = page + 4096, *runs_off = page + 4000;
    int fd = open("/dev/null", O_RDWR);
    CHECK(fd >= 0, "open /dev/null");

    errno = 0; show("open", open(bad1, O_RDONLY));
    errno = 0; show("open", open(guard, O_RDONLY));
    errno = 0; show("open", open(runs_off, O_RDONLY));
    errno = 0; show("open", open(bad8, O_RDONLY | O_TMPFILE, 0600)); /* EINVAL before the path */
    errno = 0; show("open64", open64(bad1, O_RDONLY));
    errno = 0; show("openat", openat(AT_FDCWD, bad8, O_RDONLY));
    errno = 0; show("openat", openat(987, bad1, O_RDONLY));
    errno = 0; show("openat64", openat64(AT_FDCWD, guard, O_RDONLY));
    errno = 0; show("creat", creat(bad1, 0600));
    errno = 0; show_ptr("fopen", fopen(bad1, "r"));
    errno = 0; show_ptr("fopen", fopen(runs_off, "r"));
    errno = 0; show_ptr("fopen", fopen(bad8, "z")); /* bad mode: EINVAL before the path */
    errno = 0; show_ptr("fopen64", fopen64(guard, "r"));

    errno = 0; show("readv", readv(fd, (struct iovec *)8, 1));
    errno = 0; show("readv", readv(987, (struct iovec *)8, 1)); /* EBADF before the iovecs */
    errno = 0; show("writev", writev(fd, (struct iovec *)8, 1));
    errno = 0; show("writev", writev(fd, (struct iovec *)guard, 2));
    errno = 0; show("preadv", preadv(fd, (struct iovec *)1, 1, 0));
    errno = 0; show("pwritev", pwritev(fd, (struct iovec *)guard, 1, 0));
    int zero = open("/dev/zero", O_RDONLY);
    CHECK(zero >= 0, "open /dev/zero");
    errno = 0; show("read", read(zero, (void *)guard, 16));
    errno = 0; show("write", write(fd, guard, 16));
    errno = 0; show("pread", pread(zero, (void *)8, 16, 0));
    errno = 0; show("pwrite", pwrite(fd, (void *)8, 16, 0));
    errno = 0; show("ioctl", ioctl(fd, FIONREAD, (void *)8));
    return 0;
}
