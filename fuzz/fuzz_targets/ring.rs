//! A ring scribbled over by a hostile or broken producer.  A small ring is initialized in
//! memory with `RingView::initialize`, then the fuzz input overwrites its header, lane blocks
//! and slots (the first bytes pick which region gets how much).  Then:
//!
//! 1. `validate_header` must accept or refuse it without panicking (the producer's check);
//! 2. a consumer pass like the collector's (`collector/src/drain/step.rs`): lane states, the
//!    look-ahead `RingView::record_end_ahead`, then `LaneConsumer::drain_in_blocks`, the
//!    consumer step the collector itself runs (head/tail sanity, copy-out in blocks of a size
//!    the input picks, string definitions with their payload slots, tail release), then `free`;
//! 3. lane transitions and producer operations on the scribbled lanes (`offer`,
//!    `reclaim_stale_claim`, `claim`, `push`, `push_string`, `retire`, the drop counters,
//!    `aggregate_slot`) must stay inside the mapping (AddressSanitizer checks).
#![no_main]

use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;
use mlprof_format::record::{CONTROL_KIND_BASE, Event, KIND_STRING_DEF};
use mlprof_format::ring::{
    CLOCK_MONOTONIC, Drained, HEADER_BYTES, LANE_ACTIVE, LANE_RETIRED, LaneConsumer, LaneItem, RingGeometry,
    RingView, validate_header,
};

const GEOMETRY: RingGeometry = RingGeometry { lane_count: 4, lane_capacity: 64 };

/// 128-aligned zeroed memory standing in for the shared mapping.
struct Mapping {
    base: *mut u8,
    layout: std::alloc::Layout,
}

impl Mapping {
    fn new(len: usize) -> Mapping {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // Safety: non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!base.is_null());
        Mapping { base, layout }
    }

    fn bytes(&mut self) -> &mut [u8] {
        // Safety: the allocation is `layout.size()` bytes, owned by us.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.layout.size()) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Safety: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.base, self.layout) };
    }
}

/// Writes `src` at `region.start + offset` (wrapping within the region).
/// The slots of the current input's mapping (start, end): what a lane's owner may ask to back.
static SLOTS: (AtomicUsize, AtomicUsize) = (AtomicUsize::new(0), AtomicUsize::new(0));

/// The backing a producer brings, for heap memory (backed already): it only checks that growing
/// a lane, whatever the scribbles left in `backed`, asks for slots of the ring.
fn back_heap_slots(start: *mut u8, len: usize) -> bool {
    let (lo, hi) = (SLOTS.0.load(Ordering::Relaxed), SLOTS.1.load(Ordering::Relaxed));
    assert!(start as usize >= lo && start as usize + len <= hi, "backing outside the slots");
    true
}

fn scribble(dst: &mut [u8], region: std::ops::Range<usize>, offset: usize, src: &[u8]) {
    let len = region.len();
    if len == 0 {
        return;
    }
    for (i, b) in src.iter().enumerate() {
        dst[region.start + (offset + i) % len] = *b;
    }
}

/// One consumer step on lane `index`, through the collector's own
/// `LaneConsumer::drain_in_blocks` (`block` records at a time, clamped by it), with a handler
/// that touches every item; returns the number of records taken. Must never panic, hang or
/// read outside the lane, whatever the lane holds.
fn drain_lane(consumer: &mut LaneConsumer, view: &RingView, index: u32, block: usize) -> u64 {
    let capacity = view.geometry().lane_capacity as u64;
    let before = view.lane(index).map(|lane| lane.tail.load(Ordering::Relaxed));
    // The collector's look-ahead reads the same untrusted slots before the step (any answer,
    // no panic, nothing released).
    let _ = view.record_end_ahead(index, block.max(1));
    assert_eq!(
        view.lane(index).map(|lane| lane.tail.load(Ordering::Relaxed)),
        before,
        "look-ahead releases nothing"
    );
    let mut string_bytes = 0usize;
    let drained = consumer.drain_in_blocks(view, index, block, |item| {
        match item {
            LaneItem::String { bytes, .. } => string_bytes += bytes.len(),
            LaneItem::Record(event) => {
                let _ = event.kind >= CONTROL_KIND_BASE;
                let _ = event.start.saturating_add(event.dur);
            }
        }
        Ok::<(), std::convert::Infallible>(())
    });
    let Ok(drained) = drained;
    assert!(string_bytes <= (capacity as usize) * 64, "string bytes beyond the lane");
    let taken = drained.taken() as u64;
    assert!(taken <= capacity, "took more records than a lane holds");
    if let (Some(lane), Some(before), Drained::Taken(_)) = (view.lane(index), before, drained) {
        // Single-threaded here: the tail moved by exactly what was taken.
        assert_eq!(lane.tail.load(Ordering::Relaxed), before.wrapping_add(taken), "tail released exactly");
    }
    taken
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let total = GEOMETRY.total_bytes() as usize;
    let mut mapping = Mapping::new(total);
    // Safety: zeroed, aligned, sized for the geometry, not shared.
    unsafe { RingView::initialize(mapping.base, GEOMETRY, CLOCK_MONOTONIC, 0, 0, 1000) };

    // data[0..4]: how many bytes go to header / lanes / slots, and an offset into the slots.
    let (ctl, rest) = data.split_at(4);
    let header_n = (ctl[0] as usize).min(rest.len());
    let (header_part, rest) = rest.split_at(header_n);
    let lanes_n = (ctl[1] as usize * 16).min(rest.len());
    let (lanes_part, slots_part) = rest.split_at(lanes_n);
    let lanes = HEADER_BYTES..GEOMETRY.slots_offset() as usize;
    let slots = GEOMETRY.slots_offset() as usize..total;
    // Header scribbles keep the magic most of the time, to get past the first check.
    let header_region = if ctl[3] & 1 == 0 { 8..HEADER_BYTES } else { 0..HEADER_BYTES };
    let bytes = mapping.bytes();
    scribble(bytes, header_region, 0, header_part);
    scribble(bytes, lanes, ctl[2] as usize * 8, lanes_part);
    scribble(bytes, slots, ctl[3] as usize * 64, slots_part);

    let slots_at = mapping.base as usize + GEOMETRY.slots_offset() as usize;
    SLOTS.0.store(slots_at, Ordering::Relaxed);
    SLOTS.1.store(mapping.base as usize + total, Ordering::Relaxed);
    // Safety: the mapping outlives the views; sized for GEOMETRY.
    let view = unsafe { RingView::new(mapping.base, GEOMETRY) }.with_backing(back_heap_slots);
    let mut consumer = LaneConsumer::new();
    // Block sizes 0..=599: below, at and past the consumer's 512 (it clamps).
    let block = (usize::from(ctl[0]) * 7 + usize::from(ctl[1])) % 600;
    // 1. The producer's header check: any answer, no panic; a geometry it accepts fits.
    if let Ok(geometry) = validate_header(view.header(), total as u64) {
        assert!(geometry.total_bytes() <= total as u64);
        // A view built from the validated geometry must also be safe to drain.
        // Safety: validate_header checked that the geometry fits the mapping.
        let accepted = unsafe { RingView::new(mapping.base, geometry) };
        for index in 0..geometry.lane_count {
            drain_lane(&mut consumer, &accepted, index, block);
        }
    }

    // 2. The collector's pass, with its own geometry (it never re-reads the header's).
    for index in 0..GEOMETRY.lane_count + 1 {
        let Some(lane) = view.lane(index) else { continue };
        let state = lane.state.load(Ordering::Acquire);
        if state != LANE_ACTIVE && state != LANE_RETIRED {
            continue;
        }
        drain_lane(&mut consumer, &view, index, block);
        let _ = lane.dropped.load(Ordering::Relaxed);
        for slot in &lane.aggregates {
            let _ = slot.count.load(Ordering::Relaxed);
        }
        if state == LANE_RETIRED {
            view.free(index);
        }
    }

    // 3. Producer operations on whatever the lanes now hold.
    let tid = u32::from_le_bytes([ctl[0], ctl[1], ctl[2], ctl[3]]);
    for index in 0..GEOMETRY.lane_count {
        // Heap memory is backed; the scribble may have left lanes in any state, which `offer`
        // must refuse or accept without harm.
        view.offer(index);
        let seen = view.lane(index).map_or(0, |lane| lane.state.load(Ordering::Relaxed));
        view.reclaim_stale_claim(index, seen);
    }
    // The view's backer (heap memory, already backed) says yes to ranges inside the slots:
    // OPEN lanes are claimable too, and a claim's first part is checked like a growth.
    if let Some(claim) = view.claim(1, tid, 0, u64::from(tid), true) {
        let index = claim.index;
        let event = Event { kind: 20, tid, ..Event::default() };
        for _ in 0..70 {
            view.push(index, &event);
        }
        let definition = Event { kind: KIND_STRING_DEF, arg2: slots_part.len() as u64, ..Event::default() };
        view.push_string(index, &definition, slots_part);
        let _ = view.aggregate_slot(index, ctl[0] as usize).map(|a| a.count_call());
        view.count_drop(index);
        view.count_interrupted(index, 2);
        view.count_no_lane_drop(tid);
        view.retire(claim);
        drain_lane(&mut consumer, &view, index, block);
    }
    for index in 0..GEOMETRY.lane_count {
        let event = Event::default();
        // Lanes the scribble left in any state: writing into them must stay in bounds.
        view.push(index, &event);
        view.push_string(index, &event, header_part);
        drain_lane(&mut consumer, &view, index, block);
    }
});
