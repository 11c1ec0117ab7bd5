//! What the drain needs of the ring it serves, as a trait: the collector's shared segment
//! answers it, and so does a ring in heap memory in the drain's unit tests.

use mlprof_format::ring::{RingGeometry, RingView};

use crate::segment::Segment;

/// The ring a [`Drainer`](super::Drainer) drains, and the segment's bookkeeping that a pass
/// drives (backing spare and growing lanes, the heartbeat).
pub trait DrainedRing {
    /// The ring.
    fn view(&self) -> &RingView;
    /// The ring's geometry.
    fn geometry(&self) -> RingGeometry;
    /// Records the collector's clock in the header (see [`Segment::heartbeat`]).
    fn heartbeat(&self, now: u64);
    /// Backs more of lane `index` if its owner could not (see [`Segment::grow_lane`]).
    fn grow_lane(&self, index: u32, head: u64);
    /// Keeps spare lanes backed for new threads (see [`Segment::replenish`]); a message the
    /// first time memory runs out.
    fn replenish(&mut self, busy: bool, look_at_all: bool) -> Option<String>;
    /// A lane was freed (see [`Segment::lane_freed`]).
    fn lane_freed(&mut self);
}

impl DrainedRing for Segment {
    #[inline]
    fn view(&self) -> &RingView {
        Segment::view(self)
    }

    #[inline]
    fn geometry(&self) -> RingGeometry {
        self.geometry
    }

    fn heartbeat(&self, now: u64) {
        Segment::heartbeat(self, now);
    }

    fn grow_lane(&self, index: u32, head: u64) {
        Segment::grow_lane(self, index, head);
    }

    fn replenish(&mut self, busy: bool, look_at_all: bool) -> Option<String> {
        Segment::replenish(self, busy, look_at_all)
    }

    fn lane_freed(&mut self) {
        Segment::lane_freed(self);
    }
}
