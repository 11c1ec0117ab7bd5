//! `libmlprof.so`: injected with `LD_PRELOAD`, it records the intercepted calls of every process
//! and thread into the collector's shared-memory ring.
//!
//! Module map:
//! * [`exports`]: every `extern "C"` symbol this library defines (libc, CUDA, NCCL hooks, the
//!   driver entry-point lookups and the ITT collector entry points);
//! * [`gpu`]: what the GPU hooks share (nesting, kernel names);
//! * [`itt`]: mlprof as an ITT collector (interning, task stacks, chaining);
//! * [`itt_stamp`]: every recorded interval also emitted as an ITT task;
//! * [`real`]: the next definition of each hooked symbol, resolved lazily;
//! * [`guard`]: the per-thread reentrancy guard and errno preservation;
//! * [`session`]: joining the collector's ring (lazily, once per process) and fork handling;
//! * [`lane`]: the producer side of the ring (one lane per thread);
//! * [`strings`]: paths and command lines sent once per process;
//! * [`clock`]: the timestamp source;
//! * [`sys`]: raw system calls that bypass our own hooks;
//! * [`config`]: the `MLPROF_*` environment options.
//!
//! Hook rules: no lock, no allocation, no system call beyond the intercepted one on the hot
//! path; errno preserved; a full ring drops and counts; nothing here may panic.

mod clock;
mod config;
mod exports;
mod gpu;
mod guard;
mod itt;
mod itt_stamp;
mod lane;
mod real;
mod session;
mod strings;
mod sys;

// Safety: runs once at load time, after libc is initialized. It only joins the session early
// (hooks also do it lazily, since other libraries' constructors can call them first).
#[ctor::ctor(unsafe)]
fn mlprof_init() {
    session::init_from_constructor();
}
