//! The producer side of the ring: each thread writes into its own lane (single writer), so a
//! record costs two plain stores of 64 bytes and one release store, and never waits.

use core::sync::atomic::{AtomicU64, Ordering};

use mlprof_format::func::AGG_SLOTS;
use mlprof_format::record::{
    Event, KIND_STRING_DEF, MAX_STRING_BYTES, RECORD_BYTES, string_payload_slots,
};
use mlprof_format::ring::{
    LANE_ACTIVE, LANE_CLAIMING, LANE_FREE, LANE_RETIRED, Lane, RingGeometry, RingHeader,
};

use crate::guard::ThreadState;
use crate::strings;

/// The mapped ring of this process. Set once when the process joins; the mapping is shared and
/// inherited by fork children, and never unmapped (hooks may run until the very end).
pub struct RingView {
    header: *const RingHeader,
    lanes: *const Lane,
    slots: *mut u8,
    lane_count: u32,
    capacity: u64,
    lane_slots_bytes: usize,
}

// Safety: the pointers refer to a MAP_SHARED mapping that lives for the rest of the process; all
// shared fields are atomics, and slots are only written by the lane's single owner.
unsafe impl Send for RingView {}
unsafe impl Sync for RingView {}

/// Retry a failed lane claim only every this many records (a claim scans every lane).
const CLAIM_RETRY_INTERVAL: u32 = 1024;

impl RingView {
    /// # Safety
    /// `base` must map a ring whose header was validated to have `geometry`, for the rest of the
    /// process's life.
    pub unsafe fn new(base: *mut u8, geometry: RingGeometry) -> RingView {
        RingView {
            header: base as *const RingHeader,
            // Safety: offsets come from the validated geometry, within the mapping.
            lanes: unsafe { base.add(geometry.lanes_offset() as usize) } as *const Lane,
            slots: unsafe { base.add(geometry.slots_offset() as usize) },
            lane_count: geometry.lane_count,
            capacity: geometry.lane_capacity as u64,
            lane_slots_bytes: geometry.lane_slots_bytes() as usize,
        }
    }

    fn header(&self) -> &RingHeader {
        // Safety: see `new`.
        unsafe { &*self.header }
    }

    #[inline(always)]
    fn lane(&self, index: u32) -> &Lane {
        // Safety: `index < lane_count` is checked by every caller (it comes from `claim`).
        unsafe { &*self.lanes.add(index as usize) }
    }

    #[inline(always)]
    fn slot(&self, index: u32, position: u64) -> *mut Event {
        let within = (position & (self.capacity - 1)) as usize * RECORD_BYTES;
        // Safety: inside lane `index`'s slot array.
        unsafe {
            self.slots
                .add(index as usize * self.lane_slots_bytes + within) as *mut Event
        }
    }

    pub fn is_closed(&self) -> bool {
        self.header().state.load(Ordering::Relaxed) != mlprof_format::ring::RING_SERVING
    }

    /// This thread's lane for process `pid`, claiming one on first use.
    #[inline(always)]
    pub fn lane_of(&self, thread: &ThreadState, pid: u32) -> Option<u32> {
        let lane = thread.lane.get();
        if lane != 0 && thread.lane_pid.get() == pid {
            return Some(lane - 1);
        }
        self.claim(thread, pid)
    }

    #[cold]
    fn claim(&self, thread: &ThreadState, pid: u32) -> Option<u32> {
        if thread.lane_pid.get() != pid {
            // New thread, or first record in a fork child: a new identity.
            thread.lane.set(0);
            thread.lane_pid.set(pid);
            thread.tid.set(crate::sys::gettid());
            thread.no_lane_skips.set(0);
        } else if thread.no_lane_skips.get() > 0 {
            thread.no_lane_skips.set(thread.no_lane_skips.get() - 1);
            self.header().no_lane_drops.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let tid = thread.tid.get();
        let start = (tid.wrapping_mul(2_654_435_761)) % self.lane_count;
        for step in 0..self.lane_count {
            let index = (start + step) % self.lane_count;
            let lane = self.lane(index);
            if lane.state.load(Ordering::Relaxed) == LANE_FREE
                && lane
                    .state
                    .compare_exchange(
                        LANE_FREE,
                        LANE_CLAIMING,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                lane.pid.store(pid, Ordering::Relaxed);
                lane.tid.store(tid, Ordering::Relaxed);
                lane.generation.fetch_add(1, Ordering::Relaxed);
                lane.state.store(LANE_ACTIVE, Ordering::Release);
                thread.lane.set(index + 1);
                crate::session::remember_lane_for_thread_exit(index);
                return Some(index);
            }
        }
        thread.no_lane_skips.set(CLAIM_RETRY_INTERVAL);
        self.header().no_lane_drops.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Marks the calling thread's lane retired (thread exit); the collector drains and frees it.
    pub fn retire(&self, index: u32, pid: u32, tid: u32) {
        if index >= self.lane_count {
            return;
        }
        let lane = self.lane(index);
        if lane.pid.load(Ordering::Relaxed) == pid
            && lane.tid.load(Ordering::Relaxed) == tid
            && lane.state.load(Ordering::Relaxed) == LANE_ACTIVE
        {
            lane.state.store(LANE_RETIRED, Ordering::Release);
        }
    }

    /// Room for `count` more records in lane `index`: returns the head position to write at.
    #[inline(always)]
    fn reserve(&self, index: u32, count: u64) -> Option<u64> {
        let lane = self.lane(index);
        let head = lane.head.load(Ordering::Relaxed);
        if head + count - lane.cached_tail.load(Ordering::Relaxed) > self.capacity {
            let tail = lane.tail.load(Ordering::Acquire);
            lane.cached_tail.store(tail, Ordering::Relaxed);
            if head.wrapping_add(count).wrapping_sub(tail) > self.capacity {
                bump(&lane.dropped);
                return None;
            }
        }
        Some(head)
    }

    /// Writes one record; a full lane drops it and counts the drop.
    #[inline(always)]
    pub fn push(&self, index: u32, event: &Event) -> bool {
        let Some(head) = self.reserve(index, 1) else {
            return false;
        };
        // Safety: the slot belongs to this lane, which only this thread writes, and the consumer
        // does not read it before the release store below.
        unsafe { self.slot(index, head).write(*event) };
        self.lane(index).head.store(head + 1, Ordering::Release);
        true
    }

    /// Sends `bytes` as a string definition unless this process already did; `false` when the
    /// lane had no room (the caller then drops the record that needed it).
    pub fn send_string(&self, index: u32, pid: u32, tid: u32, id: u64, bytes: &[u8]) -> bool {
        if strings::was_sent(id) {
            return true;
        }
        let bytes = &bytes[..bytes.len().min(MAX_STRING_BYTES)];
        let payload_slots = string_payload_slots(bytes.len()) as u64;
        let Some(head) = self.reserve(index, 1 + payload_slots) else {
            return false;
        };
        let definition = Event {
            kind: KIND_STRING_DEF,
            pid,
            tid,
            arg: id,
            arg2: bytes.len() as u64,
            ..Event::default()
        };
        // Safety: as in `push`; the payload slots follow the definition in the same lane and are
        // published together, so the consumer sees all of them or none.
        unsafe {
            self.slot(index, head).write(definition);
            for (i, chunk) in bytes.chunks(RECORD_BYTES).enumerate() {
                let slot = self.slot(index, head + 1 + i as u64) as *mut u8;
                core::ptr::copy_nonoverlapping(chunk.as_ptr(), slot, chunk.len());
            }
        }
        self.lane(index)
            .head
            .store(head + 1 + payload_slots, Ordering::Release);
        strings::mark_sent(id);
        true
    }

    /// Counts a record that could not be written for lack of something else (e.g. its string).
    pub fn count_drop(&self, index: u32) {
        bump(&self.lane(index).dropped);
    }

    /// Adds one aggregated call (and its duration when measured) to the lane's counters.
    #[inline(always)]
    pub fn aggregate(&self, index: u32, slot: usize, ticks: Option<u64>) {
        let Some(counters) = self.lane(index).aggregates.get(slot) else {
            return;
        };
        bump(&counters.count);
        if let Some(ticks) = ticks {
            bump(&counters.timed);
            counters.ticks.store(
                counters.ticks.load(Ordering::Relaxed) + ticks,
                Ordering::Relaxed,
            );
        }
        const _: () = assert!(AGG_SLOTS == 16);
    }
}

/// Single-writer increment: a load and a store, no locked read-modify-write.
#[inline(always)]
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}
