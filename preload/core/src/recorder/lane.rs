//! This thread's lane of the ring: claimed on the first record of each thread (and again in a
//! fork child, which is a new identity), cached in the thread-local state, retired at thread
//! exit. The ring protocol itself lives in `mlprof_format::ring::RingView`.

use mlprof_format::record::{Event, KIND_STRING_DEF};
use mlprof_format::ring::RingView;

use super::{lifecycle, session, strings};
use crate::guard::ThreadState;

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

/// Runs with the guard held; calls no hooked function (see `lifecycle::remember_lane_for_thread_exit`).
#[cold]
fn claim(ring: &RingView, thread: &ThreadState, pid: u32) -> Option<u32> {
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
    match ring.claim(pid, thread.tid.get(), session::uid()) {
        Some(index) => {
            thread.lane.set(index + 1);
            lifecycle::remember_lane_for_thread_exit(index);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::heap_ring;
    use mlprof_format::ring::RingGeometry;

    fn fresh_thread() -> ThreadState {
        // A thread state of its own, so these tests do not disturb the test thread's lane.
        ThreadState::new()
    }

    #[test]
    fn a_thread_claims_one_lane_and_keeps_it() {
        let ring = heap_ring(RingGeometry { lane_count: 4, lane_capacity: 64 });
        let thread = fresh_thread();
        let lane = lane_of(&ring, &thread, 100).unwrap();
        assert_eq!(lane_of(&ring, &thread, 100), Some(lane));
        let owner = ring.lane(lane).unwrap();
        assert_eq!(owner.pid.load(core::sync::atomic::Ordering::Relaxed), 100);
        assert_eq!(owner.tid.load(core::sync::atomic::Ordering::Relaxed), crate::sys::gettid());
    }

    #[test]
    fn a_fork_child_is_a_new_identity_with_a_lane_of_its_own() {
        let ring = heap_ring(RingGeometry { lane_count: 4, lane_capacity: 64 });
        let thread = fresh_thread();
        let parent_lane = lane_of(&ring, &thread, 100).unwrap();
        // Same thread state (fork copies it), another pid: never the parent's lane.
        let child_lane = lane_of(&ring, &thread, 101).unwrap();
        assert_ne!(parent_lane, child_lane);
        assert_eq!(thread.lane_pid.get(), 101);
    }

    #[test]
    fn with_every_lane_taken_records_are_counted_and_claims_retried_later() {
        let ring = heap_ring(RingGeometry { lane_count: 1, lane_capacity: 64 });
        let first = fresh_thread();
        assert_eq!(lane_of(&ring, &first, 100), Some(0));
        let second = fresh_thread();
        let no_lane = || ring.header().no_lane_drops.load(core::sync::atomic::Ordering::Relaxed);
        assert_eq!(lane_of(&ring, &second, 100), None);
        assert_eq!(no_lane(), 1);
        // The lane frees up, but the thread only scans again after CLAIM_RETRY_INTERVAL drops.
        ring.free(0);
        for expected in 2..=CLAIM_RETRY_INTERVAL as u64 + 1 {
            assert_eq!(lane_of(&ring, &second, 100), None);
            assert_eq!(no_lane(), expected);
        }
        assert_eq!(lane_of(&ring, &second, 100), Some(0));
    }

    #[test]
    fn a_string_is_sent_once_and_a_full_lane_refuses_it_whole() {
        let ring = heap_ring(RingGeometry { lane_count: 1, lane_capacity: 64 });
        let thread = fresh_thread();
        let lane = lane_of(&ring, &thread, 100).unwrap();
        let text = b"/a/path/only/this/test/sends";
        let id = mlprof_format::string_id(text);
        assert!(send_string(&ring, lane, 100, 1, id, text));
        let head = || ring.lane(lane).unwrap().head.load(core::sync::atomic::Ordering::Relaxed);
        let after_first = head();
        assert!(send_string(&ring, lane, 100, 1, id, text));
        assert_eq!(head(), after_first, "sent once per process");
        let long = [b'x'; 4000];
        assert!(!send_string(&ring, lane, 100, 1, mlprof_format::string_id(&long), &long));
        assert_eq!(head(), after_first, "nothing of a string that does not fit");
    }
}
