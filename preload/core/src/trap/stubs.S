/*
 * Complete mode's code that may make system calls without being trapped: the only range that
 * syscall user dispatch lets through whatever the thread's selector says (see trap/mod.rs).
 *
 *  - mlprof_trap_sigreturn: where a SIGSYS frame returns (the handler's restorer) and where a
 *    trapped rt_sigreturn is redone. Its bytes are glibc's __restore_rt's, `mov $15, %rax;
 *    syscall`, which unwinders recognise as a signal frame.
 *  - mlprof_trap_syscall: the handler's system calls (the application's, made for it).
 *  - mlprof_trap_clone_stubs: MLPROF_TRAP_CLONE_SLOTS stubs, one per call site of clone,
 *    clone3, fork or vfork. A trapped call of that family is not made inside the signal
 *    handler (a new thread would start on its own stack inside our frame); the handler returns
 *    to the site's stub instead, with the application's registers, and the stub makes the call
 *    and jumps back to the site. In the child it first turns trapping on for the new thread or
 *    process, which the kernel does not inherit (not in a vfork child: it runs on its parent's
 *    memory, and trapping resumes in the program it execs).
 *
 * rcx and r11 are free after a `syscall` (the kernel overwrites them), which is what lets a
 * stub find its way back without touching any register the application may hold live.
 */

#define SLOTS 64
#define SYS_PRCTL 157
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_ON 1
#define SELECTOR_BLOCK 1
#define KIND_VFORK 1

    .section .text.mlprof_trap, "ax", @progbits
    .p2align 6
    .globl mlprof_trap_region_start
    .hidden mlprof_trap_region_start
mlprof_trap_region_start:

    .globl mlprof_trap_sigreturn
    .hidden mlprof_trap_sigreturn
    .type mlprof_trap_sigreturn, @function
mlprof_trap_sigreturn:
    movq $15, %rax
    syscall
    ud2

    /*
     * long mlprof_trap_syscall(long number, long a1, ..., long a6): the handler's way to make
     * the application's call (and its own) while the thread's selector keeps trapping, so that
     * a signal the call lets in runs the application's handler with its calls trapped.
     */
    .p2align 4
    .globl mlprof_trap_syscall
    .hidden mlprof_trap_syscall
    .type mlprof_trap_syscall, @function
mlprof_trap_syscall:
    movq %rdi, %rax
    movq %rsi, %rdi
    movq %rdx, %rsi
    movq %rcx, %rdx
    movq %r8, %r10
    movq %r9, %r8
    movq 8(%rsp), %r9
    syscall
    ret
    .size mlprof_trap_syscall, . - mlprof_trap_syscall

    .p2align 5
    .globl mlprof_trap_clone_stubs
    .hidden mlprof_trap_clone_stubs
mlprof_trap_clone_stubs:
    .set slot, 0
    .rept SLOTS
    .p2align 5
    syscall
    /* Below the red zone of the code we return to, then the slot number. */
    leaq -128(%rsp), %rsp
    .byte 0x68
    .long slot
    jmp mlprof_trap_after_clone
    .set slot, slot + 1
    .endr

mlprof_trap_after_clone:
    testq %rax, %rax
    jnz 2f
    /* The child. r11 = its trap state: [0] the selector, [1] what its parent was making. */
    movq mlprof_trap_state@GOTTPOFF(%rip), %r11
    addq %fs:0, %r11
    cmpb $KIND_VFORK, 1(%r11)
    je 2f
    pushq %rdi
    pushq %rsi
    pushq %rdx
    pushq %r10
    pushq %r8
    pushq %r11
    movq %r11, %r8
    movl $SYS_PRCTL, %eax
    movl $PR_SET_SYSCALL_USER_DISPATCH, %edi
    movl $PR_SYS_DISPATCH_ON, %esi
    leaq mlprof_trap_region_start(%rip), %rdx
    movq $(mlprof_trap_region_end - mlprof_trap_region_start), %r10
    syscall
    popq %r11
    testq %rax, %rax
    jnz 1f
    movb $SELECTOR_BLOCK, (%r11)
1:
    popq %r8
    popq %r10
    popq %rdx
    popq %rsi
    popq %rdi
    xorl %eax, %eax
2:
    popq %rcx
    leaq 128(%rsp), %rsp
    leaq mlprof_trap_resume(%rip), %r11
    jmpq *(%r11, %rcx, 8)

    /* The range ends past the last `syscall` (the kernel tests the address after it). */
    nop
    .globl mlprof_trap_region_end
    .hidden mlprof_trap_region_end
mlprof_trap_region_end:
    int3

    /* Where each slot's call returns to (written by the handler before first use). */
    .section .bss.mlprof_trap, "aw", @nobits
    .p2align 6
    .globl mlprof_trap_resume
    .hidden mlprof_trap_resume
mlprof_trap_resume:
    .zero 8 * SLOTS

    .section .note.GNU-stack, "", @progbits
