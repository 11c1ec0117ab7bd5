/*
 * exec_chain DIR STAGE N
 *
 * STAGE A writes N times (64 bytes) to DIR/A.dat, then execs
 * "exec_chain DIR B N"; B writes 2N times to DIR/B.dat and execs
 * "exec_chain DIR C N"; C writes 3N times to DIR/C.dat and exits 0.
 * Each stage: open 1, write k, close 1 (the fd is closed before exec).
 * All three images run in the same pid.
 */
#include "common.h"
#include <fcntl.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
    const char *dir = arg_str(argc, argv, 1, "DIR");
    const char *stage = arg_str(argc, argv, 2, "STAGE");
    long n = arg_long(argc, argv, 3, "N");
    long k;
    const char *next;
    if (strcmp(stage, "A") == 0) { k = n; next = "B"; }
    else if (strcmp(stage, "B") == 0) { k = 2 * n; next = "C"; }
    else if (strcmp(stage, "C") == 0) { k = 3 * n; next = NULL; }
    else { fprintf(stderr, "bad stage %s\n", stage); return 2; }

    char path[4096];
    char buf[64];
    memset(buf, 'e', sizeof buf);
    snprintf(path, sizeof path, "%s/%s.dat", dir, stage);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "open %s", path);
    for (long i = 0; i < k; i++)
        CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf, "write");
    CHECK(close(fd) == 0, "close");
    if (next == NULL) return 0;
    char *nargv[] = {argv[0], argv[1], (char *)next, argv[3], NULL};
    execve(argv[0], nargv, environ);
    DIE("execve %s", argv[0]);
}
