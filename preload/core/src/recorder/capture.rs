//! Capture ranges from the hooks: a trigger (`cudaProfilerStart`, `__itt_pause`, the wheel's
//! `mlprof.start()`, the `--torch` hook's steps) flips the ring's capture gate with one
//! compare-and-swap and, when it changed it, records the edge on its own lane as a
//! `KIND_CAPTURE_EDGE` control record, so every process of the tree follows at its next call
//! and the collector needs no round trip. What the gate means, and which trigger may flip it,
//! is `mlprof_format::ring`'s `capture`.

use mlprof_format::record::Event;
use mlprof_format::ring::{KIND_CAPTURE_EDGE, RingView, Trigger};

use super::{on_lane, records, session};
use crate::clock;
use crate::guard::{self, ThreadState};

/// Flips the capture gate for `trigger` when the run's capture source allows it, and records
/// the edge. Returns whether the gate changed. Never fails the caller: without a session, on
/// our own calls, or when the edge finds no room in the lane (then the gate still flips and
/// the run has one edge fewer) it does nothing more. Errno is kept.
pub fn flip(trigger: Trigger) -> bool {
    let Some(state) = guard::current() else { return false };
    if state.in_hook.get() {
        return false;
    }
    guard::keeping_errno(|| {
        if !records(&state) {
            return false;
        }
        let Some(ring) = session::ring() else { return false };
        // The source test comes first: a trigger of another source (ITT pauses without
        // `--capture-range=itt`) costs no clock read.
        let Some(flipped) = ring.header().flip_capture(trigger) else { return false };
        let time = clock::now();
        on_lane(&state, |ring: &RingView, lane: u32, pid: u32, thread: &ThreadState| {
            let edge = Event {
                kind: KIND_CAPTURE_EDGE,
                pid,
                tid: thread.tid.get(),
                fd: flipped.opened as i32,
                start: time,
                arg: flipped.range as u64,
                extra: trigger as u32,
                ..Event::default()
            };
            // A full lane counts the record as dropped; the gate has flipped all the same.
            let _ = ring.push(lane, &edge);
        });
        true
    })
}
