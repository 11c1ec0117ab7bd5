/*
 * metadata DIR N        (1 <= N <= 200)
 *
 * Every metadata, directory, descriptor and loader call mlprof hooks, with known counts,
 * failing ones included. No stdio on success (its internal calls would add system calls).
 * strace is the reference: `write(-1, "MLPROF_MARK1", 12)` (EBADF) starts the compared
 * part, `write(-1, "MLPROF_MARK2", 12)` ends it (the dlopen section follows: the loader's own
 * system calls inside dlopen are invisible to the default mode's hooks).
 *
 *   write(-1, MARK1)                          write 1 (error)
 *   mkdir(DIR/d, 0755); mkdir again           mkdir 2 (1 error: EEXIST)
 *   N x fd = open(DIR/d/fK, O_CREAT|O_WRONLY) open N
 *       write(fd, 16 bytes); close(fd)        write N, close N
 *   N x stat(DIR/d/fK)                        stat N
 *   stat(DIR/d/missing)                       stat 1 more (error: ENOENT)
 *   lstat(DIR/d/f0)                           lstat 1
 *   dfd = open(DIR/d, O_RDONLY|O_DIRECTORY)   open 1
 *   fstatat(dfd, "f0", 0)                     fstatat 1
 *   fstatat(dfd, "missing", 0)                fstatat 1 more (error: ENOENT)
 *   fstat(dfd)                                fstat 1
 *   fstat(-1)                                 fstat 1 more (error: EBADF)
 *   statx(AT_FDCWD, DIR/d/f0, 0, STATX_SIZE)  statx 1
 *   __xstat(1, DIR/d/f0), __lxstat(1, ...), __fxstat(1, dfd), __fxstatat(1, dfd, "f0", 0)
 *                                             __xstat 1, __lxstat 1, __fxstat 1, __fxstatat 1
 *   access(DIR/d/f0, R_OK); access(missing)   access 2 (1 error: ENOENT)
 *   faccessat(dfd, "f0", R_OK, 0)             faccessat 1
 *   dir = opendir(DIR/d)                      opendir 1
 *   readdir(dir) until NULL                   readdir N + 3 (N + 2 entries, then the end)
 *   closedir(dir)                             closedir 1
 *   fd = open(DIR/d, O_RDONLY|O_DIRECTORY)    open 1
 *   dir = fdopendir(fd)                       fdopendir 1
 *   readdir64(dir) until NULL                 readdir64 N + 3
 *   closedir(dir)                             closedir 2 in all
 *   getdents64(dfd, buf, 64 KiB) twice        getdents64 2 (the second returns 0)
 *   fd = open(DIR/d/f0, O_RDWR)               open 1
 *   a = dup(fd); b = dup2(fd, 100); c = dup3(fd, 101, O_CLOEXEC); e = fcntl(fd, F_DUPFD_CLOEXEC, 0)
 *                                             dup 1, dup2 1, dup3 1, fcntl 1
 *   write(a, 16); write(b, 16); write(c, 16); write(e, 16)
 *                                             write 4 (attributed to DIR/d/f0)
 *   fcntl(fd, F_GETFL); dup(-1)               fcntl 2 in all, dup 2 (1 error: EBADF)
 *   fcntl(fd, F_SETOWN, -pgrp); fcntl(fd, F_GETOWN) == -pgrp
 *                                             fcntl 4 in all, no error (a negative owner is
 *                                             a process group, not a failure)
 *   close(a); close(b); close(c); close(e)    close 4
 *   ftruncate(fd, 4096)                       ftruncate 1
 *   fallocate(fd, 0, 0, 8192)                 fallocate 1
 *   posix_fallocate(fd, 0, 12288)             posix_fallocate 1
 *   posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL); posix_fadvise(-1, ...)
 *                                             posix_fadvise 2 (1 error: EBADF, returned)
 *   sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)   sync_file_range 1
 *   out = open(DIR/d/copy, O_CREAT|O_RDWR)    open 1
 *   sendfile(out, fd, &off, 4096)             sendfile 1
 *   copy_file_range(fd, &off, out, NULL, 4096, 0)      copy_file_range 1
 *   isatty(fd)                                isatty 1 (error: ENOTTY)
 *   tcgetattr(fd, &t)                         tcgetattr 1 (error: ENOTTY)
 *   close(out); close(fd)                     close 2
 *   rename(DIR/d/copy, DIR/d/copy2)           rename 1
 *   renameat(dfd, "copy2", dfd, "copy3")      renameat 1
 *   unlinkat(dfd, "copy3", 0)                 unlinkat 1
 *   N x unlink(DIR/d/fK); unlink(missing)     unlink N + 1 (1 error: ENOENT)
 *   mkdirat(dfd, "e", 0755)                   mkdirat 1
 *   rmdir(DIR/d/e); rmdir(DIR/d/e)            rmdir 2 (1 error: ENOENT)
 *   close(dfd)                                close 1
 *   rmdir(DIR/d)                              rmdir 3 in all
 *   write(-1, MARK2)                          write 1 more (error)
 *   h = dlopen("libm.so.6", RTLD_NOW)         dlopen 1 (a bare name, from the executable)
 *   dlopen(DIR/nonexistent.so, RTLD_NOW)      dlopen 1 more (error)
 *   dlclose(h)                                dlclose 1
 *
 * Totals: open N + 4, write N + 6 (2 errors), close N + 7, closedir 2.
 */
#include "common.h"
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

/* glibc < 2.33's stat entry points, still exported for old binaries. */
extern int __xstat(int ver, const char *path, struct stat *buf);
extern int __lxstat(int ver, const char *path, struct stat *buf);
extern int __fxstat(int ver, int fd, struct stat *buf);
extern int __fxstatat(int ver, int dirfd, const char *path, struct stat *buf, int flags);

static char path[4096];

static const char *at(const char *dir, const char *name) {
    snprintf(path, sizeof path, "%s/d/%s", dir, name);
    return path;
}

static void mark(const char *which) {
    CHECK(write(-1, which, strlen(which)) == -1 && errno == EBADF, "marker %s", which);
}

static void expect_fail(int ret, int err, const char *what) {
    CHECK(ret == -1 && errno == err, "%s: want -1/%d, got %d", what, err, ret);
}

int main(int argc, char **argv) {
    const char *dir = arg_str(argc, argv, 1, "DIR");
    long n = arg_long(argc, argv, 2, "N");
    if (n < 1 || n > 200) { fprintf(stderr, "N out of range\n"); return 2; }
    char name[64], top[4096], data[16];
    struct stat st;
    memset(data, 'm', sizeof data);
    snprintf(top, sizeof top, "%s/d", dir);

    pid_t pgrp = getpgrp(); /* before the window: strace would count it */
    mark("MLPROF_MARK1");
    CHECK(mkdir(top, 0755) == 0, "mkdir %s", top);
    expect_fail(mkdir(top, 0755), EEXIST, "mkdir again");
    for (long k = 0; k < n; k++) {
        snprintf(name, sizeof name, "f%ld", k);
        int fd = open(at(dir, name), O_CREAT | O_WRONLY, 0644);
        CHECK(fd >= 0, "open %s", path);
        CHECK(write(fd, data, sizeof data) == sizeof data, "write");
        CHECK(close(fd) == 0, "close");
    }
    for (long k = 0; k < n; k++) {
        snprintf(name, sizeof name, "f%ld", k);
        CHECK(stat(at(dir, name), &st) == 0 && st.st_size == 16, "stat %s", path);
    }
    expect_fail(stat(at(dir, "missing"), &st), ENOENT, "stat missing");
    CHECK(lstat(at(dir, "f0"), &st) == 0, "lstat");
    int dfd = open(top, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0, "open dir");
    CHECK(fstatat(dfd, "f0", &st, 0) == 0, "fstatat");
    expect_fail(fstatat(dfd, "missing", &st, 0), ENOENT, "fstatat missing");
    CHECK(fstat(dfd, &st) == 0 && S_ISDIR(st.st_mode), "fstat");
    expect_fail(fstat(-1, &st), EBADF, "fstat -1");
    struct statx stx;
    CHECK(statx(AT_FDCWD, at(dir, "f0"), 0, STATX_SIZE, &stx) == 0 && stx.stx_size == 16, "statx");
    CHECK(__xstat(1, at(dir, "f0"), &st) == 0, "__xstat");
    CHECK(__lxstat(1, at(dir, "f0"), &st) == 0, "__lxstat");
    CHECK(__fxstat(1, dfd, &st) == 0, "__fxstat");
    CHECK(__fxstatat(1, dfd, "f0", &st, 0) == 0, "__fxstatat");
    CHECK(access(at(dir, "f0"), R_OK) == 0, "access");
    expect_fail(access(at(dir, "missing"), R_OK), ENOENT, "access missing");
    CHECK(faccessat(dfd, "f0", R_OK, 0) == 0, "faccessat");

    DIR *d = opendir(top);
    CHECK(d != NULL, "opendir");
    long entries = 0;
    errno = 0;
    while (readdir(d) != NULL) entries++;
    CHECK(errno == 0 && entries == n + 2, "readdir: %ld entries", entries);
    CHECK(closedir(d) == 0, "closedir");
    int fd = open(top, O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0, "open dir again");
    d = fdopendir(fd);
    CHECK(d != NULL, "fdopendir");
    entries = 0;
    while (readdir64(d) != NULL) entries++;
    CHECK(entries == n + 2, "readdir64: %ld entries", entries);
    CHECK(closedir(d) == 0, "closedir");
    static char dents[65536];
    CHECK(getdents64(dfd, dents, sizeof dents) > 0, "getdents64");
    CHECK(getdents64(dfd, dents, sizeof dents) == 0, "getdents64 at the end");

    fd = open(at(dir, "f0"), O_RDWR);
    CHECK(fd >= 0, "open f0");
    int a = dup(fd), b = dup2(fd, 100), c = dup3(fd, 101, O_CLOEXEC), e = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    CHECK(a >= 0 && b == 100 && c == 101 && e >= 0, "dups");
    int dups[4] = {a, b, c, e};
    for (int i = 0; i < 4; i++) CHECK(write(dups[i], data, sizeof data) == sizeof data, "write dup");
    CHECK(fcntl(fd, F_GETFL) >= 0, "F_GETFL");
    expect_fail(dup(-1), EBADF, "dup -1");
    CHECK(fcntl(fd, F_SETOWN, -pgrp) == 0, "F_SETOWN");
    CHECK(fcntl(fd, F_GETOWN) == -pgrp, "F_GETOWN: the process group, negative");
    for (int i = 0; i < 4; i++) CHECK(close(dups[i]) == 0, "close dup");
    CHECK(ftruncate(fd, 4096) == 0, "ftruncate");
    CHECK(fallocate(fd, 0, 0, 8192) == 0, "fallocate");
    CHECK(posix_fallocate(fd, 0, 12288) == 0, "posix_fallocate");
    CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL) == 0, "posix_fadvise");
    CHECK(posix_fadvise(-1, 0, 0, POSIX_FADV_SEQUENTIAL) == EBADF, "posix_fadvise -1");
    CHECK(sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) == 0, "sync_file_range");
    int out = open(at(dir, "copy"), O_CREAT | O_RDWR, 0644);
    CHECK(out >= 0, "open copy");
    off_t off = 0;
    CHECK(sendfile(out, fd, &off, 4096) == 4096, "sendfile");
    off64_t off64 = 0;
    CHECK(copy_file_range(fd, &off64, out, NULL, 4096, 0) == 4096, "copy_file_range");
    errno = 0;
    CHECK(isatty(fd) == 0 && errno == ENOTTY, "isatty");
    struct termios t;
    expect_fail(tcgetattr(fd, &t), ENOTTY, "tcgetattr");
    CHECK(close(out) == 0 && close(fd) == 0, "close");
    char copy2[4096];
    snprintf(copy2, sizeof copy2, "%s/d/copy2", dir);
    CHECK(rename(at(dir, "copy"), copy2) == 0, "rename");
    CHECK(renameat(dfd, "copy2", dfd, "copy3") == 0, "renameat");
    CHECK(unlinkat(dfd, "copy3", 0) == 0, "unlinkat");
    for (long k = 0; k < n; k++) {
        snprintf(name, sizeof name, "f%ld", k);
        CHECK(unlink(at(dir, name)) == 0, "unlink %s", path);
    }
    expect_fail(unlink(at(dir, "missing")), ENOENT, "unlink missing");
    CHECK(mkdirat(dfd, "e", 0755) == 0, "mkdirat");
    CHECK(rmdir(at(dir, "e")) == 0, "rmdir e");
    expect_fail(rmdir(at(dir, "e")), ENOENT, "rmdir e again");
    CHECK(close(dfd) == 0, "close dfd");
    CHECK(rmdir(top) == 0, "rmdir");
    mark("MLPROF_MARK2");

    void *h = dlopen("libm.so.6", RTLD_NOW);
    CHECK(h != NULL, "dlopen libm: %s", dlerror());
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/nonexistent.so", dir);
    CHECK(dlopen(missing, RTLD_NOW) == NULL, "dlopen missing");
    CHECK(dlclose(h) == 0, "dlclose");
    return 0;
}
