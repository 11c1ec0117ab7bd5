//! Unit-test support: rings in ordinary memory, standing in for the collector's segment, and
//! reading back what this thread recorded with the consumer step the collector runs
//! (`LaneConsumer::drain`), not a copy of it.

use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use mlprof_format::record::Event;
use mlprof_format::ring::{Drained, LaneConsumer, LaneItem, RingGeometry, RingView};
use mlprof_format::testing::{HeapRing, Owner};

/// A ring in leaked heap memory, owned by this user and process, and its view (leaked too:
/// the recorder's rings are `'static`). Its check period is long, so that no test thread
/// looks for a collector while a test runs.
pub fn heap_ring(geometry: RingGeometry) -> &'static RingView {
    let owner =
        Owner { uid: crate::sys::geteuid(), collector_pid: std::process::id(), check_period: u64::MAX / 2 };
    HeapRing::with_owner(geometry, owner).leak()
}

/// The ring this test process has joined as if a collector served it (one per test binary:
/// the recorder joins once per process). Lanes are plentiful because every test runs on a
/// thread of its own that keeps its lane.
pub fn joined_ring() -> &'static RingView {
    static JOINED: OnceLock<()> = OnceLock::new();
    JOINED.get_or_init(|| {
        let ring = heap_ring(RingGeometry { lane_count: 256, lane_capacity: 1024 });
        // Safety: the ring's memory is leaked, so it outlives this second view of it.
        let view = unsafe { RingView::new(ring.header() as *const _ as *mut u8, ring.geometry()) };
        crate::recorder::session::join_for_test(view)
    });
    crate::recorder::session::ring().expect("joined")
}

/// What this thread's lane holds that was not read yet: records and string definitions, taken
/// by the collector's own consumer step.
pub fn take_this_threads_items() -> (Vec<Event>, Vec<(u64, Vec<u8>)>) {
    let ring = joined_ring();
    let state = crate::guard::current().unwrap();
    let Some(index) = state.lane.get().checked_sub(1) else { return (Vec::new(), Vec::new()) };
    let (mut records, mut strings) = (Vec::new(), Vec::new());
    let drained = LaneConsumer::new().drain(ring, index, |item| {
        match item {
            LaneItem::Record(event) => records.push(event),
            LaneItem::String { id, bytes } => strings.push((id, bytes.to_vec())),
        }
        Ok::<(), ()>(())
    });
    assert!(matches!(drained, Ok(Drained::Taken(_))), "a lane this thread wrote reads whole: {drained:?}");
    (records, strings)
}

/// This thread's lane's drop counter.
pub fn this_threads_drops() -> u64 {
    let state = crate::guard::current().unwrap();
    let index = state.lane.get().checked_sub(1).expect("a lane");
    joined_ring().lane(index).unwrap().dropped.load(Ordering::Relaxed)
}

/// This thread's lane's count of calls a signal handler made while it was writing.
pub fn this_threads_interrupted() -> u64 {
    let state = crate::guard::current().unwrap();
    let index = state.lane.get().checked_sub(1).expect("a lane");
    joined_ring().lane(index).unwrap().interrupted.load(Ordering::Relaxed)
}
