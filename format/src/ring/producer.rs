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
    count_drop: bool,
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
        if count_drop {
            signal_safe_add(&lane.dropped, 1);
        }
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
    fn reserve(&self, index: u32, lane: &Lane, count: u64, count_drop: bool) -> Option<u64> {
        let head = lane.head.load(Ordering::Relaxed);
        if head.wrapping_add(count) > lane.limit.load(Ordering::Relaxed) {
            let capacity = self.geometry().lane_capacity as u64;
            if !make_room(lane, self.slot_of(index, 0), capacity, head, count, self.back, count_drop) {
                return None;
            }
        }
        Some(head)
    }

    /// Writes one record into lane `index` (which the caller owns); a full lane drops it and
    /// counts the drop. Never blocks.
    #[inline(always)]
    pub fn push(&self, index: u32, event: &Event) -> bool {
        self.push_counting(index, event, true)
    }

    /// Like [`RingView::push`], but a full lane drops the record without counting it in the
    /// lane's drops: for records that are not calls (GPU activities), whose writer counts its
    /// losses by their own reason, so that the lane's drops stay calls lost.
    pub fn push_uncounted(&self, index: u32, event: &Event) -> bool {
        self.push_counting(index, event, false)
    }

    #[inline(always)]
    fn push_counting(&self, index: u32, event: &Event, count_drop: bool) -> bool {
        let Some(lane) = self.lane(index) else { return false };
        let Some(head) = self.reserve(index, lane, 1, count_drop) else { return false };
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
        let Some(head) = self.reserve(index, lane, 1 + payload, true) else { return false };
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
            && !make_room(lane, self.slots, capacity, head, 1, self.back, true)
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
mod tests;
