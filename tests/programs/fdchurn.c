/*
 * fdchurn DIR THREADS ROUNDS WRITES
 *
 * THREADS threads; thread t does ROUNDS x { open(DIR/c<t>.dat,
 * O_WRONLY|O_CREAT|O_APPEND), WRITES x write(fd, 32 bytes), close(fd) }.
 * The threads run at the same time, so descriptor numbers are reused across
 * threads all the time.  Per file: opens ROUNDS, writes ROUNDS*WRITES,
 * closes ROUNDS, bytes_written 32*ROUNDS*WRITES.
 */
#include "common.h"
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

static const char *dir;
static long rounds, writes;

static void *churn(void *arg) {
    long t = (long)arg;
    char path[4096], buf[32];
    memset(buf, 'c', sizeof buf);
    snprintf(path, sizeof path, "%s/c%ld.dat", dir, t);
    for (long r = 0; r < rounds; r++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        CHECK(fd >= 0, "open %s", path);
        for (long i = 0; i < writes; i++) CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf, "write");
        CHECK(close(fd) == 0, "close");
    }
    return NULL;
}

int main(int argc, char **argv) {
    dir = arg_str(argc, argv, 1, "DIR");
    long threads = arg_long(argc, argv, 2, "THREADS");
    rounds = arg_long(argc, argv, 3, "ROUNDS");
    writes = arg_long(argc, argv, 4, "WRITES");
    pthread_t ts[64];
    CHECK(threads >= 1 && threads <= 64, "THREADS");
    for (long t = 0; t < threads; t++) CHECK(pthread_create(&ts[t], NULL, churn, (void *)t) == 0, "create");
    for (long t = 0; t < threads; t++) CHECK(pthread_join(ts[t], NULL) == 0, "join");
    return 0;
}
