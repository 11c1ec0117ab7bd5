/*
 * The storage of libmlprof.so's per-thread state (`guard::ThreadState`), in C only because
 * stable Rust cannot choose a TLS model: a Rust `thread_local!` in a shared library uses the
 * general-dynamic model, one `__tls_get_addr` call per access, on every hook. Here the state
 * is initial-exec: its address is the thread pointer plus a constant the loader fixes at load
 * time, two instructions. A library loaded with LD_PRELOAD always gets static TLS; one that a
 * program dlopens later gets it from glibc's surplus (this block is small for that reason).
 * Zero-filled, which is what `ThreadState::new()` is, byte for byte (a unit test checks it).
 */
#define MLPROF_THREAD_STATE_BYTES 256

/* Hidden but not static: on x86_64, `guard::current` reaches it from Rust with the same two
 * instructions (inline assembly), without a call to the accessor below. */
__attribute__((visibility("hidden"), tls_model("initial-exec"), aligned(64))) __thread unsigned char
    mlprof_thread_block[MLPROF_THREAD_STATE_BYTES];

__attribute__((visibility("hidden"))) void *mlprof_thread_state(void) {
    return mlprof_thread_block;
}

__attribute__((visibility("hidden"))) unsigned long mlprof_thread_state_bytes(void) {
    return MLPROF_THREAD_STATE_BYTES;
}

/*
 * Complete mode's per-thread word (trap/mod.rs, trap/stubs.S): [0] the syscall user dispatch
 * selector (0 = let system calls through, 1 = trap them), [1] what kind of child the thread's
 * trapped clone is making (1 = a vfork child), read by the child in the stub. Initial-exec
 * like the state above: the stubs reach it with two instructions and no call.
 */
__attribute__((visibility("hidden"), tls_model("initial-exec"))) __thread unsigned char mlprof_trap_state[2];

__attribute__((visibility("hidden"))) unsigned char *mlprof_trap_state_of_thread(void) {
    return mlprof_trap_state;
}
