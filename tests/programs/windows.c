/*
 * windows
 *
 * A long-running program driven through stdin, one command per line, for capture windows
 * (a session's collector stopped and started again under it):
 *   write PATH N   open PATH (O_WRONLY|O_CREAT|O_APPEND), N x write(8 bytes), close;
 *                  prints "wrote N"
 *   peek           prints "lane 1" when the session's current ring (ringpeek.h, opened
 *                  afresh) has a lane of this process, else "lane 0" (or "lane -" when no
 *                  ring is there); the mapping is unmapped again (one mmap and one munmap)
 *   exit           exits 0
 * Hooked calls per command: write: open 1, write N, close 1; peek: mmap 1, munmap 1.
 */
#include "ringpeek.h"
#include <stdint.h>

static int has_lane(void) {
    char name[256];
    ringpeek_name(name, sizeof name);
    int fd = ringpeek_open_fd(name, O_RDONLY);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 4096) {
        syscall(SYS_close, fd);
        return -1;
    }
    unsigned char *base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    syscall(SYS_close, fd);
    if (base == MAP_FAILED) return -1;
    struct ringpeek r = {base, *(const uint32_t *)(base + 16), *(const uint32_t *)(base + 20)};
    int found = 0;
    for (uint32_t i = 0; i < r.lanes && !found; i++) {
        uint32_t state = RINGPEEK_STATE(ringpeek_u32(&r, i, 0));
        found = (state == RINGPEEK_ACTIVE || state == RINGPEEK_RETIRED) && ringpeek_u32(&r, i, 4) == (uint32_t)getpid();
    }
    munmap(base, (size_t)st.st_size);
    return found;
}

int main(void) {
    char line[4096], path[4000];
    long n;
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        if (sscanf(line, "write %3999s %ld", path, &n) == 2) {
            int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
            CHECK(fd >= 0, "open %s", path);
            char b[8] = {0};
            for (long i = 0; i < n; i++) CHECK(write(fd, b, sizeof b) == 8, "write");
            CHECK(close(fd) == 0, "close");
            printf("wrote %ld\n", n);
        } else if (strncmp(line, "peek", 4) == 0) {
            int lane = has_lane();
            if (lane < 0) printf("lane -\n");
            else printf("lane %d\n", lane);
        } else if (strncmp(line, "exit", 4) == 0) {
            return 0;
        } else {
            fprintf(stderr, "bad command: %s", line);
            return 2;
        }
    }
    return 0;
}
