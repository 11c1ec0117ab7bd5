/*
 * ringpeek.h - a read-only look at the mlprof ring (format/src/ring/layout.rs,
 * RING_ABI_VERSION 5), for test programs that must wait for the collector
 * instead of sleeping: "is a lane free", "has my lane been drained".
 *
 * Layout used: header (4096 bytes) with lane_count u32 at offset 16 and
 * lane_capacity u32 at 20; lanes of 768 bytes from offset 4096 with
 * state u32 at +0 (low 3 bits: UNBACKED 0, FREE 1, CLAIMING 2, ACTIVE 3,
 * RETIRED 4; the rest is the generation), pid u32 at +4, tid u32 at +8,
 * head u64 at +128 and tail u64 at +256.
 *
 * The segment is the file MLPROF_SHM when set (launcher mode), else the
 * session's $MLPROF_SHM_DIR (default /dev/shm)/mlprof-<euid>-<MLPROF_SESSION
 * or default>.  It is opened with the raw openat system call (not hooked);
 * the mmap is hooked (one recorded mmap call), and the descriptor is left
 * open so that no close is recorded.
 */
#ifndef MLPROF_TEST_RINGPEEK_H
#define MLPROF_TEST_RINGPEEK_H

#include "common.h"
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct ringpeek {
    const unsigned char *base;
    uint32_t lanes;
    uint32_t capacity;
};

static inline void ringpeek_name(char *out, size_t len) {
    const char *shm = getenv("MLPROF_SHM");
    const char *dir = getenv("MLPROF_SHM_DIR");
    const char *session = getenv("MLPROF_SESSION");
    if (shm && *shm)
        snprintf(out, len, "%s", shm);
    else
        snprintf(out, len, "%s/mlprof-%u-%s", dir && *dir ? dir : "/dev/shm", (unsigned)geteuid(),
                 session && *session ? session : "default");
}

/* The segment, opened with the raw system call (the open hooks would record it). */
static inline int ringpeek_open_fd(const char *path, int flags) {
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags | O_CLOEXEC, 0);
}

#define RINGPEEK_STATE(word) ((word) & 7u)
#define RINGPEEK_FREE 1u
#define RINGPEEK_ACTIVE 3u
#define RINGPEEK_RETIRED 4u

static inline void ringpeek_open(struct ringpeek *r) {
    char name[256];
    ringpeek_name(name, sizeof name);
    int fd = ringpeek_open_fd(name, O_RDONLY);
    CHECK(fd >= 0, "open %s", name);
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size >= 4096, "fstat %s", name);
    void *base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(base != MAP_FAILED, "mmap %s", name);
    r->base = base;
    r->lanes = *(const uint32_t *)(r->base + 16);
    r->capacity = *(const uint32_t *)(r->base + 20);
}

static inline uint32_t ringpeek_u32(const struct ringpeek *r, uint32_t lane, size_t at) {
    return __atomic_load_n((const uint32_t *)(r->base + 4096 + (size_t)lane * 768 + at), __ATOMIC_ACQUIRE);
}

static inline uint64_t ringpeek_u64(const struct ringpeek *r, uint32_t lane, size_t at) {
    return __atomic_load_n((const uint64_t *)(r->base + 4096 + (size_t)lane * 768 + at), __ATOMIC_ACQUIRE);
}

static inline uint32_t ringpeek_free_lanes(const struct ringpeek *r) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->lanes; i++)
        n += RINGPEEK_STATE(ringpeek_u32(r, i, 0)) == RINGPEEK_FREE;
    return n;
}

/* Whether every lane owned by process `pid` has been drained (tail == head). */
static inline int ringpeek_drained(const struct ringpeek *r, uint32_t pid) {
    for (uint32_t i = 0; i < r->lanes; i++) {
        uint32_t state = RINGPEEK_STATE(ringpeek_u32(r, i, 0));
        if ((state == RINGPEEK_ACTIVE || state == RINGPEEK_RETIRED) && ringpeek_u32(r, i, 4) == pid &&
            ringpeek_u64(r, i, 256) != ringpeek_u64(r, i, 128))
            return 0;
    }
    return 1;
}

/* Polls `cond` every 200 us for up to 20 s (usleep is not hooked); exits 1 on timeout. */
#define RINGPEEK_WAIT(cond, what)                                             \
    do {                                                                      \
        long spins_ = 0;                                                      \
        while (!(cond)) {                                                     \
            if (++spins_ > 100000) {                                          \
                fprintf(stderr, "timed out waiting for %s\n", what);          \
                exit(1);                                                      \
            }                                                                 \
            usleep(200);                                                      \
        }                                                                     \
    } while (0)

#endif
