/*
 * badptr_meta
 *
 * The metadata, directory, descriptor, copy and terminal hooks of issue 16 called with invalid
 * pointers (1, 8, an address in a PROT_NONE page, a string running into one) and invalid
 * descriptors or flags. One line "name ret errno" per call on stdout; the test runs it without
 * and with mlprof and requires identical output (the hook returns what libc returns, with the
 * same errno, and never faults). Calls glibc itself crashes on (opendir/readdir/dlopen of a bad
 * pointer: glibc reads them in user space) are left out.
 * Totals (every call fails): stat 4, lstat 1, fstatat 3, fstat 1, statx 2, __xstat 1,
 * access 2, faccessat 1, mkdir 1, mkdirat 1, rmdir 1, unlink 1, unlinkat 1, rename 2,
 * renameat 1, fdopendir 1, closedir 1, getdents64 1, dup 1, dup2 1, dup3 1, fcntl 1,
 * ftruncate 1, fallocate 1, posix_fadvise 1 (returns the error), sendfile 1,
 * copy_file_range 1, isatty 1, tcgetattr 1.
 */
#include "common.h"
#pragma GCC diagnostic ignored "-Wstringop-overread"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wnonnull"
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

extern int __xstat(int ver, const char *path, struct stat *buf);

static void show(const char *name, long ret) {
    printf("%s %ld %d\n", name, ret, ret < 0 ? errno : 0);
    fflush(stdout);
}

int main(void) {
    char *page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(page != MAP_FAILED, "mmap");
    memset(page, 'a', 4096);
    CHECK(mprotect(page + 4096, 4096, PROT_NONE) == 0, "mprotect");
    const char *bad1 = (const char *)1, *bad8 = (const char *)8;
    const char *guard = page + 4096, *runs_off = page + 4000;
    int null = open("/dev/null", O_RDWR), zero = open("/dev/zero", O_RDONLY);
    int root = open("/", O_RDONLY | O_DIRECTORY);
    CHECK(null >= 0 && zero >= 0 && root >= 0, "open");
    struct stat st;
    struct statx stx;

    errno = 0; show("stat", stat(bad1, &st));
    errno = 0; show("stat", stat(guard, &st));
    errno = 0; show("stat", stat(runs_off, &st));
    errno = 0; show("stat", stat("/", (struct stat *)8));
    errno = 0; show("lstat", lstat(bad8, &st));
    errno = 0; show("fstatat", fstatat(AT_FDCWD, bad1, &st, 0));
    errno = 0; show("fstatat", fstatat(987, guard, &st, 0));
    errno = 0; show("fstatat", fstatat(null, "", (struct stat *)8, AT_EMPTY_PATH));
    errno = 0; show("fstat", fstat(null, (struct stat *)8));
    errno = 0; show("statx", statx(AT_FDCWD, bad1, 0, STATX_SIZE, &stx));
    errno = 0; show("statx", statx(AT_FDCWD, "/", 0, STATX_SIZE, (struct statx *)8));
    errno = 0; show("__xstat", __xstat(1, runs_off, &st));
    errno = 0; show("access", access(bad1, R_OK));
    errno = 0; show("access", access(guard, 12345)); /* bad mode too */
    errno = 0; show("faccessat", faccessat(AT_FDCWD, bad8, R_OK, 0));
    errno = 0; show("mkdir", mkdir(bad1, 0755));
    errno = 0; show("mkdirat", mkdirat(root, guard, 0755));
    errno = 0; show("rmdir", rmdir(runs_off));
    errno = 0; show("unlink", unlink(bad8));
    errno = 0; show("unlinkat", unlinkat(AT_FDCWD, bad1, 12345)); /* bad flags too */
    errno = 0; show("rename", rename(bad1, bad8));
    errno = 0; show("rename", rename("/nonexistent-mlprof", guard));
    errno = 0; show("renameat", renameat(AT_FDCWD, runs_off, 987, bad1));
    errno = 0; show("fdopendir", fdopendir(-1) ? 0 : -1);
    errno = 0; show("closedir", closedir(NULL));
    errno = 0; show("getdents64", getdents64(root, (void *)8, 4096));
    errno = 0; show("dup", dup(987));
    errno = 0; show("dup2", dup2(null, -1));
    errno = 0; show("dup3", dup3(null, null, 0));
    errno = 0; show("fcntl", fcntl(null, F_DUPFD, -1));
    errno = 0; show("ftruncate", ftruncate(root, 10));
    errno = 0; show("fallocate", fallocate(zero, 0, 0, -1));
    errno = 0; show("posix_fadvise", -posix_fadvise(null, 0, 0, 12345));
    errno = 0; show("sendfile", sendfile(null, zero, (off_t *)8, 16));
    errno = 0; show("copy_file_range", copy_file_range(zero, (off64_t *)8, null, NULL, 16, 0));
    errno = 0; show("isatty", isatty(-1) ? 0 : -1);
    errno = 0; show("tcgetattr", tcgetattr(null, (struct termios *)8));
    return 0;
}
