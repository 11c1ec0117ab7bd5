//! [`RingView`]: a mapped ring, with the address arithmetic both sides share. The producer's
//! operations are in `producer.rs`, the consumer's in `consumer.rs`.

use core::sync::atomic::Ordering;

use super::layout::{HEADER_BYTES, LANE_BYTES, Lane, RING_ABI_VERSION, RING_MAGIC, RingGeometry, RingHeader};
use crate::record::RECORD_BYTES;

/// A mapped ring, as producers and the consumer see it. All shared state is atomics; the slots
/// of a lane are written only by the lane's owner and read by the consumer only below `head`.
pub struct RingView {
    header: *const RingHeader,
    lanes: *const Lane,
    slots: *mut u8,
    geometry: RingGeometry,
    /// How this process backs more of a lane it owns (see [`RingView::with_backing`]).
    pub(super) back: Option<super::BackFn>,
}

// Safety: the pointers refer to a shared mapping that outlives the view (the creator of the view
// guarantees it); shared fields are atomics and slots follow the single-writer protocol above.
unsafe impl Send for RingView {}
// Safety: as for Send.
unsafe impl Sync for RingView {}

impl RingView {
    /// A view of the ring at `base`, trusting `geometry` (producers pass what
    /// [`validate_header`](super::validate_header) returned, the collector what it created).
    ///
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
            back: None,
        }
    }

    /// The view of a producer that can back memory of the ring itself (`MADV_POPULATE_WRITE`
    /// in `libmlprof.so`): it claims `OPEN` lanes and grows the lanes it owns. Without it, a
    /// producer writes only what the collector backed.
    pub fn with_backing(mut self, back: super::BackFn) -> RingView {
        self.back = Some(back);
        self
    }

    /// Writes a fresh header into a zeroed mapping (the collector's side). The magic goes last,
    /// with a release store that pairs with the producers' acquire load in
    /// [`RingHeader::is_ready`], so a producer that maps the segment early sees "not a ring"
    /// rather than half a header. `clock_source` is [`CLOCK_TSC`](super::CLOCK_TSC) or
    /// [`CLOCK_MONOTONIC`](super::CLOCK_MONOTONIC); `check_period` is about 100 ms in that
    /// clock's units. Every lane starts [`LANE_UNBACKED`](super::LANE_UNBACKED): the collector
    /// offers a lane ([`RingView::offer`]) once its slots are backed.
    ///
    /// # Safety
    /// As for [`RingView::new`], and nobody else may be using the mapping yet.
    pub unsafe fn initialize(
        base: *mut u8,
        geometry: RingGeometry,
        clock_source: u32,
        owner_uid: u32,
        collector_pid: u32,
        check_period: u64,
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
            (*header).check_period = check_period;
            (*header).state.store(super::RING_SERVING, Ordering::Relaxed);
            (*header).magic.store(u64::from_le_bytes(RING_MAGIC), Ordering::Release);
        }
    }

    /// The segment header.
    pub fn header(&self) -> &RingHeader {
        // Safety: see `new`.
        unsafe { &*self.header }
    }

    /// The geometry the view was made with (never re-read from the shared header).
    #[inline(always)]
    pub fn geometry(&self) -> RingGeometry {
        self.geometry
    }

    /// Lane `index`; `None` when out of range.
    #[inline(always)]
    pub fn lane(&self, index: u32) -> Option<&Lane> {
        // Safety: in range, within the mapping.
        (index < self.geometry.lane_count).then(|| unsafe { &*self.lanes.add(index as usize) })
    }

    /// The address of slot `slot` of lane `index`, `slot <= capacity` (the capacity: the end of
    /// the lane's array). Callers pass `index < lane_count`.
    #[inline(always)]
    pub(super) fn slot_of(&self, index: u32, slot: u64) -> *mut u8 {
        // Safety: callers pass `index < lane_count` and `slot <= capacity`: within the lane's
        // array or one past its end.
        unsafe {
            self.slots.add(
                index as usize * self.geometry.lane_slots_bytes() as usize + slot as usize * RECORD_BYTES,
            )
        }
    }

    /// The slot that position `position` of lane `index` maps to (positions wrap by the
    /// capacity). Callers pass `index < lane_count`.
    #[inline(always)]
    pub(super) fn slot(&self, index: u32, position: u64) -> *mut u8 {
        self.slot_of(index, position & (self.geometry.lane_capacity as u64 - 1))
    }
}
