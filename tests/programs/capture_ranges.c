/* Known numbers of pwrite calls before, inside and after two cudaProfilerStart/Stop pairs
 * (the real CUDA runtime: without a driver the calls fail, and their status is written to
 * DIR/status.txt so the test can compare it with a run without mlprof), in this process and
 * in a forked child that writes on the parent's command while the parent waits for it.
 *   phase:   before  range1  between  range2  after
 *   parent:     3       5       7       11      13
 *   child:      2      20       2       40       2
 * usage: capture_ranges DIR */
#include "common.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

int cudaProfilerStart(void);
int cudaProfilerStop(void);

static void writes(int fd, int n) {
    for (int i = 0; i < n; i++) CHECK(pwrite(fd, "x", 1, 0) == 1, "pwrite");
}

/* Has the child make `n` writes, and waits until it did. */
static void child_writes(int to_child, int from_child, int n) {
    char ack;
    CHECK(write(to_child, &n, sizeof n) == sizeof n, "command");
    CHECK(read(from_child, &ack, 1) == 1, "ack");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    int fd = open("/dev/null", O_WRONLY);
    CHECK(fd >= 0, "open /dev/null");
    int down[2], up[2];
    CHECK(pipe(down) == 0 && pipe(up) == 0, "pipe");
    pid_t child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0) {
        int n;
        while (read(down[0], &n, sizeof n) == sizeof n && n > 0) {
            writes(fd, n);
            CHECK(write(up[1], "k", 1) == 1, "ack");
        }
        _exit(0);
    }
    int status[4];
    writes(fd, 3);
    child_writes(down[1], up[0], 2);
    status[0] = cudaProfilerStart();
    writes(fd, 5);
    child_writes(down[1], up[0], 20);
    status[1] = cudaProfilerStop();
    writes(fd, 7);
    child_writes(down[1], up[0], 2);
    status[2] = cudaProfilerStart();
    writes(fd, 11);
    child_writes(down[1], up[0], 40);
    status[3] = cudaProfilerStop();
    writes(fd, 13);
    child_writes(down[1], up[0], 2);
    int end = 0;
    CHECK(write(down[1], &end, sizeof end) == sizeof end, "end");
    CHECK(waitpid(child, NULL, 0) == child, "waitpid");
    char path[4096];
    snprintf(path, sizeof path, "%s/status.txt", argv[1]);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "fopen %s", path);
    fprintf(f, "start1 %d\nstop1 %d\nstart2 %d\nstop2 %d\n", status[0], status[1], status[2], status[3]);
    fclose(f);
    return 0;
}
