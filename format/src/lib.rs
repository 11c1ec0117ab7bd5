//! The contracts shared by `libmlprof.so`, `mlprof-collect` and `mlprof`.
//!
//! * [`func`]: the intercepted functions and their stable numeric ids.
//! * [`record`]: the fixed 64-byte event record, used both in the ring and in `run.bin`.
//! * [`ring`]: the shared-memory ring ABI (versioned by [`ring::RING_ABI_VERSION`]): layout,
//!   producer, and the consumer step ([`ring::LaneConsumer`]) the collector and the fuzzer share.
//! * [`runfile`]: the `run.bin` writer and streaming reader (versioned by
//!   [`runfile::FORMAT_MAJOR`]/[`runfile::FORMAT_MINOR`]).
//! * [`energy`]: the energy frames of `run.bin` (devices, samples, notes; since format 1.2).
//! * [`gpu`]: what the GPU did (CUPTI activity records; since format 1.5).
//! * [`site`]: which Python line or native caller made each call (since format 1.6).
//! * [`sample`]: sampled CPU stacks (since format 1.7).
//! * [`options`]: the one table of `MLPROF_*` environment variables and who reads each.
//! * [`rank`]: a process's rank in a distributed job, from its launcher's variables.
//! * `testing` (feature `testing`): a heap ring and a plain consumer for other crates' unit tests.
//!
//! The ring ABI and the file format have separate versions: the ring is a live protocol between
//! one build of the preload and one build of the collector, the file outlives both.
//!
//! Every public item is documented (`missing_docs` is denied): meaning, units and who writes
//! what, since three programs built at different times rely on them.

#![deny(missing_docs)]

pub mod energy;
pub mod func;
pub mod gpu;
pub mod ids;
pub mod options;
pub mod range;
pub mod rank;
pub mod record;
pub mod ring;
pub mod runfile;
pub mod sample;
pub mod site;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

/// FNV-1a, 64 bit: the id of an interned string. Chosen because the preload computes it
/// without allocation or tables on the hook path, and because ids then agree across processes,
/// so a fork child can reuse the ids its parent already sent.
pub const fn string_id(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    // 0 means "no string" in records.
    if hash == 0 { 1 } else { hash }
}
