//! This thread's lane of the ring: claimed on the first record of each thread (and again in a
//! fork child, which is a new identity), cached in the thread-local state, backed as it grows,
//! retired at thread exit (a pthread key's destructor). The ring protocol itself lives in
//! `mlprof_format::ring::RingView`.

use core::ffi::c_void;
use core::sync::atomic::{AtomicU32, Ordering};

use mlprof_format::record::{Event, KIND_STRING_DEF};
use mlprof_format::ring::{Claim, LaneWriter, RingView};

use super::{session, strings};
use crate::guard::{self, ThreadState};

/// This thread's lane for `owner` (`session::identity()`: epoch and pid), claiming one on
/// first use.
#[inline(always)]
pub fn lane_of(ring: &'static RingView, thread: &ThreadState, owner: u64) -> Option<u32> {
    let lane = thread.lane.get();
    if lane != 0 && thread.lane_owner.get() == owner {
        return Some(lane - 1);
    }
    claim(ring, thread, owner)
}

/// Runs with the guard held; calls no hooked function (see `remember_lane_for_thread_exit`).
#[cold]
fn claim(ring: &'static RingView, thread: &ThreadState, owner: u64) -> Option<u32> {
    let offered = ring.header().lanes_offered.load(Ordering::Acquire);
    if thread.lane_owner.get() != owner {
        // A new thread, the first record of a fork child, or a new collector: a new identity.
        thread.lane.set(0);
        thread.lane_owner.set(owner);
        thread.tid.set(crate::sys::gettid());
        thread.no_lane.set(false);
    } else if thread.no_lane.get() && thread.no_lane_offered.get() == offered {
        // No lane was offered since the last try: scanning again would find none.
        ring.count_no_lane_drop(thread.tid.get());
        return None;
    }
    // The view backs open lanes with `back_lane`, unless the kernel refused it once.
    let may_back = SELF_BACKING.load(Ordering::Relaxed);
    match ring.claim(owner as u32, thread.tid.get(), session::uid(), session::image(), may_back) {
        Some(claim) => {
            thread.lane.set(claim.index + 1);
            thread.lane_generation.set(claim.generation);
            thread.lane_writer.set(ring.writer(claim.index).unwrap_or(LaneWriter::NONE));
            thread.no_lane.set(false);
            remember_lane_for_thread_exit(claim.index);
            Some(claim.index)
        }
        None => {
            ring.count_no_lane_drop(thread.tid.get());
            thread.no_lane.set(true);
            thread.no_lane_offered.set(offered);
            // The collector backs and offers more lanes when it runs: wake it now.
            session::wake_collector(ring);
            None
        }
    }
}

/// pthread key whose destructor retires the thread's lane; u32::MAX = none.
static LANE_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

/// glibc keeps the values of keys below this (`PTHREAD_KEY_2NDLEVEL_SIZE`) in the thread's own
/// descriptor; a higher key's first value in a thread allocates a block with `calloc`, which
/// must not happen while claiming a lane (a preloaded malloc may be in the middle of its own
/// initialization, and call hooked functions, on this very thread).
const KEYS_WITHOUT_ALLOCATION: u32 = 32;

/// Creates the pthread key whose destructor retires a thread's lane at its exit. Once per
/// process image, from the constructor (`lifecycle::register_process_hooks`): creating a key
/// may allocate, and fork children inherit it.
pub(super) fn create_thread_exit_key() {
    let mut key: libc::pthread_key_t = 0;
    // Safety: a plain libc call with a valid out-pointer and an `extern "C"` destructor.
    if unsafe { libc::pthread_key_create(&mut key, Some(retire_lane_at_thread_exit)) } == 0 {
        LANE_KEY.store(key, Ordering::Relaxed);
    }
}

/// Registers the pthread-key destructor that retires a lane when its thread exits, where that
/// cannot allocate; otherwise the collector frees the lane once it sees the thread gone (its
/// liveness check, every 100 ms), which is only slower.
fn remember_lane_for_thread_exit(index: u32) {
    let key = LANE_KEY.load(Ordering::Relaxed);
    if key < KEYS_WITHOUT_ALLOCATION {
        // Safety: the key was created by `create_thread_exit_key`; the value is an integer.
        unsafe { libc::pthread_setspecific(key, (index as usize + 1) as *const c_void) };
    }
}

/// The key's destructor, at a thread's exit: retires the lane `value` names (its index + 1)
/// if the thread still holds it for the current identity (not a lane of an earlier epoch).
extern "C" fn retire_lane_at_thread_exit(value: *mut c_void) {
    let Some(ring) = session::ring() else { return };
    let Some(thread) = guard::current() else { return };
    let index = (value as usize).wrapping_sub(1) as u32;
    if thread.lane.get() == index + 1 && thread.lane_owner.get() == session::identity() {
        if thread.in_flight.replace(false) {
            // Cancelled inside a recorded call, which never returned to write its record.
            ring.count_interrupted(index, 1);
        }
        ring.retire(Claim { index, generation: thread.lane_generation.get() });
        thread.lane.set(0);
        thread.lane_owner.set(0);
    }
}

/// The page size, from the auxiliary vector libc keeps (no system call, no allocation, unlike
/// rustix's `page_size`, which asks the kernel the first time).
fn page_bytes() -> usize {
    // Safety: getauxval only reads the vector libc saved at start-up.
    match unsafe { libc::getauxval(libc::AT_PAGESZ) } as usize {
        0 => 4096,
        size => size,
    }
}

/// Whether this process may back an open lane itself (cleared when the kernel lacks
/// `MADV_POPULATE_WRITE`, older than 5.14).
static SELF_BACKING: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(true);

/// Backs slots of this thread's lane before the thread writes them (an open lane's first slots
/// when it claims one, more when its head reaches the end of what is backed):
/// `MADV_POPULATE_WRITE` allocates and maps every page now, and returns an error (not a SIGBUS)
/// when the shm filesystem is full. A few times in a lane's life; it also spares the thread the
/// page faults of its first lap over those slots.
pub(super) fn back_lane(start: *mut u8, len: usize) -> bool {
    if !SELF_BACKING.load(Ordering::Relaxed) {
        return false;
    }
    // The advice wants a page-aligned start; a lane's slots start at one only where the lane
    // blocks fill whole pages (256 of them do). The page before belongs to the ring too.
    let misalignment = start as usize % page_bytes();
    // Safety: the range is slots of one lane inside our shared mapping of the ring, widened
    // down to the start of its page, which the mapping (page-aligned) also holds.
    match unsafe {
        rustix::mm::madvise(
            start.sub(misalignment) as *mut core::ffi::c_void,
            len + misalignment,
            rustix::mm::Advice::LinuxPopulateWrite,
        )
    } {
        Ok(()) => true,
        Err(rustix::io::Errno::INVAL) => {
            SELF_BACKING.store(false, Ordering::Relaxed);
            false
        }
        Err(_) => false,
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
    use crate::testing::heap_ring;
    use mlprof_format::ring::RingGeometry;

    fn fresh_thread() -> ThreadState {
        // A thread state of its own, so these tests do not disturb the test thread's lane.
        ThreadState::new()
    }

    #[test]
    fn a_thread_claims_one_lane_and_keeps_it() {
        let ring = heap_ring(RingGeometry { lane_count: 4, lane_capacity: 64 });
        let thread = fresh_thread();
        let lane = lane_of(ring, &thread, 100).unwrap();
        assert_eq!(lane_of(ring, &thread, 100), Some(lane));
        assert_eq!(thread.lane_generation.get(), 1);
        let owner = ring.lane(lane).unwrap();
        assert_eq!(owner.pid.load(core::sync::atomic::Ordering::Relaxed), 100);
        assert_eq!(owner.tid.load(core::sync::atomic::Ordering::Relaxed), crate::sys::gettid());
    }

    #[test]
    fn a_fork_child_is_a_new_identity_with_a_lane_of_its_own() {
        let ring = heap_ring(RingGeometry { lane_count: 4, lane_capacity: 64 });
        let thread = fresh_thread();
        let parent_lane = lane_of(ring, &thread, 100).unwrap();
        // Same thread state (fork copies it), another pid: never the parent's lane.
        let child_lane = lane_of(ring, &thread, 101).unwrap();
        assert_ne!(parent_lane, child_lane);
        assert_eq!(thread.lane_owner.get(), 101);
        // Same pid in a later epoch (a new collector): a new lane too.
        let rejoined = lane_of(ring, &thread, 2 << 32 | 101).unwrap();
        assert_ne!(rejoined, child_lane);
    }

    #[test]
    fn with_every_lane_taken_records_are_counted_until_a_lane_is_offered() {
        let ring = heap_ring(RingGeometry { lane_count: 1, lane_capacity: 64 });
        let first = fresh_thread();
        assert_eq!(lane_of(ring, &first, 100), Some(0));
        let second = fresh_thread();
        let no_lane = || ring.header().no_lane_drops_total();
        assert_eq!(lane_of(ring, &second, 100), None);
        assert_eq!(no_lane(), 1);
        // Until the collector offers a lane, the thread drops (and counts) without scanning.
        for expected in 2..=5 {
            assert_eq!(lane_of(ring, &second, 100), None);
            assert_eq!(no_lane(), expected);
        }
        // The first thread exits; the collector frees its lane: the next record claims it.
        ring.retire(mlprof_format::ring::Claim { index: 0, generation: first.lane_generation.get() });
        ring.free(0);
        assert_eq!(lane_of(ring, &second, 100), Some(0));
        assert_eq!(no_lane(), 5);
    }

    #[test]
    fn a_string_is_sent_once_and_a_full_lane_refuses_it_whole() {
        let ring = heap_ring(RingGeometry { lane_count: 1, lane_capacity: 64 });
        let thread = fresh_thread();
        let lane = lane_of(ring, &thread, 100).unwrap();
        let text = b"/a/path/only/this/test/sends";
        let id = mlprof_format::string_id(text);
        assert!(send_string(ring, lane, 100, 1, id, text));
        let head = || ring.lane(lane).unwrap().head.load(core::sync::atomic::Ordering::Relaxed);
        let after_first = head();
        assert!(send_string(ring, lane, 100, 1, id, text));
        assert_eq!(head(), after_first, "sent once per process");
        let long = [b'x'; 4000];
        assert!(!send_string(ring, lane, 100, 1, mlprof_format::string_id(&long), &long));
        assert_eq!(head(), after_first, "nothing of a string that does not fit");
    }
}
