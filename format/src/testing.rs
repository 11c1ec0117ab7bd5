//! Test support for the crates that build on the ring (feature `testing`, and this crate's own
//! unit tests): one heap ring standing in for the collector's shared segment, the records and
//! string definitions tests write, a lane's positions, and a plain consumer that checks record
//! order. format's ring tests, preload-core's recorder tests and the collector's drain tests all
//! use [`HeapRing`], so a change of the ABI's set-up is made once.

use core::sync::atomic::Ordering;

use zerocopy::FromBytes;

use crate::record::{Event, KIND_STRING_DEF};
use crate::ring::{CLOCK_MONOTONIC, RingGeometry, RingView};

/// A zeroed, page-aligned heap buffer standing in for the shared mapping, initialized as a
/// ring, every lane offered (heap memory is backed: no lane waits for the collector to back
/// it). Freed when dropped, unless leaked with [`HeapRing::leak`].
pub struct HeapRing {
    base: *mut u8,
    layout: std::alloc::Layout,
    geometry: RingGeometry,
}

/// Who a [`HeapRing`] says serves it: the header's owner, collector and check period.
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    /// `owner_uid` of the header.
    pub uid: u32,
    /// `collector_pid` of the header.
    pub collector_pid: u32,
    /// `check_period` of the header, in the ring clock's units (CLOCK_MONOTONIC ns).
    pub check_period: u64,
}

impl Default for Owner {
    /// uid 0, collector pid 0, a check every 100 ms.
    fn default() -> Self {
        Owner { uid: 0, collector_pid: 0, check_period: 100_000_000 }
    }
}

impl HeapRing {
    /// A ring of `geometry` whose header names [`Owner::default`].
    pub fn new(geometry: RingGeometry) -> HeapRing {
        HeapRing::with_owner(geometry, Owner::default())
    }

    /// A ring of `geometry` whose header names `owner`.
    pub fn with_owner(geometry: RingGeometry, owner: Owner) -> HeapRing {
        let layout = std::alloc::Layout::from_size_align(geometry.total_bytes() as usize, 4096).unwrap();
        // Safety: non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!base.is_null(), "cannot allocate a test ring of {} bytes", layout.size());
        // Safety: zeroed, aligned, sized for the geometry, not yet shared.
        unsafe {
            RingView::initialize(
                base,
                geometry,
                CLOCK_MONOTONIC,
                owner.uid,
                owner.collector_pid,
                owner.check_period,
            )
        };
        let ring = HeapRing { base, layout, geometry };
        let view = ring.view();
        for index in 0..geometry.lane_count {
            view.offer(index);
        }
        ring
    }

    /// The first byte of the ring (its header).
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// The ring's geometry.
    pub fn geometry(&self) -> RingGeometry {
        self.geometry
    }

    /// A view of the ring; tests drop their views before the ring.
    pub fn view(&self) -> RingView {
        // Safety: the buffer lives as long as `self`, and the views made in a test are
        // dropped before it (the tests' contract, stated above).
        unsafe { RingView::new(self.base, self.geometry) }
    }

    /// The ring kept for the rest of the process, and a view of it: for code that holds its
    /// ring as `'static` (the recorder's session).
    pub fn leak(self) -> &'static RingView {
        let view = Box::leak(Box::new(self.view()));
        std::mem::forget(self);
        view
    }
}

impl Drop for HeapRing {
    fn drop(&mut self) {
        // Safety: allocated in `with_owner` with this layout, and not leaked.
        unsafe { std::alloc::dealloc(self.base, self.layout) };
    }
}

/// An event record carrying sequence number `seq` in `arg`.
pub fn record(seq: u64, tid: u32) -> Event {
    Event { kind: 20, tid, arg: seq, ..Event::default() }
}

/// The definition record of string `id`, `len` bytes long (the payload follows it in the lane:
/// [`RingView::push_string`]).
pub fn string_def(id: u64, len: usize) -> Event {
    Event { kind: KIND_STRING_DEF, arg: id, arg2: len as u64, ..Event::default() }
}

/// Lane `index`'s positions, `(tail, head)`: what the consumer released, what the producer
/// published.
pub fn positions(view: &RingView, index: u32) -> (u64, u64) {
    let lane = view.lane(index).unwrap();
    (lane.tail.load(Ordering::Relaxed), lane.head.load(Ordering::Relaxed))
}

/// Consumer side, slot by slot: takes everything published in `index`, checking that the
/// sequence numbers arrive in order without gaps; returns the number taken.
pub fn take(view: &RingView, index: u32, expect_next: &mut u64) -> u64 {
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
