/*
 * trapped.c MODE N — complete mode's reference program (mlprof-collect --all-syscalls), held
 * against strace -f.
 *
 * MODE window: the parent forks one child that runs the compared window and leaves with
 * _exit(0); the parent waits for it and prints the child's pid. In the window, between
 * write(-1, "MLPROF_MARK1") and write(-1, "MLPROF_MARK2") (both EBADF), calls no symbol hook
 * sees:
 *   N  getppid through syscall()                      raw syscall()
 *   N  getppid as an inline `syscall` instruction     no function at all
 *   N  open() of a missing file                       openat, N errors
 *   N  raise(SIGUSR1), whose handler (every signal in its sa_mask) calls getppid and returns
 *      through glibc's restorer                        tgkill, getpid, gettid, rt_sigprocmask,
 *                                                      getppid, rt_sigreturn
 *   pthread_sigmask: block every signal, read the mask back (SIGSYS must read as blocked),
 *      restore
 *   2 threads, each N getppid, joined                  clone3, and each thread's start-up
 *   a forked grandchild making N getppid, waited for   clone, wait4
 *   a SIGSYS handler of the program's own: kill(self, SIGSYS) runs it once; sigaction reads
 *      it back
 * Output: one line of facts the program checked, the same bare and profiled.
 *
 * MODE cancel: a thread blocks in read() on a pipe and is cancelled (pthread_cancel); the
 * program must not hang or crash. Prints "cancelled".
 *
 * MODE cost N: N getppid through syscall(), timed; prints ns per call (bench/trap_cost.py).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int n;
static volatile sig_atomic_t usr1_seen, sys_seen;

static void mark(const char *which) {
    if (write(-1, which, strlen(which)) != -1)
        abort();
}

static long inline_getppid(void) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "0"((long)SYS_getppid) : "rcx", "r11", "memory");
    return ret;
}

static void on_usr1(int sig) {
    (void)sig;
    syscall(SYS_getppid);
    usr1_seen++;
}

static void on_sys(int sig) {
    (void)sig;
    sys_seen++;
}

static void *thread_main(void *arg) {
    (void)arg;
    for (int i = 0; i < n; i++)
        syscall(SYS_getppid);
    return NULL;
}

static int window(void) {
    mark("MLPROF_MARK1");
    for (int i = 0; i < n; i++)
        syscall(SYS_getppid);
    for (int i = 0; i < n; i++)
        inline_getppid();
    int missing = 0;
    for (int i = 0; i < n; i++)
        missing += open("/nonexistent/mlprof-trapped", O_RDONLY) == -1;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigfillset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    for (int i = 0; i < n; i++)
        raise(SIGUSR1);

    sigset_t all, old, now;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    int sigsys_reads_blocked = sigismember(&now, SIGSYS);
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, thread_main, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);

    pid_t grandchild = fork();
    if (grandchild == 0) {
        for (int i = 0; i < n; i++)
            syscall(SYS_getppid);
        _exit(7);
    }
    int status = 0;
    waitpid(grandchild, &status, 0);

    struct sigaction mine, back;
    memset(&mine, 0, sizeof mine);
    mine.sa_handler = on_sys;
    sigaction(SIGSYS, &mine, NULL);
    kill(getpid(), SIGSYS);
    sigaction(SIGSYS, NULL, &back);
    mark("MLPROF_MARK2");
    printf("missing=%d usr1=%d sigsys_reads_blocked=%d grandchild=%d own_sigsys=%d handler_reads_back=%d\n",
           missing, (int)usr1_seen, sigsys_reads_blocked, WEXITSTATUS(status), (int)sys_seen,
           back.sa_handler == on_sys);
    fflush(stdout);
    return 0;
}

static int pipe_fds[2];

static void *blocked_reader(void *arg) {
    (void)arg;
    char c;
    for (;;)
        if (read(pipe_fds[0], &c, 1) <= 0)
            break;
    return NULL;
}

static int cancel(void) {
    if (pipe(pipe_fds) != 0)
        return 1;
    pthread_t t;
    pthread_create(&t, NULL, blocked_reader, NULL);
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    pthread_cancel(t);
    void *result = NULL;
    pthread_join(t, &result);
    printf("%s\n", result == PTHREAD_CANCELED ? "cancelled" : "not cancelled");
    return result == PTHREAD_CANCELED ? 0 : 1;
}

static int cost(void) {
    double best = 1e18;
    for (int round = 0; round < 5; round++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < n; i++)
            syscall(SYS_getppid);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n;
        if (ns < best)
            best = ns;
    }
    printf("%.1f\n", best);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    n = argc > 2 ? atoi(argv[2]) : 10;
    if (strcmp(argv[1], "cancel") == 0)
        return cancel();
    if (strcmp(argv[1], "cost") == 0)
        return cost();
    if (strcmp(argv[1], "window") != 0)
        return 2;
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        window();
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("%d\n", (int)child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
