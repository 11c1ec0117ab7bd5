/*
 * common.h - helpers shared by the mlprof test programs.
 *
 * The programs are compiled with `gcc -O1 -pthread -U_FORTIFY_SOURCE` and
 * without _FILE_OFFSET_BITS=64, so they call the plain libc symbols
 * (open, pread, lseek, mmap, fopen...) named in docs/interfaces.md.
 *
 * Diagnostics go to stderr through fprintf: stdio reaches the kernel through
 * glibc-internal calls, which LD_PRELOAD cannot see, so they do not change
 * the counts the tests assert.  Programs print nothing on success unless the
 * test needs a line (a ready marker).
 */
#ifndef MLPROF_TEST_COMMON_H
#define MLPROF_TEST_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIE(...)                                                              \
    do {                                                                      \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                       \
        fprintf(stderr, __VA_ARGS__);                                         \
        fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));         \
        exit(1);                                                              \
    } while (0)

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) DIE(__VA_ARGS__);                                        \
    } while (0)

static inline long arg_long(int argc, char **argv, int i, const char *name) {
    if (i >= argc) {
        fprintf(stderr, "missing argument %d (%s)\n", i, name);
        exit(2);
    }
    char *end = NULL;
    long v = strtol(argv[i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0' || v < 0) {
        fprintf(stderr, "bad %s: %s\n", name, argv[i]);
        exit(2);
    }
    return v;
}

static inline const char *arg_str(int argc, char **argv, int i, const char *name) {
    if (i >= argc) {
        fprintf(stderr, "missing argument %d (%s)\n", i, name);
        exit(2);
    }
    return argv[i];
}

#endif
