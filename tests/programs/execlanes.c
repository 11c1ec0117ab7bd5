/*
 * execlanes STAGE LAST
 *
 * Stage k (0..LAST) runs 3 threads that each make one write(/dev/null, 8 bytes) and stay
 * alive until the exec, then the main thread writes once and execs "execlanes k+1 LAST"
 * (the other threads die with the old image). The last stage waits (ringpeek.h) until the
 * collector has freed every lane of the earlier images: it may then hold only its own one
 * lane (that of the thread that writes), and prints "lanes 1". The pid stays the same.
 * Exact hooked calls per stage: open 1, write 4 (stage < LAST) or write 1 (last stage);
 * plus, in the last stage, one mmap (ringpeek).
 */
#include "ringpeek.h"
#include <pthread.h>
#include <stdint.h>

extern char **environ;

static int fd;
static pthread_barrier_t written;
static pthread_barrier_t exec_done;

static void *worker(void *arg) {
    (void)arg;
    char b[8] = {0};
    CHECK(write(fd, b, sizeof b) == 8, "write");
    pthread_barrier_wait(&written);
    pthread_barrier_wait(&exec_done); /* never passed: the exec ends this thread */
    return NULL;
}

static uint32_t lanes_of(const struct ringpeek *r, uint32_t pid) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->lanes; i++) {
        uint32_t state = RINGPEEK_STATE(ringpeek_u32(r, i, 0));
        if ((state == RINGPEEK_ACTIVE || state == RINGPEEK_RETIRED) && ringpeek_u32(r, i, 4) == pid) n++;
    }
    return n;
}

int main(int argc, char **argv) {
    long stage = arg_long(argc, argv, 1, "STAGE"), last = arg_long(argc, argv, 2, "LAST");
    fd = open("/dev/null", O_WRONLY);
    CHECK(fd >= 0, "open");
    char b[8] = {0};
    if (stage == last) {
        CHECK(write(fd, b, sizeof b) == 8, "write");
        struct ringpeek ring;
        ringpeek_open(&ring);
        RINGPEEK_WAIT(lanes_of(&ring, (uint32_t)getpid()) == 1, "the lanes of the replaced images to be freed");
        printf("lanes %u\n", lanes_of(&ring, (uint32_t)getpid()));
        return 0;
    }
    pthread_barrier_init(&written, NULL, 4);
    pthread_barrier_init(&exec_done, NULL, 4);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0, "pthread_create");
    pthread_barrier_wait(&written);
    CHECK(write(fd, b, sizeof b) == 8, "write");
    char next[32], lastarg[32];
    snprintf(next, sizeof next, "%ld", stage + 1);
    snprintf(lastarg, sizeof lastarg, "%ld", last);
    char *args[] = {argv[0], next, lastarg, NULL};
    execve(argv[0], args, environ);
    DIE("execve");
}
