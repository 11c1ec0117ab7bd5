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
//! framehop), `python` (the Python frames of a sampled thread, set in place of the
//! evaluation loop's native frames), `gate` (the child held before exec), `sampler` (the
//! passes over the rings), `recording` (the sampler on its own thread, its records as
//! run-file frames).

mod attr;
pub(crate) mod gate;
mod maps;
mod modules;
mod parse;
mod python;
mod recording;
mod refusal;
mod ring;
mod sampler;
pub(crate) mod start;
mod unwind;

pub(crate) use recording::Recording;
pub(crate) use sampler::{Sampler, Stats, attach, open};

/// The default rate, per CPU-second of each thread. 199 Hz: a prime, so that sampling does not
/// fall into step with periodic work (1 ms and 10 ms timers, a DataLoader polling every 5 ms),
/// and the rate that keeps issue 37's cost within 2 % wall on a DataLoader image workload on
/// a 2-vCPU machine, where the collector's CPU is taken from the job. A sample costs the
/// sampled thread the timer interrupt and a 16 KiB stack copy (a few µs), and the collector its
/// unwinding and the reading of the thread's Python frames (~20 µs with the wake-up: 4 % of a
/// CPU at 499 Hz over three busy processes). Measured (BENCHMARKS.md, "Sampled stacks with
/// Python frames"): 499 Hz +4.1 % [+2.3, +7.1], 199 Hz +0.8 % [−1.6, +7.2]. 199 Hz still gives
/// a 100 ms transform ~20 samples a call, and a minute of three busy threads ~36,000; VTune's
/// and py-spy's defaults are 100 Hz. `--sample=HZ` sets another.
pub(crate) const DEFAULT_HZ: u32 = 199;

/// Bytes of user stack the kernel copies per sample (`sample_stack_user`). 16 KiB, not perf's
/// 8 KiB: CPython below 3.11 spends a few hundred bytes of C stack on every Python call, and
/// PyTorch's C++ dispatcher and autograd frames are deep too; a stack cut short stops the
/// unwinding there. The copy is a memcpy from a cache-warm stack, and the rings are sized so
/// that 32 samples fit a CPU's ring.
pub(crate) const STACK_BYTES: u32 = 16 * 1024;

/// One thing the sampler saw, handed out in time order within a pass. The run file keeps the
/// samples and mappings and uses forks, execs and exits to follow address spaces; the other
/// fields (times, thread names, lost counts) are what the engine knows, for later uses.
#[derive(Debug)]
#[allow(dead_code)]
pub(crate) enum Record<'a> {
    Sample(Sample<'a>),
    Mapping(Mapping),
    /// A new process (`pid != ppid`) or a new thread of `pid`.
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        time_ns: u64,
    },
    /// A thread ended (`pid == tid`: the process's main thread).
    Exit {
        pid: u32,
        tid: u32,
        time_ns: u64,
    },
    /// A thread's name (`comm`), set by `exec` (`exec`) or `prctl(PR_SET_NAME)`.
    Comm {
        pid: u32,
        tid: u32,
        name: String,
        exec: bool,
        time_ns: u64,
    },
    /// A Python frame met for the first time, before the first sample whose frames name it.
    PythonFrame(mlprof_format::sample::PythonFrameInfo),
    /// Records the kernel could not write into a full ring (counted in [`Stats::lost`] too).
    Lost {
        records: u64,
        time_ns: u64,
    },
}

/// One sample: the thread, the CLOCK_MONOTONIC time, and the stack, leaf first. `frames[0]` is
/// the sampled instruction; the others are return addresses (symbolize `address - 1`, which
/// lies in the calling instruction). A stack the unwinder could not follow is just the leaf.
/// Entries from [`python::PYTHON_FRAME_TAG`] up are Python frames.
#[derive(Debug)]
pub(crate) struct Sample<'a> {
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) time_ns: u64,
    pub(crate) frames: &'a [u64],
}

/// Code of a file mapped executable into a process: addresses `start..end` hold the file's
/// bytes from offset `pgoff` on. `build_id` (the ELF note) names the file for symbolization
/// after it is gone; `None` for a file that could not be read (then it was not unwound
/// through either) or that has no note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub(crate) pid: u32,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) pgoff: u64,
    pub(crate) path: String,
    pub(crate) build_id: Option<Vec<u8>>,
    pub(crate) time_ns: u64,
}

#[cfg(test)]
mod tests;
