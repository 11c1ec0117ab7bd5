//! Test support shared by the ring's unit tests: a heap buffer standing in for the shared
//! mapping, and a plain consumer that checks record order.

use core::sync::atomic::Ordering;

use zerocopy::FromBytes;

use super::{CLOCK_MONOTONIC, RingGeometry, RingView};
use crate::record::Event;

/// A zeroed, page-aligned heap buffer standing in for the shared mapping, initialized as a ring.
pub(crate) struct Mapping {
    base: *mut u8,
    layout: std::alloc::Layout,
    geometry: RingGeometry,
}

impl Mapping {
    pub(crate) fn new(geometry: RingGeometry) -> Mapping {
        let layout = std::alloc::Layout::from_size_align(geometry.total_bytes() as usize, 4096).unwrap();
        // Safety: non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!base.is_null());
        // Safety: zeroed, aligned, sized for the geometry.
        unsafe { RingView::initialize(base, geometry, CLOCK_MONOTONIC, 0, 0, 100_000_000) };
        let mapping = Mapping { base, layout, geometry };
        // Heap memory is backed: every lane may be offered at once.
        let view = mapping.view();
        for index in 0..geometry.lane_count {
            view.offer(index);
        }
        mapping
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    /// A view of the buffer; tests drop their views before the mapping.
    pub(crate) fn view(&self) -> RingView {
        // Safety: the buffer outlives the views made in each test.
        unsafe { RingView::new(self.base, self.geometry) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Safety: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.base, self.layout) };
    }
}

/// An event record carrying sequence number `seq` in `arg`.
pub(crate) fn record(seq: u64, tid: u32) -> Event {
    Event { kind: 20, tid, arg: seq, ..Event::default() }
}

/// Consumer side, slot by slot: takes everything published in `index`, checking that the
/// sequence numbers arrive in order without gaps; returns the number taken.
pub(crate) fn take(view: &RingView, index: u32, expect_next: &mut u64) -> u64 {
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
