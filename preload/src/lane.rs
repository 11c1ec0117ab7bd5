//! This thread's lane of the ring: claimed on the first record of each thread (and again in a
//! fork child, which is a new identity), cached in the thread-local state, retired at thread
//! exit. The ring protocol itself lives in `mlprof_format::ring::RingView`.

use mlprof_format::record::{Event, KIND_STRING_DEF};
use mlprof_format::ring::RingView;

use crate::guard::ThreadState;
use crate::strings;

/// After a failed claim (every lane taken), drop this many records before scanning again.
const CLAIM_RETRY_INTERVAL: u32 = 1024;

/// This thread's lane for process `pid`, claiming one on first use.
#[inline(always)]
pub fn lane_of(ring: &RingView, thread: &ThreadState, pid: u32) -> Option<u32> {
    let lane = thread.lane.get();
    if lane != 0 && thread.lane_pid.get() == pid {
        return Some(lane - 1);
    }
    claim(ring, thread, pid)
}

#[cold]
fn claim(ring: &RingView, thread: &ThreadState, pid: u32) -> Option<u32> {
    thread.internal(|| claim_lane(ring, thread, pid))
}

fn claim_lane(ring: &RingView, thread: &ThreadState, pid: u32) -> Option<u32> {
    if thread.lane_pid.get() != pid {
        // A new thread, or the first record of a fork child: a new identity.
        thread.lane.set(0);
        thread.lane_pid.set(pid);
        thread.tid.set(crate::sys::gettid());
        thread.no_lane_skips.set(0);
    } else if thread.no_lane_skips.get() > 0 {
        thread.no_lane_skips.set(thread.no_lane_skips.get() - 1);
        ring.count_no_lane_drop();
        return None;
    }
    match ring.claim(pid, thread.tid.get(), crate::session::uid()) {
        Some(index) => {
            thread.lane.set(index + 1);
            crate::session::remember_lane_for_thread_exit(index);
            Some(index)
        }
        None => {
            thread.no_lane_skips.set(CLAIM_RETRY_INTERVAL);
            None
        }
    }
}

/// Sends `bytes` as string `id` unless this process already did; `false` when the lane had no
/// room (the caller then drops the record that needed it).
pub fn send_string(ring: &RingView, index: u32, pid: u32, tid: u32, id: u64, bytes: &[u8]) -> bool {
    if strings::was_sent(id) {
        return true;
    }
    let definition = Event {
        kind: KIND_STRING_DEF,
        pid,
        tid,
        arg: id,
        arg2: bytes.len().min(mlprof_format::record::MAX_STRING_BYTES) as u64,
        ..Event::default()
    };
    if !ring.push_string(index, &definition, bytes) {
        return false;
    }
    strings::mark_sent(id);
    true
}
