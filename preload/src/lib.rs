//! `libmlprof.so`: injected with `LD_PRELOAD`, it records the intercepted calls of every process
//! and thread into the collector's shared-memory ring.
//!
//! This crate is layer 5, the exported shims; everything they stand on is the recording core
//! (`mlprof-preload-core`, layers 1–4), re-exported here under its module names:
//!
//! * [`exports`]: every `extern "C"` symbol this library defines (libc, CUDA, NCCL hooks, the
//!   driver entry-point lookups and the ITT collector entry points); nothing imports it;
//! * [`gpu`]: the macros that define the GPU hooks, over the core's GPU recording;
//! * [`itt_stamp`]: every recorded interval also emitted as an ITT task (injected into the
//!   recorder at start-up).
//!
//! Hook rules: no lock, no allocation, no system call beyond the intercepted one on the hot
//! path; errno preserved; a full ring drops and counts; nothing here may panic.

#![deny(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod exports;
mod gpu;
mod itt_stamp;

use mlprof_preload_core::{guard, itt, library, real, recorder, user_memory};

// Safety: runs once at load time, after libc is initialized. It only joins the session early
// (hooks also do it lazily, since other libraries' constructors can call them first) and sets
// up ITT stamping, outside any hook.
#[ctor::ctor(unsafe)]
fn mlprof_init() {
    // Before anything can exit: the GPU timeline's buffers are handed over first.
    recorder::set_before_exit(mlprof_preload_core::cupti::flush_at_exit);
    if recorder::init_from_constructor()
        && let Some(state) = guard::current()
        && !state.in_hook.get()
    {
        // The first ITT call loads the collector (dlopen), whose own calls are not the
        // application's.
        state.foreign(itt_stamp::init);
        // Last, so that our own start-up is not trapped.
        #[cfg(target_arch = "x86_64")]
        if mlprof_preload_core::trap::requested() && !mlprof_preload_core::trap::enable_for_process() {
            mlprof_preload_core::sys::log_line(&[
                b"mlprof: --all-syscalls: this kernel refused syscall user dispatch (Linux 5.11+ needed); ",
                b"recording the hooked calls only",
            ]);
        }
    }
}
