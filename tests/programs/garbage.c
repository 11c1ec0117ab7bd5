/*
 * garbage SEED ROUNDS MODE
 *
 * A hostile producer: maps the session's ring segment read-write (the name
 * comes from MLPROF_SHM or MLPROF_SESSION, as in ringpeek.h) and, ROUNDS
 * times, writes random bytes (xorshift, seeded) into it, pausing 100 us
 * between rounds so that the collector's drain passes see each state:
 *   - lane blocks: random bytes at random offsets, and every 4th round a
 *     lane set to ACTIVE or RETIRED (random generation) with this process's
 *     pid, tid and uid and a random image (so the collector drains it rather
 *     than freeing it) and random head/tail;
 *   - slots: random bytes, sometimes shaped like string definitions with
 *     random lengths;
 *   - MODE all: also the header after its first 16 bytes (magic, version,
 *     header size stay; geometry, counters, state do not).
 * Not preloaded; prints "scribbled N" and exits 0.
 */
#include "ringpeek.h"
#include <stdint.h>
#include <sys/syscall.h>

static uint64_t rng;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv) {
    rng = (uint64_t)arg_long(argc, argv, 1, "SEED") * 0x9e3779b97f4a7c15ull + 1;
    long rounds = arg_long(argc, argv, 2, "ROUNDS");
    int all = strcmp(arg_str(argc, argv, 3, "MODE"), "all") == 0;
    char name[256];
    ringpeek_name(name, sizeof name);
    int fd = ringpeek_open_fd(name, O_RDWR);
    CHECK(fd >= 0, "open %s", name);
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size >= 4096, "fstat");
    size_t size = (size_t)st.st_size;
    unsigned char *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(base != MAP_FAILED, "mmap");
    uint32_t lanes = *(uint32_t *)(base + 16), capacity = *(uint32_t *)(base + 20);
    CHECK(lanes >= 1 && capacity >= 1, "geometry");
    size_t lanes_at = 4096, slots_at = 4096 + (size_t)lanes * 768;
    size_t slots_len = (size_t)lanes * capacity * 64;
    CHECK(slots_at + slots_len <= size, "geometry vs size");
    uint32_t pid = (uint32_t)getpid(), tid = (uint32_t)syscall(SYS_gettid);
    for (long r = 0; r < rounds; r++) {
        uint64_t pick = next() % 4;
        if (pick == 0) {
            uint32_t lane = (uint32_t)(next() % lanes);
            unsigned char *l = base + lanes_at + (size_t)lane * 768;
            uint64_t head = next() % 4 == 0 ? next() : next() % (2ull * capacity);
            uint64_t tail = next() % 2 ? head - next() % (capacity + 2) : next();
            __atomic_store_n((uint32_t *)(l + 4), pid, __ATOMIC_RELAXED);
            __atomic_store_n((uint32_t *)(l + 8), tid, __ATOMIC_RELAXED);
            __atomic_store_n((uint32_t *)(l + 12), (uint32_t)geteuid(), __ATOMIC_RELAXED);
            __atomic_store_n((uint64_t *)(l + 16), next(), __ATOMIC_RELAXED);
            __atomic_store_n((uint64_t *)(l + 256), tail, __ATOMIC_RELAXED);
            __atomic_store_n((uint64_t *)(l + 128), head, __ATOMIC_RELAXED);
            uint32_t state = next() % 2 ? RINGPEEK_ACTIVE : RINGPEEK_RETIRED;
            __atomic_store_n((uint32_t *)l, (uint32_t)(next() << 3) | state, __ATOMIC_RELEASE);
        } else if (pick == 1) {
            size_t at = lanes_at + next() % ((size_t)lanes * 768);
            size_t n = 1 + next() % 64;
            for (size_t i = 0; i < n && at + i < slots_at; i++) base[at + i] = (unsigned char)next();
        } else if (pick == 2 || !all) {
            size_t slot = next() % ((size_t)lanes * capacity);
            unsigned char *s = base + slots_at + slot * 64;
            for (int i = 0; i < 64; i += 8) *(uint64_t *)(s + i) = next();
            if (next() % 2) {
                *(uint16_t *)s = (uint16_t)(0x8000 + next() % 6); /* control kinds */
                *(uint64_t *)(s + 48) = next() % 8192;            /* a string length */
            }
        } else {
            size_t at = 16 + next() % (4096 - 24);
            *(uint64_t *)(base + at) = next();
        }
        usleep(100);
    }
    printf("scribbled %ld\n", rounds);
    return 0;
}
