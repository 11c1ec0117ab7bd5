/*
 * libnative_sites.so, for native_sites.c: a library function whose reads are
 * attributed to it (module: this library's path).
 */
#include <unistd.h>

__attribute__((noinline)) long reads_in_lib(int fd, long n) {
    char buf[4];
    long done = 0;
    for (long i = 0; i < n; i++) done += read(fd, buf, sizeof buf) == 4;
    return done;
}
