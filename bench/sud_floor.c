/*
 * sud_floor.c N — the floor under complete mode's cost on this machine: N getppid calls each
 * trapped by syscall user dispatch into a minimal SIGSYS handler that makes the call and
 * returns (no recording, nothing else), and, for comparison, N signal round trips alone
 * (tgkill to self, empty handler). Prints "trapped_ns signal_ns", each the best of 5 rounds,
 * per call, minus nothing (bench/trap_cost.py subtracts the bare call).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static __thread volatile char selector;

extern char floor_start[], floor_end[];
/* The untrapped range: the restorer and a syscall stub. */
__asm__(".text\n"
        "floor_start:\n"
        "floor_restorer: movq $15, %rax\n syscall\n"
        "floor_syscall: movq %rdi, %rax\n movq %rsi, %rdi\n movq %rdx, %rsi\n movq %rcx, %rdx\n"
        " movq %r8, %r10\n movq %r9, %r8\n syscall\n ret\n nop\n"
        "floor_end:\n");
extern char floor_restorer[];
long floor_syscall(long nr, long a1, long a2, long a3, long a4, long a5);

static void on_sys(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)info;
    greg_t *g = ((ucontext_t *)ctx)->uc_mcontext.gregs;
    g[REG_RAX] = floor_syscall(g[REG_RAX], g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8]);
}

static void on_usr1(int sig) { (void)sig; }

static double best_ns(int n, int signals) {
    double best = 1e18;
    pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
    for (int round = 0; round < 5; round++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < n; i++) {
            if (signals)
                syscall(SYS_tgkill, pid, tid, SIGUSR1);
            else
                syscall(SYS_getppid);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n;
        if (ns < best)
            best = ns;
    }
    return best;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    double signal_ns = best_ns(n, 1);
    struct {
        void *handler;
        unsigned long flags, restorer, mask;
    } ka = {(void *)on_sys, SA_SIGINFO | SA_NODEFER | 0x04000000, (unsigned long)floor_restorer, 0};
    if (syscall(SYS_rt_sigaction, SIGSYS, &ka, NULL, 8) != 0)
        return 1;
    if (prctl(59, 1, (unsigned long)floor_start, (unsigned long)(floor_end - floor_start), &selector) != 0) {
        perror("prctl(PR_SET_SYSCALL_USER_DISPATCH)");
        return 1;
    }
    selector = 1;
    double trapped_ns = best_ns(n, 0);
    selector = 0;
    printf("%.1f %.1f\n", trapped_ns, signal_ns);
    return 0;
}
