/*
 * plug.c - a shared library for the dlopen/dlclose stress (built with
 * gcc -shared -fPIC).  plug_write(path, n): open(path, O_WRONLY|O_CREAT|
 * O_APPEND), n x write(fd, 64 bytes), close(fd); returns 0 on success.
 * Its calls go through its own PLT, so they are hooked like the program's.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

int plug_write(const char *path, long n) {
    char buf[64];
    memset(buf, 'p', sizeof buf);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return -1;
    for (long i = 0; i < n; i++)
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) return -1;
    return close(fd);
}
