//! CPU sampling of every thread of every process of the job (issue 37): the software
//! `cpu-clock` event of `perf_event_open` on each online CPU, following the launched child and
//! everything it forks, spawns or execs (`inherit`), user stacks copied by the kernel and
//! unwound here with DWARF CFI (framehop), times on CLOCK_MONOTONIC like the ring's records.
//!
//! - [`open`] attaches to a process (a child held before its exec by
//!   [`gate::spawn_attached`]) or says in one line why the kernel refused ([`Refusal`]);
//! - [`Sampler::drain`] reads the per-CPU rings and hands out [`Record`]s in time order:
//!   samples with their unwound frames, the code mappings (with build ids) they need to be
//!   symbolized later, forks, exits, execs;
//! - [`Sampler::wait`] sleeps until a ring fills to its watermark, [`Sampler::finish`] stops
//!   the events and drains what is left.
//!
//! Files, each one job: `attr` (the event), `refusal` (the one-line why), `ring` (one mapped
//! ring, records cut out of it), `parse` (a record's fields), `maps` (`/proc/PID/maps`),
//! `modules` (the mapped files and their unwind sections), `unwind` (per-process code maps,
//! framehop), `gate` (the child held before exec), `sampler` (the passes over the rings).

// The sampler is wired into the launcher and the run file afterwards (issue 37); until then
// only the tests use it, and the re-exports and record fields below are its interface for that
// wiring. Remove these two lines with the wiring.
#![allow(dead_code)]
#![allow(unused_imports)]

mod attr;
pub(crate) mod gate;
mod maps;
mod modules;
mod parse;
mod refusal;
mod ring;
mod unwind;

pub(crate) use attr::Start;
pub(crate) use refusal::{Refusal, Stage};

/// The default rate, per CPU-second of each thread. 499 Hz: a prime a little under 500, so
/// that sampling does not fall into step with periodic work (1 ms and 10 ms timers, a
/// DataLoader polling every 5 ms), while the cost stays small: a sample costs the sampled
/// thread the timer interrupt and a 16 KiB stack copy (a few µs), and the collector its
/// unwinding (~10–30 µs on another CPU), so ~0.2–1.5 % of one CPU per busy thread.
pub(crate) const DEFAULT_HZ: u32 = 499;

/// Bytes of user stack the kernel copies per sample (`sample_stack_user`). 16 KiB, not perf's
/// 8 KiB: CPython below 3.11 spends a few hundred bytes of C stack on every Python call, and
/// PyTorch's C++ dispatcher and autograd frames are deep too; a stack cut short stops the
/// unwinding there. The copy is a memcpy from a cache-warm stack, and the rings are sized so
/// that 32 samples fit a CPU's ring.
pub(crate) const STACK_BYTES: u32 = 16 * 1024;
