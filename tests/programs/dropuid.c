/*
 * dropuid UID N M
 *
 * Started as root with libmlprof preloaded in an attach session: opens
 * /dev/null, makes N x write(fd, 8 bytes), waits (ringpeek.h) until the
 * collector has drained them, then switches every id to UID
 * (setresgid/setresuid; PR_SET_DUMPABLE 1 so that /proc/<pid> is UID's),
 * and starts a thread that makes M x write(fd, 8 bytes) - records that now
 * come from another user's process; waits until the collector drained
 * them too (it must see the process alive).  Prints "dropped", exits 0.
 */
#include "ringpeek.h"
#include <grp.h>
#include <pthread.h>
#include <sys/prctl.h>

static int fd;
static long m;

static void *late(void *arg) {
    (void)arg;
    char b[8] = {0};
    for (long i = 0; i < m; i++) CHECK(write(fd, b, sizeof b) == (ssize_t)sizeof b, "write");
    return NULL;
}

int main(int argc, char **argv) {
    uid_t uid = (uid_t)arg_long(argc, argv, 1, "UID");
    long n = arg_long(argc, argv, 2, "N");
    m = arg_long(argc, argv, 3, "M");
    char b[8] = {0};
    fd = open("/dev/null", O_WRONLY);
    CHECK(fd >= 0, "open");
    for (long i = 0; i < n; i++) CHECK(write(fd, b, sizeof b) == (ssize_t)sizeof b, "write");
    struct ringpeek ring;
    ringpeek_open(&ring);
    RINGPEEK_WAIT(ringpeek_drained(&ring, (uint32_t)getpid()), "the collector to drain our lane");
    CHECK(setgroups(0, NULL) == 0, "setgroups");
    CHECK(setresgid(uid, uid, uid) == 0, "setresgid");
    CHECK(setresuid(uid, uid, uid) == 0, "setresuid");
    CHECK(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0, "prctl");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, late, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    /* Stay alive until the collector has seen the thread's lane: it checks /proc/<pid>. */
    RINGPEEK_WAIT(ringpeek_drained(&ring, (uint32_t)getpid()), "the collector to drain the thread's lane");
    printf("dropped\n");
    return 0;
}
