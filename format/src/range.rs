//! Capture ranges in the run file (since format 1.9; see [`crate::ring::CaptureSource`] for
//! the gate in the ring).
//!
//! A run recorded with a capture option has one [`CaptureInfo`] frame ([`FRAME_CAPTURE`]),
//! written when the run starts, and one [`RangeEdge`] frame ([`FRAME_RANGE_EDGE`]) per edge
//! as the collector learns of it: from a hook's `KIND_CAPTURE_EDGE` ring record, or from its
//! own timer. Edges of one range may come in any order relative to other frames; readers pair
//! them by `range`. A range still open at the end of the run ends with the run. A file with no
//! [`CaptureInfo`] (no capture option, or an older file) is one range: the whole run; one with
//! a [`CaptureInfo`] and no edges recorded nothing of the job's calls.

use serde::{Deserialize, Serialize};

/// Run-file frame kind: the run's [`CaptureInfo`] (since 1.9).
pub const FRAME_CAPTURE: u16 = 31;
/// Run-file frame kind: one [`RangeEdge`] (since 1.9).
pub const FRAME_RANGE_EDGE: u16 = 32;

/// How the run was told to capture.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureInfo {
    /// [`crate::ring::CaptureSource`] as a number.
    pub source: u32,
    /// Ranges allowed (0: no limit): 1 for `--capture-range-end=stop`, N for `repeat:N`.
    pub limit: u32,
    /// The job started outside a range.
    pub paused: bool,
    /// `--delay`, ns (0: none).
    pub delay_ns: u64,
    /// `--duration`, ns (0: none).
    pub duration_ns: u64,
    /// `--steps A-B`: A and B (0, 0: none).
    pub steps: (u32, u32),
}

/// One edge of a range.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeEdge {
    /// The range (1, 2, …).
    pub range: u32,
    /// The edge opens the range (else it closes it).
    pub opened: bool,
    /// CLOCK_MONOTONIC ns.
    pub time_ns: u64,
    /// The process whose call made the edge (0: the collector).
    pub pid: u32,
    /// Its thread (0: the collector).
    pub tid: u32,
    /// [`crate::ring::Trigger`] as a number.
    pub trigger: u32,
}
