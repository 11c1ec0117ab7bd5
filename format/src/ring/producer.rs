//! The producer side (`libmlprof.so`, on the hook path): claim a lane, write records and
//! strings into it without waiting, count what could not be written, retire the lane at thread
//! exit. Nothing here allocates, locks or makes a system call.

use core::sync::atomic::{AtomicU64, Ordering};

use super::layout::{AggSlot, LANE_ACTIVE, LANE_CLAIMING, LANE_FREE, LANE_RETIRED, Lane};
use super::view::RingView;
use crate::record::{Event, MAX_STRING_BYTES, RECORD_BYTES, string_payload_slots};

impl AggSlot {
    /// Counts one call (single writer: the lane's owner); returns the new count.
    #[inline(always)]
    pub fn count_call(&self) -> u64 {
        let count = self.count.load(Ordering::Relaxed).wrapping_add(1);
        self.count.store(count, Ordering::Relaxed);
        count
    }

    /// Adds the measured duration of one of the counted calls, in ring clock ticks.
    #[inline(always)]
    pub fn add_timing(&self, ticks: u64) {
        bump(&self.timed);
        self.ticks.store(self.ticks.load(Ordering::Relaxed).wrapping_add(ticks), Ordering::Relaxed);
    }
}

impl RingView {
    /// Claims a free lane for thread `tid` of process `pid` (running as effective uid `uid`),
    /// starting the search at a hash of the tid. `None` when every lane is taken (the record is
    /// then counted in `no_lane_drops`).
    pub fn claim(&self, pid: u32, tid: u32, uid: u32) -> Option<u32> {
        let count = self.geometry().lane_count;
        let start = tid.wrapping_mul(2_654_435_761) % count;
        for step in 0..count {
            let index = (start + step) % count;
            let lane = self.lane(index)?;
            if lane.state.load(Ordering::Relaxed) == LANE_FREE
                && lane
                    .state
                    .compare_exchange(LANE_FREE, LANE_CLAIMING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                lane.pid.store(pid, Ordering::Relaxed);
                lane.tid.store(tid, Ordering::Relaxed);
                lane.uid.store(uid, Ordering::Relaxed);
                lane.generation.fetch_add(1, Ordering::Relaxed);
                lane.state.store(LANE_ACTIVE, Ordering::Release);
                return Some(index);
            }
        }
        self.header().no_lane_drops.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Counts a record dropped because its thread has no lane.
    pub fn count_no_lane_drop(&self) {
        self.header().no_lane_drops.fetch_add(1, Ordering::Relaxed);
    }

    /// Marks lane `index` retired if `pid`/`tid` still own it (thread exit).
    pub fn retire(&self, index: u32, pid: u32, tid: u32) {
        let Some(lane) = self.lane(index) else { return };
        if lane.pid.load(Ordering::Relaxed) == pid
            && lane.tid.load(Ordering::Relaxed) == tid
            && lane.state.load(Ordering::Relaxed) == LANE_ACTIVE
        {
            lane.state.store(LANE_RETIRED, Ordering::Release);
        }
    }

    /// Room for `count` records in lane `index`: the head position to write at, or `None` (and
    /// the drop is counted) when the lane is full.
    #[inline(always)]
    fn reserve(&self, lane: &Lane, count: u64) -> Option<u64> {
        let capacity = self.geometry().lane_capacity as u64;
        let head = lane.head.load(Ordering::Relaxed);
        if head.wrapping_add(count).wrapping_sub(lane.cached_tail.load(Ordering::Relaxed)) > capacity {
            let tail = lane.tail.load(Ordering::Acquire);
            lane.cached_tail.store(tail, Ordering::Relaxed);
            if head.wrapping_add(count).wrapping_sub(tail) > capacity {
                bump(&lane.dropped);
                return None;
            }
        }
        Some(head)
    }

    /// Writes one record into lane `index` (which the caller owns); a full lane drops it and
    /// counts the drop. Never blocks.
    #[inline(always)]
    pub fn push(&self, index: u32, event: &Event) -> bool {
        let Some(lane) = self.lane(index) else { return false };
        let Some(head) = self.reserve(lane, 1) else { return false };
        // Safety: the slot belongs to this lane, which only its owner writes; the consumer does
        // not read it before the release store below.
        unsafe { (self.slot(index, head) as *mut Event).write(*event) };
        lane.head.store(head + 1, Ordering::Release);
        prefetch_for_write(self.slot(index, head + 1));
        true
    }

    /// Writes a string definition (`definition`, then `bytes` in the following slots), published
    /// at once; `false` (drop counted) when the lane has no room for all of it.
    pub fn push_string(&self, index: u32, definition: &Event, bytes: &[u8]) -> bool {
        let Some(lane) = self.lane(index) else { return false };
        let bytes = &bytes[..bytes.len().min(MAX_STRING_BYTES)];
        let payload = string_payload_slots(bytes.len()) as u64;
        let Some(head) = self.reserve(lane, 1 + payload) else { return false };
        // Safety: as in `push`; all slots up to head + payload belong to this lane.
        unsafe {
            (self.slot(index, head) as *mut Event).write(*definition);
            for (i, chunk) in bytes.chunks(RECORD_BYTES).enumerate() {
                core::ptr::copy_nonoverlapping(
                    chunk.as_ptr(),
                    self.slot(index, head + 1 + i as u64),
                    chunk.len(),
                );
            }
        }
        lane.head.store(head + 1 + payload, Ordering::Release);
        true
    }

    /// Counts a record its producer had to give up (e.g. its string did not fit).
    pub fn count_drop(&self, index: u32) {
        self.count_drops(index, 1);
    }

    /// Counts `n` records the lane's owner could not write.
    pub fn count_drops(&self, index: u32, n: u64) {
        if let Some(lane) = self.lane(index) {
            lane.dropped.store(lane.dropped.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }

    /// The aggregate counters of lane `index` for `slot` (the lane's owner updates them with
    /// [`AggSlot::count_call`] and [`AggSlot::add_timing`]).
    #[inline(always)]
    pub fn aggregate_slot(&self, index: u32, slot: usize) -> Option<&AggSlot> {
        self.lane(index).and_then(|lane| lane.aggregates.get(slot))
    }
}

/// Asks for the next slot's cache line in exclusive state now, so the next record (microseconds
/// later, after the application's next call) does not wait for the line to come back from the
/// consumer's core.
#[inline(always)]
fn prefetch_for_write(slot: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // Safety: prefetch instructions never fault, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_ET0 }>(slot as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = slot;
}

/// Single-writer increment: a load and a store, no locked read-modify-write.
#[inline(always)]
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::RingGeometry;
    use crate::ring::testing::{Mapping, record, take};

    #[test]
    fn wrap_around_keeps_order_and_full_lane_drops_exactly() {
        let geometry = RingGeometry { lane_count: 2, lane_capacity: 64 };
        let mapping = Mapping::new(geometry);
        let view = mapping.view();
        let lane = view.claim(1, 7, 0).unwrap();
        let mut next = 0;
        let mut seq = 0;
        // Many laps around a 64-slot lane.
        for _ in 0..100 {
            for _ in 0..50 {
                assert!(view.push(lane, &record(seq, 7)));
                seq += 1;
            }
            take(&view, lane, &mut next);
        }
        assert_eq!(next, 5000);
        // Without a consumer, exactly `capacity` records fit; the rest are counted drops.
        for i in 0..100 {
            let accepted = view.push(lane, &record(seq, 7));
            assert_eq!(accepted, i < 64);
            if accepted {
                seq += 1;
            }
        }
        assert_eq!(view.lane(lane).unwrap().dropped.load(Ordering::Relaxed), 36);
        assert_eq!(take(&view, lane, &mut next), 64);
        // A string needing more room than is left is refused whole.
        let definition = Event { kind: crate::record::KIND_STRING_DEF, ..Event::default() };
        assert!(view.push_string(lane, &definition, &[b'x'; 200]));
        assert_eq!(
            view.lane(lane).unwrap().head.load(Ordering::Relaxed)
                - view.lane(lane).unwrap().tail.load(Ordering::Relaxed),
            5
        );
    }

    #[test]
    fn lanes_are_claimed_once_and_freed_for_reuse() {
        let geometry = RingGeometry { lane_count: 3, lane_capacity: 64 };
        let mapping = Mapping::new(geometry);
        let view = mapping.view();
        let claimed: Vec<u32> = (0..3).map(|t| view.claim(1, t, 0).unwrap()).collect();
        let mut sorted = claimed.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 3);
        assert_eq!(view.claim(1, 99, 0), None);
        assert_eq!(view.header().no_lane_drops.load(Ordering::Relaxed), 1);
        view.retire(claimed[1], 1, 5); // not the owner: no effect
        assert_eq!(view.lane(claimed[1]).unwrap().state.load(Ordering::Relaxed), LANE_ACTIVE);
        view.retire(claimed[1], 1, 1);
        assert_eq!(view.lane(claimed[1]).unwrap().state.load(Ordering::Relaxed), LANE_RETIRED);
        view.free(claimed[1]);
        assert_eq!(view.claim(2, 42, 0), Some(claimed[1]));
        assert_eq!(view.lane(claimed[1]).unwrap().generation.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn concurrent_producers_lose_nothing_they_did_not_count() {
        let geometry = RingGeometry { lane_count: 8, lane_capacity: 256 };
        let mapping = Mapping::new(geometry);
        let producers = 4u32;
        let per_producer = 200_000u64;
        let done = std::sync::atomic::AtomicU32::new(0);
        let received: Vec<u64> = std::thread::scope(|scope| {
            for tid in 0..producers {
                let view = mapping.view();
                let done = &done;
                scope.spawn(move || {
                    let lane = view.claim(1, tid, 0).unwrap();
                    let mut seq = 0;
                    for _ in 0..per_producer {
                        // Sequence numbers only advance when accepted, so the consumer can
                        // check order; drops are counted by the ring.
                        if view.push(lane, &record(seq, tid)) {
                            seq += 1;
                        }
                    }
                    view.aggregate_slot(lane, 3).unwrap().count_call();
                    done.fetch_add(1, Ordering::Release);
                });
            }
            let view = mapping.view();
            let mut next = vec![0u64; geometry.lane_count as usize];
            loop {
                let finished = done.load(Ordering::Acquire) == producers;
                for index in 0..geometry.lane_count {
                    take(&view, index, &mut next[index as usize]);
                }
                if finished {
                    break;
                }
            }
            next
        });
        let view = mapping.view();
        let mut total_received = 0;
        let mut total_dropped = 0;
        for index in 0..geometry.lane_count {
            let lane = view.lane(index).unwrap();
            total_received += received[index as usize];
            total_dropped += lane.dropped.load(Ordering::Relaxed);
            if lane.state.load(Ordering::Relaxed) == LANE_ACTIVE {
                assert_eq!(lane.aggregates[3].count.load(Ordering::Relaxed), 1);
            }
        }
        assert_eq!(total_received + total_dropped, producers as u64 * per_producer);
    }
}
