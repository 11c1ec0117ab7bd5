/*
 * cancel
 *
 * pthread_cancel of a thread blocked in a hooked read (a cancellation point) on an empty
 * pipe: the cancellation unwinds through the hook, the thread's cleanup handler runs, and
 * pthread_join returns PTHREAD_CANCELED. Prints "canceled 1 cleaned 1"; the test compares
 * the output with and without mlprof.
 * Hooked calls: read 1 (never returns; in flight when cancelled), plus whatever pipe's
 * setup makes (none hooked).
 */
#include "common.h"
#include <pthread.h>
#include <unistd.h>

static int cleaned;
static int fds[2];
static pthread_barrier_t started;

static void cleanup(void *arg) {
    (void)arg;
    cleaned = 1;
}

static void *worker(void *arg) {
    (void)arg;
    char c;
    pthread_cleanup_push(cleanup, NULL);
    pthread_barrier_wait(&started);
    if (read(fds[0], &c, 1) >= 0) fprintf(stderr, "read returned\n");
    pthread_cleanup_pop(0);
    return NULL;
}

int main(void) {
    CHECK(pipe(fds) == 0, "pipe");
    pthread_barrier_init(&started, NULL, 2);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, NULL) == 0, "pthread_create");
    pthread_barrier_wait(&started);
    /* The worker is in read or about to be: a cancel request is acted on either way. */
    CHECK(pthread_cancel(t) == 0, "pthread_cancel");
    void *ret;
    CHECK(pthread_join(t, &ret) == 0, "pthread_join");
    printf("canceled %d cleaned %d\n", ret == PTHREAD_CANCELED, cleaned);
    return 0;
}
