//! The shared-memory ring ABI between `libmlprof.so` (many producer processes and threads) and
//! `mlprof-collect` (one consumer).
//!
//! Layout of the POSIX shared-memory segment (all offsets from its start):
//!
//! ```text
//! [RingHeader, 4096 bytes][Lane; lane_count][slots: lane_count × lane_capacity × 64 bytes]
//! ```
//!
//! Each producer thread claims one lane (CAS `FREE → CLAIMING`, then fills `pid`/`tid` and
//! stores `ACTIVE`), so every lane has a single writer and the hot path needs no lock and no
//! read-modify-write: the producer writes `slot[head % capacity]` and then publishes with a
//! release store of `head + 1`. A full lane (`head - tail == capacity`) drops the record and
//! bumps `dropped`; the producer never waits. A producer killed mid-write never published its
//! record, so the consumer never sees a torn one. The consumer copies `tail..head` out and
//! release-stores `tail`. When a thread exits it marks its lane `RETIRED`; the consumer drains
//! it, records its final counters, zeroes it and stores `FREE`. Lanes of threads that died
//! without retiring (SIGKILL, `_exit`) are found by a liveness check and treated the same way.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::func::AGG_SLOTS;
use crate::record::{Event, MAX_STRING_BYTES, RECORD_BYTES, string_payload_slots};

pub const RING_MAGIC: [u8; 8] = *b"MLPRING\0";
/// Bumped on any change of the layout below; producers refuse a ring of another version.
pub const RING_ABI_VERSION: u32 = 2;

pub const HEADER_BYTES: usize = 4096;

/// Timestamp source of the ring records, chosen by the collector.
pub const CLOCK_TSC: u32 = 1;
pub const CLOCK_MONOTONIC: u32 = 2;

/// The ring accepts records.
pub const RING_SERVING: u32 = 1;
/// The collector finalized the run; producers stop writing.
pub const RING_CLOSED: u32 = 2;

/// Segment header, written once by the collector before the segment becomes visible
/// (it is created under a temporary name and renamed into place).
#[repr(C)]
pub struct RingHeader {
    pub magic: [u8; 8],
    pub abi_version: u32,
    pub header_bytes: u32,
    pub lane_count: u32,
    /// Records per lane, a power of two.
    pub lane_capacity: u32,
    pub record_bytes: u32,
    pub lane_bytes: u32,
    pub clock_source: u32,
    pub owner_uid: u32,
    pub collector_pid: u32,
    pub _reserved0: u32,
    pub lanes_offset: u64,
    pub slots_offset: u64,
    pub total_bytes: u64,
    /// Records dropped because every lane was taken.
    pub no_lane_drops: AtomicU64,
    pub state: AtomicU32,
    pub _reserved1: u32,
}
const _: () = assert!(core::mem::size_of::<RingHeader>() <= HEADER_BYTES);

/// Lane states.
pub const LANE_FREE: u32 = 0;
pub const LANE_CLAIMING: u32 = 1;
pub const LANE_ACTIVE: u32 = 2;
pub const LANE_RETIRED: u32 = 3;

/// Exact per-thread counters for calls kept as aggregates (clock reads), updated by the lane's
/// producer with plain relaxed stores and read by the collector at any time.
#[repr(C)]
pub struct AggSlot {
    pub count: AtomicU64,
    /// Calls whose duration was measured (see `MLPROF_CLOCK_TIMING`).
    pub timed: AtomicU64,
    /// Sum of the measured durations, in ring clock ticks.
    pub ticks: AtomicU64,
}

impl AggSlot {
    /// Counts one call (single writer: the lane's owner); returns the new count.
    #[inline(always)]
    pub fn count_call(&self) -> u64 {
        let count = self.count.load(Ordering::Relaxed).wrapping_add(1);
        self.count.store(count, Ordering::Relaxed);
        count
    }

    /// Adds the measured duration of one of the counted calls.
    #[inline(always)]
    pub fn add_timing(&self, ticks: u64) {
        bump(&self.timed);
        self.ticks.store(self.ticks.load(Ordering::Relaxed).wrapping_add(ticks), Ordering::Relaxed);
    }
}

/// One producer lane's control block; cache-line separated by writer.
#[repr(C, align(128))]
pub struct Lane {
    // Line 0: ownership, written at claim time.
    pub state: AtomicU32,
    pub pid: AtomicU32,
    pub tid: AtomicU32,
    /// Incremented on every claim, so the consumer tells successive owners apart.
    pub generation: AtomicU32,
    /// The effective uid of the claiming process (checked against /proc while it lives).
    pub uid: AtomicU32,
    pub _pad0: [u8; 108],
    // Line 1: producer-owned.
    pub head: AtomicU64,
    /// The producer's last view of `tail` (saves a shared-line read per record).
    pub cached_tail: AtomicU64,
    pub dropped: AtomicU64,
    pub _pad1: [u8; 104],
    // Line 2: consumer-owned.
    pub tail: AtomicU64,
    pub _pad2: [u8; 120],
    // Lines 3..6: aggregates.
    pub aggregates: [AggSlot; AGG_SLOTS],
}
pub const LANE_BYTES: usize = 768;
const _: () = assert!(core::mem::size_of::<Lane>() == LANE_BYTES);
const _: () = assert!(core::mem::offset_of!(Lane, head) == 128);
const _: () = assert!(core::mem::offset_of!(Lane, tail) == 256);
const _: () = assert!(core::mem::offset_of!(Lane, aggregates) == 384);

/// Sizes of a ring; the collector picks them, producers read them from the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    pub lane_count: u32,
    pub lane_capacity: u32,
}

impl RingGeometry {
    /// 256 lanes (threads at once) × 65536 records (4 MiB) each: at 2.5 M records/s a lane
    /// holds 26 ms, enough for a collector that a busy 2-core machine schedules late. Pages are
    /// only backed once a lane is written, so the 1 GiB segment costs at most 4 MiB per thread
    /// that records (less for threads that record little).
    pub const DEFAULT: RingGeometry = RingGeometry { lane_count: 256, lane_capacity: 65536 };

    pub fn is_valid(&self) -> bool {
        (1..=65536).contains(&self.lane_count)
            && self.lane_capacity.is_power_of_two()
            && (64..=(1 << 24)).contains(&self.lane_capacity)
    }

    pub fn lanes_offset(&self) -> u64 {
        HEADER_BYTES as u64
    }

    pub fn slots_offset(&self) -> u64 {
        self.lanes_offset() + self.lane_count as u64 * LANE_BYTES as u64
    }

    pub fn lane_slots_bytes(&self) -> u64 {
        self.lane_capacity as u64 * RECORD_BYTES as u64
    }

    pub fn total_bytes(&self) -> u64 {
        self.slots_offset() + self.lane_count as u64 * self.lane_slots_bytes()
    }
}

/// Checks a mapped header against what this build understands; `Err` says why not.
pub fn validate_header(header: &RingHeader, mapped_bytes: u64) -> Result<RingGeometry, &'static str> {
    if header.magic != RING_MAGIC {
        return Err("not an mlprof ring (bad magic)");
    }
    if header.abi_version != RING_ABI_VERSION {
        return Err("ring ABI version differs from this libmlprof.so");
    }
    let geometry = RingGeometry { lane_count: header.lane_count, lane_capacity: header.lane_capacity };
    if !geometry.is_valid()
        || header.record_bytes as usize != RECORD_BYTES
        || header.lane_bytes as usize != LANE_BYTES
        || header.header_bytes as usize != HEADER_BYTES
        || header.lanes_offset != geometry.lanes_offset()
        || header.slots_offset != geometry.slots_offset()
        || header.total_bytes != geometry.total_bytes()
        || geometry.total_bytes() > mapped_bytes
    {
        return Err("ring geometry is inconsistent");
    }
    Ok(geometry)
}

/// The shared-memory name of a per-user session, e.g. `/mlprof-1000-default`.
pub fn session_shm_name(uid: u32, session: &str) -> String {
    format!("/mlprof-{uid}-{session}")
}

/// Whether a session name is usable in a shared-memory name.
pub fn is_valid_session_name(session: &str) -> bool {
    !session.is_empty()
        && session.len() <= 64
        && session.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// A mapped ring, as producers and the consumer see it. All shared state is atomics; the slots
/// of a lane are written only by the lane's owner and read by the consumer only below `head`.
pub struct RingView {
    header: *const RingHeader,
    lanes: *const Lane,
    slots: *mut u8,
    geometry: RingGeometry,
}

// Safety: the pointers refer to a shared mapping that outlives the view (the creator of the view
// guarantees it); shared fields are atomics and slots follow the single-writer protocol above.
unsafe impl Send for RingView {}
// Safety: as for Send.
unsafe impl Sync for RingView {}

impl RingView {
    /// # Safety
    /// `base` must point to a mapping of at least `geometry.total_bytes()` bytes, aligned to 128,
    /// holding a ring with this geometry, that stays mapped for the life of the view.
    pub unsafe fn new(base: *mut u8, geometry: RingGeometry) -> RingView {
        RingView {
            header: base as *const RingHeader,
            // Safety: offsets come from the geometry, within the mapping.
            lanes: unsafe { base.add(geometry.lanes_offset() as usize) } as *const Lane,
            // Safety: as above.
            slots: unsafe { base.add(geometry.slots_offset() as usize) },
            geometry,
        }
    }

    /// Writes a fresh header into a zeroed mapping (the collector's side). The magic goes last,
    /// so a producer that maps the segment early sees "not a ring" rather than half a header.
    ///
    /// # Safety
    /// As for [`RingView::new`], and nobody else may be using the mapping yet.
    pub unsafe fn initialize(
        base: *mut u8,
        geometry: RingGeometry,
        clock_source: u32,
        owner_uid: u32,
        collector_pid: u32,
    ) {
        let header = base as *mut RingHeader;
        // Safety: guaranteed by the caller.
        unsafe {
            (*header).abi_version = RING_ABI_VERSION;
            (*header).header_bytes = HEADER_BYTES as u32;
            (*header).lane_count = geometry.lane_count;
            (*header).lane_capacity = geometry.lane_capacity;
            (*header).record_bytes = RECORD_BYTES as u32;
            (*header).lane_bytes = LANE_BYTES as u32;
            (*header).clock_source = clock_source;
            (*header).owner_uid = owner_uid;
            (*header).collector_pid = collector_pid;
            (*header).lanes_offset = geometry.lanes_offset();
            (*header).slots_offset = geometry.slots_offset();
            (*header).total_bytes = geometry.total_bytes();
            (*header).state.store(RING_SERVING, Ordering::Relaxed);
            core::sync::atomic::fence(Ordering::Release);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*header).magic), RING_MAGIC);
        }
    }

    pub fn header(&self) -> &RingHeader {
        // Safety: see `new`.
        unsafe { &*self.header }
    }

    pub fn geometry(&self) -> RingGeometry {
        self.geometry
    }

    /// Lane `index`; `None` when out of range.
    #[inline(always)]
    pub fn lane(&self, index: u32) -> Option<&Lane> {
        // Safety: in range, within the mapping.
        (index < self.geometry.lane_count).then(|| unsafe { &*self.lanes.add(index as usize) })
    }

    #[inline(always)]
    fn slot(&self, index: u32, position: u64) -> *mut u8 {
        let capacity = self.geometry.lane_capacity as u64;
        let within = (position & (capacity - 1)) as usize * RECORD_BYTES;
        // Safety: callers pass `index < lane_count`; the slot lies in that lane's array.
        unsafe { self.slots.add(index as usize * self.geometry.lane_slots_bytes() as usize + within) }
    }

    // ---- producer side ----------------------------------------------------------------------

    /// Claims a free lane for thread `tid` of process `pid`, starting the search at a hash of the
    /// tid. `None` when every lane is taken (the record is then counted in `no_lane_drops`).
    pub fn claim(&self, pid: u32, tid: u32, uid: u32) -> Option<u32> {
        let count = self.geometry.lane_count;
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
        let capacity = self.geometry.lane_capacity as u64;
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

    // ---- consumer side ----------------------------------------------------------------------

    /// The address and length of lane `index`'s slot array (for the collector to pre-fault it).
    pub fn lane_slots(&self, index: u32) -> Option<(*mut u8, usize)> {
        (index < self.geometry.lane_count)
            .then(|| (self.slot(index, 0), self.geometry.lane_slots_bytes() as usize))
    }

    /// Copies the record at `position` of lane `index` (volatile: another process may be
    /// writing the neighbouring slots).
    pub fn read_slot(&self, index: u32, position: u64) -> [u8; RECORD_BYTES] {
        let mut out = [0u8; RECORD_BYTES];
        if index >= self.geometry.lane_count {
            return out;
        }
        let src = self.slot(index, position);
        for (i, byte) in out.iter_mut().enumerate() {
            // Safety: within the slot (see `slot`).
            *byte = unsafe { core::ptr::read_volatile(src.add(i)) };
        }
        out
    }

    /// Appends the records at positions `from..to` of lane `index` to `out` (at most one lane's
    /// capacity; two bulk copies when the range wraps). The caller has read `to` from `head`
    /// with acquire ordering, so these slots are published.
    pub fn copy_out(&self, index: u32, from: u64, to: u64, out: &mut Vec<Event>) {
        let capacity = self.geometry.lane_capacity as u64;
        if index >= self.geometry.lane_count || to <= from {
            return;
        }
        let to = to.min(from.saturating_add(capacity));
        let mut position = from;
        while position < to {
            let within = position & (capacity - 1);
            let run = (capacity - within).min(to - position) as usize;
            out.reserve(run);
            let len = out.len();
            // Safety: `run` slots starting at `within` lie inside lane `index`'s array, and `out`
            // has room for them; Event is plain data (any bit pattern is valid).
            unsafe {
                core::ptr::copy_nonoverlapping(
                    self.slot(index, position) as *const Event,
                    out.as_mut_ptr().add(len),
                    run,
                );
                out.set_len(len + run);
            }
            position += run as u64;
        }
    }

    /// Zeroes a lane whose owner is gone and makes it claimable again.
    pub fn free(&self, index: u32) {
        let Some(lane) = self.lane(index) else { return };
        lane.head.store(0, Ordering::Relaxed);
        lane.cached_tail.store(0, Ordering::Relaxed);
        lane.tail.store(0, Ordering::Relaxed);
        lane.dropped.store(0, Ordering::Relaxed);
        for slot in &lane.aggregates {
            slot.count.store(0, Ordering::Relaxed);
            slot.timed.store(0, Ordering::Relaxed);
            slot.ticks.store(0, Ordering::Relaxed);
        }
        lane.pid.store(0, Ordering::Relaxed);
        lane.tid.store(0, Ordering::Relaxed);
        lane.uid.store(0, Ordering::Relaxed);
        lane.state.store(LANE_FREE, Ordering::Release);
    }
}

/// One item of a lane's records as the consumer reads them: an event or control record, or a
/// string definition with its payload (which spans the following slots).
#[derive(Debug, PartialEq, Eq)]
pub enum LaneItem<'a> {
    Record(Event),
    String { id: u64, bytes: &'a [u8] },
}

/// Splits records copied out of a lane ([`RingView::copy_out`]) into items. A string whose
/// payload is not all there (a garbage length) ends the iteration: [`LaneItems::consumed`]
/// then says how many records to advance the tail by. Never reads outside `records`.
pub struct LaneItems<'a> {
    records: &'a [Event],
    at: usize,
}

impl<'a> LaneItems<'a> {
    pub fn new(records: &'a [Event]) -> LaneItems<'a> {
        LaneItems { records, at: 0 }
    }

    /// Records consumed so far (all of them once the iteration ended).
    pub fn consumed(&self) -> usize {
        self.at
    }
}

impl<'a> Iterator for LaneItems<'a> {
    type Item = LaneItem<'a>;

    fn next(&mut self) -> Option<LaneItem<'a>> {
        let event = *self.records.get(self.at)?;
        self.at += 1;
        if event.kind != crate::record::KIND_STRING_DEF {
            return Some(LaneItem::Record(event));
        }
        let len = (event.arg2 as usize).min(MAX_STRING_BYTES);
        let slots = string_payload_slots(len);
        let Some(payload) = self.records.get(self.at..self.at + slots) else {
            self.at = self.records.len();
            return None;
        };
        self.at += slots;
        let bytes = zerocopy::IntoBytes::as_bytes(payload);
        Some(LaneItem::String { id: event.arg, bytes: &bytes[..len] })
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

    #[test]
    fn default_geometry_is_valid_and_sized() {
        let g = RingGeometry::DEFAULT;
        assert!(g.is_valid());
        assert_eq!(g.total_bytes(), 4096 + 256 * 768 + 256 * 65536 * 64);
        assert!(!RingGeometry { lane_count: 4, lane_capacity: 100 }.is_valid());
    }

    /// A zeroed, page-aligned heap buffer standing in for the shared mapping.
    struct Mapping {
        base: *mut u8,
        layout: std::alloc::Layout,
    }

    impl Mapping {
        fn new(geometry: RingGeometry) -> Mapping {
            let layout = std::alloc::Layout::from_size_align(geometry.total_bytes() as usize, 4096).unwrap();
            // Safety: non-zero size.
            let base = unsafe { std::alloc::alloc_zeroed(layout) };
            assert!(!base.is_null());
            // Safety: zeroed, aligned, sized for the geometry.
            unsafe { RingView::initialize(base, geometry, CLOCK_MONOTONIC, 0, 0) };
            Mapping { base, layout }
        }

        fn view(&self, geometry: RingGeometry) -> RingView {
            // Safety: the buffer outlives the views made in each test.
            unsafe { RingView::new(self.base, geometry) }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // Safety: allocated in `new` with this layout.
            unsafe { std::alloc::dealloc(self.base, self.layout) };
        }
    }

    fn record(seq: u64, tid: u32) -> Event {
        Event { kind: 20, tid, arg: seq, ..Event::default() }
    }

    /// Consumer side: takes everything published in `index`, checking order.
    fn take(view: &RingView, index: u32, expect_next: &mut u64) -> u64 {
        let lane = view.lane(index).unwrap();
        let head = lane.head.load(Ordering::Acquire);
        let tail = lane.tail.load(Ordering::Relaxed);
        assert!(head - tail <= view.geometry().lane_capacity as u64);
        for position in tail..head {
            let event = Event::read_from_bytes(&view.read_slot(index, position)).unwrap();
            assert_eq!(event.arg, *expect_next, "records arrive in order without gaps");
            *expect_next += 1;
        }
        lane.tail.store(head, Ordering::Release);
        head - tail
    }

    use zerocopy::FromBytes;

    #[test]
    fn header_validates_and_garbage_does_not() {
        let geometry = RingGeometry { lane_count: 4, lane_capacity: 64 };
        let mapping = Mapping::new(geometry);
        let view = mapping.view(geometry);
        assert_eq!(validate_header(view.header(), geometry.total_bytes()), Ok(geometry));
        assert!(validate_header(view.header(), geometry.total_bytes() - 1).is_err());
        // Safety: writing into our own buffer.
        unsafe { *mapping.base.add(20) = 0xff };
        assert!(validate_header(view.header(), geometry.total_bytes()).is_err());
    }

    #[test]
    fn wrap_around_keeps_order_and_full_lane_drops_exactly() {
        let geometry = RingGeometry { lane_count: 2, lane_capacity: 64 };
        let mapping = Mapping::new(geometry);
        let view = mapping.view(geometry);
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
        let view = mapping.view(geometry);
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
                let view = mapping.view(geometry);
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
            let view = mapping.view(geometry);
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
        let view = mapping.view(geometry);
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

    #[test]
    fn lane_items_split_strings_and_stop_at_a_truncated_one() {
        let mut records = vec![Event { kind: 20, arg: 1, ..Event::default() }];
        records.push(Event { kind: crate::record::KIND_STRING_DEF, arg: 9, arg2: 70, ..Event::default() });
        let mut payload = [Event::default(); 2];
        zerocopy::IntoBytes::as_mut_bytes(&mut payload[..]).fill(b'a');
        records.extend_from_slice(&payload);
        records.push(Event { kind: 21, ..Event::default() });
        records.push(Event { kind: crate::record::KIND_STRING_DEF, arg: 5, arg2: 4000, ..Event::default() });
        let mut items = LaneItems::new(&records);
        assert!(matches!(items.next(), Some(LaneItem::Record(e)) if e.arg == 1));
        assert!(matches!(items.next(), Some(LaneItem::String { id: 9, bytes }) if bytes.len() == 70));
        assert!(matches!(items.next(), Some(LaneItem::Record(e)) if e.kind == 21));
        assert_eq!(items.next(), None);
        assert_eq!(items.consumed(), records.len());
    }

    #[test]
    fn session_names() {
        assert!(is_valid_session_name("default"));
        assert!(is_valid_session_name("run-1.a_b"));
        assert!(!is_valid_session_name("../x"));
        assert!(!is_valid_session_name(""));
        assert_eq!(session_shm_name(7, "s"), "/mlprof-7-s");
    }
}
