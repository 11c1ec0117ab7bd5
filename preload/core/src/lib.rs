//! The recording core of `libmlprof.so`: everything but the exported shims. It builds as an
//! ordinary rlib, so its protocol, interning, configuration and record API are unit-tested
//! here without interposing anything; the `mlprof-preload` cdylib adds the `extern "C"` shims
//! (layer 5) on top.
//!
//! Layers, each importing only from the ones below it:
//!
//! 1. [`sys`] (raw system calls), [`clock`] (timestamps), [`config`] (`MLPROF_*` options),
//!    [`guard`] (the per-thread state: reentrancy guard, errno), [`user_memory`] (reading the
//!    application's pointers without faulting), [`library`] (where our own code lies), [`caller`] (the native code that called a
//!    hook);
//! 2. [`real`]: the next definition of each hooked symbol, and glibc's own `dlsym`;
//!    [`python`]: the calling thread's Python frames (a recorded call's site), its
//!    interpreter found through the loader;
//! 3. [`recorder`]: joining the collector's ring, the process lifecycle (fork, exec, exit,
//!    vfork, thread exit), lanes, strings and the record API the hooks use ([`recorder::Span`],
//!    [`recorder::AggregateCall`]); ITT stamping is injected into it ([`recorder::stamp`]), not
//!    imported; [`gpu`] records CUDA/NCCL calls through it; [`cupti`] sends what the GPU did
//!    (CUPTI activity records) through it;
//! 4. [`itt`]: mlprof as an ITT collector (ABI structs, interning, task stacks, chaining);
//!    [`trap`]: complete mode, every system call trapped with syscall user dispatch and
//!    recorded through the recorder.
//!
//! Hook rules: no lock, no allocation, no system call beyond the intercepted one on the hot
//! path; errno preserved; a full ring drops and counts; nothing here may panic.

#![deny(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
// Unit tests may index and unwrap: a panic there is a failed test, not a dead application.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic))]

pub mod caller;
pub mod clock;
pub mod config;
pub mod cupti;
pub mod gpu;
pub mod guard;
pub mod itt;
pub mod library;
pub mod python;
pub mod real;
pub mod recorder;
pub mod sys;
#[cfg(target_arch = "x86_64")]
pub mod trap;
pub mod user_memory;

#[cfg(test)]
mod testing;
