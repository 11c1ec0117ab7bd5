//! The producer side (`libmlprof.so`, on the hook path): claim a lane, write records and
//! strings into it without waiting, count what could not be written, retire the lane at thread
//! exit. Nothing here allocates, locks or makes a system call, but for the backing function a
//! producer that grows its lane brings ([`BackFn`]: a few times in a lane's life).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::layout::{
    AggSlot, GROW_RETRY_DROPS, LANE_ACTIVE, LANE_CLAIMING, LANE_FREE, LANE_OPEN, LANE_RETIRED, LANE_UNBACKED,
    Lane, NO_LANE_COUNTERS, grown_backing, lane_generation, lane_state, lane_word,
};
use super::view::RingView;
use crate::record::{Event, MAX_STRING_BYTES, RECORD_BYTES, string_payload_slots};

/// Backs `len` bytes of the ring's memory from `start` (within one lane's slots, `start` not
/// necessarily page-aligned) so that writing them cannot fault; false when it could not (memory
/// ran out). `libmlprof.so` passes one (`MADV_POPULATE_WRITE`); it is called when a thread
/// claims an `OPEN` lane and when its head reaches the end of what is backed.
pub type BackFn = fn(*mut u8, usize) -> bool;

/// The slow path of a record that reached its lane's `limit`: looks at the consumer's tail and
/// at what is backed again, grows the lane if that is what stops it, and refreshes the limit.
/// False (the drop counted) when `count` records from `head` still do not fit. `slots` is the
/// lane's slot array.
#[cold]
#[inline(never)]
fn make_room(
    lane: &Lane,
    slots: *mut u8,
    capacity: u64,
    head: u64,
    count: u64,
    back: Option<BackFn>,
) -> bool {
    let tail = lane.tail.load(Ordering::Acquire);
    lane.cached_tail.store(tail, Ordering::Relaxed);
    let end = head.wrapping_add(count);
    let mut backed = lane.backed.load(Ordering::Acquire);
    if backed < capacity && end > backed {
        backed = grow(lane, slots, capacity, backed, end, back);
    }
    // Positions never wrap a u64; a tail past the head (a foreign write into the lane) leaves
    // no room at all, as the wrapping difference did before.
    let room = if head.wrapping_sub(tail) > capacity { 0 } else { tail.wrapping_add(capacity) };
    let limit = if backed < capacity { room.min(backed) } else { room };
    lane.limit.store(limit, Ordering::Relaxed);
    if end > limit {
        signal_safe_add(&lane.dropped, 1);
        return false;
    }
    true
}

/// Backs more of a lane whose head reached `backed`, doubling it (at least to `end`, in whole
/// [`LANE_FIRST_BACKED`] steps); returns what is backed now. After a failure (memory ran out)
/// it tries again only every [`GROW_RETRY_DROPS`] drops, so a full shm filesystem costs the
/// thread a system call per thousand records, not per record. A failure, or having no way to
/// back memory, is marked in `grow_failed_at`, which asks the collector to grow the lane.
fn grow(lane: &Lane, slots: *mut u8, capacity: u64, backed: u64, end: u64, back: Option<BackFn>) -> u64 {
    let failed_at = lane.grow_failed_at.load(Ordering::Relaxed);
    let dropped = lane.dropped.load(Ordering::Relaxed);
    let Some(back) = back else {
        // The collector grows the lanes of owners that cannot (see `Lane::grow_failed_at`).
        lane.grow_failed_at.store(dropped.wrapping_add(1), Ordering::Relaxed);
        return backed;
    };
    if failed_at != 0 && dropped.wrapping_sub(failed_at - 1) < GROW_RETRY_DROPS {
        return backed;
    }
    let target = grown_backing(capacity, backed, end);
    // Safety: `backed < target <= capacity`: the range lies in the lane's slot array.
    let start = unsafe { slots.add(backed as usize * RECORD_BYTES) };
    if back(start, (target - backed) as usize * RECORD_BYTES) {
        lane.grow_failed_at.store(0, Ordering::Relaxed);
        lane.backed.fetch_max(target, Ordering::Release).max(target)
    } else {
        lane.grow_failed_at.store(dropped.wrapping_add(1), Ordering::Relaxed);
        backed
    }
}

impl AggSlot {
    /// Counts one call; returns the new count. The owner thread is the only writer, but a
    /// signal handler on that thread may count its own calls in the middle of this one: the
    /// add is therefore a single instruction (see [`signal_safe_add`]), which a signal cannot
    /// split, and no count is ever lost.
    #[inline(always)]
    pub fn count_call(&self) -> u64 {
        signal_safe_add(&self.count, 1).wrapping_add(1)
    }

    /// Adds the measured duration of one of the counted calls, in ring clock ticks.
    #[inline(always)]
    pub fn add_timing(&self, ticks: u64) {
        signal_safe_add(&self.timed, 1);
        signal_safe_add(&self.ticks, ticks);
    }
}

/// A lane a producer claimed: its index and the generation it was claimed with (what its
/// owner later retires it with).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The lane's index.
    pub index: u32,
    /// The lane's generation for this claim.
    pub generation: u32,
}

impl RingView {
    /// Claims a lane for thread `tid` of process image `image` of process `pid` (running as
    /// effective uid `uid`), starting the search at a hash of the tid: a `FREE` lane (backed by
    /// the collector) if there is one, else, when `may_back` and the view has a backer
    /// ([`RingView::with_backing`]), an `OPEN` lane whose first part the backer backs first (a
    /// lane it fails to back goes back to the collector, `UNBACKED`, and the search goes on).
    /// `may_back` lets a producer whose kernel refused the backing once stop trying without
    /// sending every open lane back. `None` when no lane could be had (the caller counts the
    /// record with [`RingView::count_no_lane_drop`]).
    pub fn claim(&self, pid: u32, tid: u32, uid: u32, image: u64, may_back: bool) -> Option<Claim> {
        self.claim_in(LANE_FREE, pid, tid, uid, image, None).or_else(|| {
            let back = self.back.filter(|_| may_back)?;
            self.claim_in(LANE_OPEN, pid, tid, uid, image, Some(back))
        })
    }

    /// One pass over the lanes for a lane in state `wanted`.
    fn claim_in(
        &self,
        wanted: u32,
        pid: u32,
        tid: u32,
        uid: u32,
        image: u64,
        back: Option<BackFn>,
    ) -> Option<Claim> {
        let count = self.geometry().lane_count;
        let start = tid.wrapping_mul(2_654_435_761) % count;
        for step in 0..count {
            let index = (start + step) % count;
            let lane = self.lane(index)?;
            let word = lane.state.load(Ordering::Relaxed);
            if lane_state(word) != wanted {
                continue;
            }
            let generation = lane_generation(word).wrapping_add(1);
            let claiming = lane_word(generation, LANE_CLAIMING);
            if lane.state.compare_exchange(word, claiming, Ordering::Acquire, Ordering::Relaxed).is_err() {
                continue;
            }
            if let Some(back) = back {
                let first = self.geometry().first_backed();
                let backed = self.lane_part(index, 0, first).is_some_and(|(start, len)| back(start, len));
                if backed {
                    lane.backed.fetch_max(first, Ordering::Release);
                } else {
                    let unbacked = lane_word(generation, LANE_UNBACKED);
                    let _ =
                        lane.state.compare_exchange(claiming, unbacked, Ordering::Release, Ordering::Relaxed);
                    continue;
                }
            }
            lane.pid.store(pid, Ordering::Relaxed);
            lane.tid.store(tid, Ordering::Relaxed);
            lane.uid.store(uid, Ordering::Relaxed);
            lane.image.store(image, Ordering::Relaxed);
            // Fails only when the collector took a claim it believed abandoned (this thread
            // stalled for a whole liveness period between the two steps): look further.
            let active = lane_word(generation, LANE_ACTIVE);
            if lane.state.compare_exchange(claiming, active, Ordering::Release, Ordering::Relaxed).is_ok() {
                // After the lane is ACTIVE: a collector that sees the count move sees the lane.
                self.header().lanes_claimed.fetch_add(1, Ordering::Release);
                return Some(Claim { index, generation });
            }
        }
        None
    }

    /// Counts a record dropped because thread `tid` has no lane.
    pub fn count_no_lane_drop(&self, tid: u32) {
        if let Some(counter) = self.header().no_lane_drops.get(tid as usize % NO_LANE_COUNTERS) {
            counter.value.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Marks the lane of `claim` retired (thread exit), if the claim still owns it: one
    /// compare-and-swap of the whole state word, so a lane meanwhile reclaimed and claimed by
    /// another thread is left alone.
    pub fn retire(&self, claim: Claim) {
        let Some(lane) = self.lane(claim.index) else { return };
        let active = lane_word(claim.generation, LANE_ACTIVE);
        let retired = lane_word(claim.generation, LANE_RETIRED);
        let _ = lane.state.compare_exchange(active, retired, Ordering::Release, Ordering::Relaxed);
    }

    /// Room for `count` records in lane `index`: the head position to write at, or `None` (and
    /// the drop is counted) when the lane is full, or ends where its backing does and cannot
    /// grow.
    #[inline(always)]
    fn reserve(&self, index: u32, lane: &Lane, count: u64) -> Option<u64> {
        let head = lane.head.load(Ordering::Relaxed);
        if head.wrapping_add(count) > lane.limit.load(Ordering::Relaxed) {
            let capacity = self.geometry().lane_capacity as u64;
            if !make_room(lane, self.slot_of(index, 0), capacity, head, count, self.back) {
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
        let Some(head) = self.reserve(index, lane, 1) else { return false };
        // Safety: the slot belongs to this lane, which only its owner writes; the consumer does
        // not read it before the release store below.
        unsafe { (self.slot(index, head) as *mut Event).write(*event) };
        // Wrapping: positions never reach 2^64 from a claim, but a lane another process
        // scribbled on may hold any head (its slot is still the lane's, by the mask).
        lane.head.store(head.wrapping_add(1), Ordering::Release);
        prefetch_for_write(self.slot(index, head.wrapping_add(1)));
        true
    }

    /// Writes a string definition (`definition`, then `bytes` in the following slots), published
    /// at once; `false` (drop counted) when the lane has no room for all of it.
    pub fn push_string(&self, index: u32, definition: &Event, bytes: &[u8]) -> bool {
        let Some(lane) = self.lane(index) else { return false };
        let bytes = &bytes[..bytes.len().min(MAX_STRING_BYTES)];
        let payload = string_payload_slots(bytes.len()) as u64;
        let Some(head) = self.reserve(index, lane, 1 + payload) else { return false };
        // Safety: as in `push`; all slots up to head + payload belong to this lane.
        unsafe {
            (self.slot(index, head) as *mut Event).write(*definition);
            for (i, chunk) in bytes.chunks(RECORD_BYTES).enumerate() {
                core::ptr::copy_nonoverlapping(
                    chunk.as_ptr(),
                    self.slot(index, head.wrapping_add(1 + i as u64)),
                    chunk.len(),
                );
            }
        }
        lane.head.store(head.wrapping_add(1 + payload), Ordering::Release);
        true
    }

    /// Counts a record its producer had to give up (e.g. its string did not fit).
    pub fn count_drop(&self, index: u32) {
        self.count_drops(index, 1);
    }

    /// Counts `n` records the lane's owner could not write.
    pub fn count_drops(&self, index: u32, n: u64) {
        if let Some(lane) = self.lane(index) {
            signal_safe_add(&lane.dropped, n);
        }
    }

    /// Counts `n` calls that a signal handler made while the lane's owner was writing.
    pub fn count_interrupted(&self, index: u32, n: u64) {
        if let Some(lane) = self.lane(index) {
            signal_safe_add(&lane.interrupted, n);
        }
    }

    /// The aggregate counters of lane `index` for `slot` (the lane's owner updates them with
    /// [`AggSlot::count_call`] and [`AggSlot::add_timing`]).
    #[inline(always)]
    pub fn aggregate_slot(&self, index: u32, slot: usize) -> Option<&AggSlot> {
        self.lane(index).and_then(|lane| lane.aggregates.get(slot))
    }
}

/// A claimed lane as its owner writes it: the addresses a record needs, computed once per
/// claim, so a push is a head load, a check against the lane's cached limit, one 64-byte store
/// and a head store.
#[derive(Clone, Copy, Debug)]
pub struct LaneWriter {
    header: *const super::RingHeader,
    lane: *const Lane,
    slots: *mut u8,
    /// `capacity - 1`.
    mask: u64,
    /// How the owner backs more of the lane (`None`: it writes only what the collector backed).
    back: Option<BackFn>,
}

impl LaneWriter {
    /// A writer that writes nothing (for a thread that has no lane yet).
    pub const NONE: LaneWriter = LaneWriter {
        header: core::ptr::null(),
        lane: core::ptr::null(),
        slots: core::ptr::null_mut(),
        mask: 0,
        back: None,
    };

    /// Writes one record (the caller owns the lane, and holds its thread's guard so that no
    /// signal handler pushes into it meanwhile); a full lane drops it and counts the drop.
    /// Never blocks. When the lane crosses a quarter of its capacity and is a quarter full or
    /// more, a sleeping collector is asked to wake up (`true` returned in `wake`'s place: the caller
    /// makes the system call, rarely).
    #[inline(always)]
    pub fn push(&self, event: &Event) -> Pushed {
        // Safety: a writer is only made by `RingView::writer` from a `'static` view, whose
        // mapping stays valid for good; `lane`/`slots` point into it (or are null for NONE).
        let Some(lane) = (unsafe { self.lane.as_ref() }) else { return Pushed::Dropped };
        let head = lane.head.load(Ordering::Relaxed);
        let capacity = self.mask + 1;
        if head.wrapping_add(1) > lane.limit.load(Ordering::Relaxed)
            && !make_room(lane, self.slots, capacity, head, 1, self.back)
        {
            return Pushed::Dropped;
        }
        let slot = (head & self.mask) as usize * RECORD_BYTES;
        // Safety: the slot lies in this lane's array, which only its owner writes; the consumer
        // reads it only after the release store below.
        unsafe { (self.slots.add(slot) as *mut Event).write(*event) };
        let next = head.wrapping_add(1);
        lane.head.store(next, Ordering::Release);
        // Safety: as above (a prefetch never faults).
        prefetch_for_write(unsafe { self.slots.add((next & self.mask) as usize * RECORD_BYTES) });
        if next & (capacity / 4 - 1) == 0 {
            return self.crossed_a_quarter(lane, next, capacity);
        }
        Pushed::Written
    }

    /// Every quarter lap: is the lane a quarter full or more and the collector asleep? (A
    /// quarter, not half: on a machine whose every CPU runs a writer, the woken collector
    /// waits for a time slice, and the rest of the lane is what it has to get one.)
    #[cold]
    fn crossed_a_quarter(&self, lane: &Lane, head: u64, capacity: u64) -> Pushed {
        // Safety: as in `push`.
        let header = unsafe { &*self.header };
        let filled = head.wrapping_sub(lane.cached_tail.load(Ordering::Relaxed));
        if filled >= capacity / 4 && header.sleeping.load(Ordering::Relaxed) != 0 {
            header.wake.fetch_add(1, Ordering::Release);
            return Pushed::WrittenWakeCollector;
        }
        Pushed::Written
    }

    /// The shared header's wake word (for the futex call a `WrittenWakeCollector` asks for).
    pub fn wake_word(&self) -> Option<&AtomicU32> {
        // Safety: as in `push`.
        unsafe { self.header.as_ref() }.map(|h| &h.wake)
    }

    /// The lane this writer writes (in a `'static` ring: see `RingView::writer`).
    pub fn lane(&self) -> Option<&'static Lane> {
        // Safety: as in `push`.
        unsafe { self.lane.as_ref() }
    }
}

/// What a [`LaneWriter::push`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// The record is published.
    Written,
    /// Published, and the collector sleeps while this lane is a quarter full: wake it (a futex
    /// wake on [`LaneWriter::wake_word`]).
    WrittenWakeCollector,
    /// The lane was full: dropped and counted.
    Dropped,
}

impl RingView {
    /// The writer of lane `index` (its owner's fast path).
    pub fn writer(&'static self, index: u32) -> Option<LaneWriter> {
        let lane = self.lane(index)? as *const Lane;
        let mask = self.geometry().lane_capacity as u64 - 1;
        Some(LaneWriter {
            header: self.header() as *const _,
            lane,
            slots: self.slot(index, 0),
            mask,
            back: self.back,
        })
    }
}

/// Asks for the next slot's cache line in exclusive state now, so the next record (microseconds
/// later, after the application's next call) does not wait for the line to come back from the
/// consumer's core.
#[inline(always)]
fn prefetch_for_write(slot: *const u8) {
    // `prefetchw`: the intrinsic's write hint compiles to a read prefetch (`prefetcht0`) unless
    // the build targets `prfchw`; the instruction itself exists on every x86-64 that runs us
    // (older CPUs decode it as a no-op).
    #[cfg(target_arch = "x86_64")]
    // Safety: prefetch instructions never fault, whatever the address.
    unsafe {
        core::arch::asm!("prefetchw [{0}]", in(reg) slot, options(nostack, preserves_flags, readonly))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = slot;
}

/// Adds `n` to a counter that one thread writes, a signal handler on that thread included;
/// returns the previous value. On x86-64 one `xadd` without a lock prefix: a single
/// instruction (a signal arrives between instructions, never inside one) and no bus lock,
/// since no other thread writes the counter (the collector only reads it, and an aligned
/// 8-byte access is never torn). Elsewhere an atomic add, which is signal-safe too.
#[inline(always)]
pub fn signal_safe_add(counter: &AtomicU64, n: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let mut value = n;
        // Safety: `counter` is a valid, aligned u64 for the lifetime of the borrow; xadd
        // exchanges `value` with the previous contents while adding.
        unsafe {
            core::arch::asm!(
                "xadd qword ptr [{counter}], {value}",
                counter = in(reg) counter.as_ptr(),
                value = inout(reg) value,
                options(nostack)
            );
        }
        value
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        counter.fetch_add(n, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{LANE_FIRST_BACKED, RingGeometry};
    use crate::testing::{HeapRing, record, take};

    #[test]
    fn wrap_around_keeps_order_and_full_lane_drops_exactly() {
        let geometry = RingGeometry { lane_count: 2, lane_capacity: 64 };
        let mapping = HeapRing::new(geometry);
        let view = mapping.view();
        let lane = view.claim(1, 7, 0, 0, false).unwrap().index;
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
        let mapping = HeapRing::new(geometry);
        let view = mapping.view();
        let claims: Vec<Claim> = (0..3).map(|t| view.claim(1, t, 0, 77, false).unwrap()).collect();
        let mut sorted: Vec<u32> = claims.iter().map(|c| c.index).collect();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 3);
        assert!(claims.iter().all(|c| c.generation == 1));
        assert_eq!(view.lane(claims[0].index).unwrap().image.load(Ordering::Relaxed), 77);
        assert_eq!(view.claim(1, 99, 0, 0, false), None);
        assert_eq!(
            view.header().lanes_claimed.load(Ordering::Relaxed),
            3,
            "every claim, and only a claim that got its lane, is counted for the collector"
        );
        view.count_no_lane_drop(99);
        view.count_no_lane_drop(100);
        assert_eq!(view.header().no_lane_drops_total(), 2);
        let state = |index: u32| view.lane(index).unwrap().state.load(Ordering::Relaxed);
        view.retire(Claim { generation: 7, ..claims[1] }); // another claim's generation: no effect
        assert_eq!(state(claims[1].index), lane_word(1, LANE_ACTIVE));
        view.retire(claims[1]);
        assert_eq!(state(claims[1].index), lane_word(1, LANE_RETIRED));
        view.free(claims[1].index);
        assert_eq!(state(claims[1].index), lane_word(1, LANE_FREE));
        let again = view.claim(2, 42, 0, 0, false).unwrap();
        assert_eq!(again, Claim { index: claims[1].index, generation: 2 });
        // The first owner's retire, arriving late, cannot touch the new owner's lane.
        view.retire(claims[1]);
        assert_eq!(state(again.index), lane_word(2, LANE_ACTIVE));
    }

    #[test]
    fn an_unbacked_lane_is_never_claimed_and_an_abandoned_claim_is_taken_back() {
        let geometry = RingGeometry { lane_count: 2, lane_capacity: 64 };
        let mapping = HeapRing::new(geometry);
        let view = mapping.view();
        assert!(view.withdraw(0), "a free lane can be taken back");
        assert!(!view.withdraw(0));
        let claim = view.claim(1, 5, 0, 0, false).unwrap();
        assert_eq!(claim.index, 1, "lane 0 is unbacked");
        assert_eq!(view.claim(1, 6, 0, 0, false), None);
        assert!(view.offer(0));
        assert!(!view.offer(0));
        // A claimer killed between its two steps leaves the lane CLAIMING.
        let lane = view.lane(0).unwrap();
        let stuck = lane_word(4, LANE_CLAIMING);
        lane.state.store(stuck, Ordering::Relaxed);
        assert!(!view.reclaim_stale_claim(0, lane_word(3, LANE_CLAIMING)), "another claim than the one seen");
        assert!(view.reclaim_stale_claim(0, stuck));
        assert_eq!(
            lane.state.load(Ordering::Relaxed),
            lane_word(4, LANE_UNBACKED),
            "backed again before reuse"
        );
        assert!(view.offer(0));
        assert_eq!(view.claim(1, 6, 0, 0, false), Some(Claim { index: 0, generation: 5 }));
    }

    #[test]
    fn an_open_lane_is_claimed_only_by_a_producer_that_backs_it() {
        let geometry = RingGeometry { lane_count: 2, lane_capacity: 64 };
        let mapping = HeapRing::new(geometry);
        let view = mapping.view();
        assert!(view.withdraw(0) && view.withdraw(1));
        assert!(view.open(0) && view.open(1));
        assert_eq!(view.claim(1, 5, 0, 0, true), None, "without a way to back it, an open lane is not taken");
        /// Fails its first call, then succeeds.
        fn fail_first(start: *mut u8, len: usize) -> bool {
            BACKED.with_borrow_mut(|(calls, _)| {
                calls.push((start as usize, len));
                calls.len() > 1
            })
        }
        BACKED.with_borrow_mut(|b| *b = (Vec::new(), true));
        let view = mapping.view().with_backing(fail_first);
        assert_eq!(view.claim(1, 5, 0, 0, false), None, "a producer that may not back takes no open lane");
        assert!(BACKED.with_borrow(|b| b.0.is_empty()));
        let claim = view.claim(1, 5, 0, 0, true).unwrap();
        let tries = BACKED.with_borrow_mut(|b| std::mem::take(&mut b.0));
        assert_eq!(tries.len(), 2, "the first lane failed to back, the second did");
        assert_eq!(tries[1], (view.lane_slots(claim.index).unwrap().0 as usize, 64 * 64));
        let other = 1 - claim.index;
        let state = view.lane(other).unwrap().state.load(Ordering::Relaxed);
        assert_eq!(
            state,
            lane_word(1, LANE_UNBACKED),
            "a lane that could not be backed goes back to the collector"
        );
    }

    /// A mapping whose lanes are backed only as far as `LANE_FIRST_BACKED`, as the collector
    /// offers them (heap memory is backed whole; the count is what the protocol goes by).
    fn first_backed_lanes(geometry: RingGeometry) -> HeapRing {
        let mapping = HeapRing::new(geometry);
        let view = mapping.view();
        for index in 0..geometry.lane_count {
            assert!(view.withdraw(index));
            view.lane(index).unwrap().backed.store(0, Ordering::Relaxed);
            assert!(view.offer_backed(index, geometry.first_backed()));
        }
        mapping
    }

    std::thread_local! {
        /// The ranges a test's backing function was asked for, and whether it succeeds.
        static BACKED: std::cell::RefCell<(Vec<(usize, usize)>, bool)> = const { std::cell::RefCell::new((Vec::new(), true)) };
    }

    fn back_for_test(start: *mut u8, len: usize) -> bool {
        BACKED.with_borrow_mut(|(calls, succeed)| {
            calls.push((start as usize, len));
            *succeed
        })
    }

    /// A first-backed mapping (kept alive by the caller), a view that grows lanes through
    /// `back_for_test` (succeeding as `succeed` says, its calls cleared), thread 7's lane in
    /// it and that lane's writer.
    fn growing_lane(geometry: RingGeometry, succeed: bool) -> (HeapRing, &'static RingView, u32, LaneWriter) {
        let mapping = first_backed_lanes(geometry);
        let view: &'static RingView = Box::leak(Box::new(mapping.view().with_backing(back_for_test)));
        let lane = view.claim(1, 7, 0, 0, false).unwrap().index;
        let writer = view.writer(lane).unwrap();
        BACKED.with_borrow_mut(|b| *b = (Vec::new(), succeed));
        (mapping, view, lane, writer)
    }

    #[test]
    fn a_lane_is_written_only_as_far_as_it_is_backed_without_a_way_to_grow_it() {
        let geometry = RingGeometry { lane_count: 1, lane_capacity: 4 * LANE_FIRST_BACKED as u32 };
        let mapping = first_backed_lanes(geometry);
        let view = mapping.view();
        let lane = view.claim(1, 7, 0, 0, false).unwrap().index;
        let writer = Box::leak(Box::new(mapping.view())).writer(lane).unwrap();
        let (mut next, mut seq) = (0, 0);
        for _ in 0..LANE_FIRST_BACKED + 10 {
            if writer.push(&record(seq, 7)) != Pushed::Dropped {
                seq += 1;
            }
            // A consumer that keeps up: only the backing stops the writer.
            take(&view, lane, &mut next);
        }
        assert_eq!(seq, LANE_FIRST_BACKED, "nothing is written past the backed slots");
        assert_eq!(view.lane(lane).unwrap().dropped.load(Ordering::Relaxed), 10);
        assert_ne!(
            view.lane(lane).unwrap().grow_failed_at.load(Ordering::Relaxed),
            0,
            "the lane asks the collector to grow it"
        );
        // The collector backs more (as its drain pass does): the writer goes on.
        view.lane(lane).unwrap().backed.fetch_max(2 * LANE_FIRST_BACKED, Ordering::Release);
        assert_eq!(writer.push(&record(seq, 7)), Pushed::Written);
        assert_eq!(take(&view, lane, &mut next), 1);
    }

    #[test]
    fn an_owner_that_can_back_memory_grows_its_lane_by_doubling_and_then_wraps() {
        let first = LANE_FIRST_BACKED as usize;
        let geometry = RingGeometry { lane_count: 2, lane_capacity: 4 * first as u32 };
        let (_mapping, view, lane, writer) = growing_lane(geometry, true);
        let (mut next, mut seq) = (0, 0);
        for _ in 0..3 * geometry.lane_capacity as usize {
            assert_ne!(writer.push(&record(seq, 7)), Pushed::Dropped);
            seq += 1;
            if seq % 1000 == 0 {
                take(view, lane, &mut next);
            }
        }
        take(view, lane, &mut next);
        assert_eq!(next, seq, "every record arrived, in order, over three laps");
        let slots = view.lane_slots(lane).unwrap().0 as usize;
        let calls = BACKED.with_borrow(|b| b.0.clone());
        assert_eq!(
            calls,
            vec![(slots + first * 64, first * 64), (slots + 2 * first * 64, 2 * first * 64)],
            "backed from 1 to 2 to 4 times the first slots, each range once"
        );
        assert_eq!(view.lane(lane).unwrap().backed.load(Ordering::Relaxed), 4 * first as u64);
        // A string that crosses the end of what is backed grows the lane too.
        let other = view.claim(1, 8, 0, 0, false).unwrap().index;
        let definition = Event { kind: crate::record::KIND_STRING_DEF, ..Event::default() };
        for _ in 0..first - 2 {
            assert!(view.push(other, &record(0, 8)));
        }
        assert!(view.push_string(other, &definition, &[b'x'; 200]));
        assert_eq!(view.lane(other).unwrap().backed.load(Ordering::Relaxed), 2 * first as u64);
        view.free(lane);
        assert_eq!(
            view.lane(lane).unwrap().backed.load(Ordering::Relaxed),
            4 * first as u64,
            "a freed lane keeps its memory"
        );
    }

    #[test]
    fn an_owner_that_cannot_back_more_drops_and_retries_only_every_thousand_drops() {
        let geometry = RingGeometry { lane_count: 1, lane_capacity: 2 * LANE_FIRST_BACKED as u32 };
        let (_mapping, view, lane, writer) = growing_lane(geometry, false);
        let mut written = 0;
        let attempts = LANE_FIRST_BACKED + 2 * GROW_RETRY_DROPS + 1;
        for _ in 0..attempts {
            if writer.push(&record(0, 7)) != Pushed::Dropped {
                written += 1;
            }
        }
        assert_eq!(written, LANE_FIRST_BACKED);
        let dropped = view.lane(lane).unwrap().dropped.load(Ordering::Relaxed);
        assert_eq!(written + dropped, attempts, "recorded + dropped = calls made");
        assert_eq!(
            BACKED.with_borrow(|b| b.0.len()),
            3,
            "the first try, then one per {GROW_RETRY_DROPS} drops"
        );
        // Memory came back: the next try grows the lane.
        BACKED.with_borrow_mut(|b| b.1 = true);
        for _ in 0..GROW_RETRY_DROPS {
            writer.push(&record(0, 7));
        }
        assert_eq!(view.lane(lane).unwrap().backed.load(Ordering::Relaxed), 2 * LANE_FIRST_BACKED);
    }

    #[test]
    fn counters_added_by_one_instruction_are_exact() {
        let counter = AtomicU64::new(5);
        assert_eq!(signal_safe_add(&counter, 3), 5);
        assert_eq!(counter.load(Ordering::Relaxed), 8);
        let slot = AggSlot { count: AtomicU64::new(0), timed: AtomicU64::new(0), ticks: AtomicU64::new(0) };
        assert_eq!(slot.count_call(), 1);
        assert_eq!(slot.count_call(), 2);
        slot.add_timing(40);
        slot.add_timing(2);
        assert_eq!((slot.timed.load(Ordering::Relaxed), slot.ticks.load(Ordering::Relaxed)), (2, 42));
    }

    #[test]
    fn concurrent_producers_lose_nothing_they_did_not_count() {
        let geometry = RingGeometry { lane_count: 8, lane_capacity: 256 };
        let mapping = HeapRing::new(geometry);
        let producers = 4u32;
        let per_producer = 200_000u64;
        let done = std::sync::atomic::AtomicU32::new(0);
        let received: Vec<u64> = std::thread::scope(|scope| {
            for tid in 0..producers {
                let view = mapping.view();
                let done = &done;
                scope.spawn(move || {
                    let lane = view.claim(1, tid, 0, 0, false).unwrap().index;
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
