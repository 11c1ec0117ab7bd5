//! The shared-memory ring ABI between `libmlprof.so` (many producer processes and threads) and
//! `mlprof-collect` (one consumer).
//!
//! Layout of the POSIX shared-memory segment (all offsets from its start):
//!
//! ```text
//! [RingHeader, 4096 bytes][Lane; lane_count][slots: lane_count × lane_capacity × 64 bytes]
//! ```
//!
//! Lanes start `UNBACKED`; the collector backs the first slots of a lane with memory (so a
//! producer can never fault on a full tmpfs) and offers it (`FREE`); the lane grows, backed
//! further by its owner or the collector, as its owner writes it (`Lane::backed`). Each producer thread claims one lane
//! (CAS `FREE → CLAIMING` with the next generation, fills `pid`/`tid`/`image`, CAS to
//! `ACTIVE`), so every lane has a single writer and the hot path needs no lock and no
//! read-modify-write: the producer writes `slot[head % capacity]` and then publishes with a
//! release store of `head + 1`. A full lane (`head - tail == capacity`) drops the record and
//! bumps `dropped`; the producer never waits. A producer killed mid-write never published its
//! record, so the consumer never sees a torn one. The consumer copies `tail..head` out and
//! release-stores `tail`. When a thread exits it marks its lane `RETIRED` (a CAS on the
//! generation it claimed); the consumer drains it, records its final counters, zeroes it and
//! stores `FREE`. Lanes of threads that died without retiring (SIGKILL, `_exit`), of a process
//! image replaced by exec, and claims abandoned half-way are found by the collector's liveness
//! check and treated the same way.
//!
//! The code is split by job, each part with its own unit tests (as Perfetto keeps its
//! shared-memory ABI, producer and consumer validator apart):
//!
//! * `layout`: the `#[repr(C)]` blocks, constants and geometry, and the header check;
//! * `view`: [`RingView`], the mapped ring and its address arithmetic;
//! * `producer`: claiming a lane, [`RingView::push`], [`RingView::push_string`], drop counts;
//! * `consumer`: [`LaneConsumer::drain`], the one consumer step (position checks, copy-out,
//!   [`LaneItems`], tail release) that the collector and the fuzz target both run;
//! * `capture`: the capture gate, its sources and triggers (ranges).

mod capture;
mod consumer;
mod layout;
mod producer;
mod view;

pub use capture::{CAPTURE_PAUSED, CapturePlan, CaptureSource, Flipped, KIND_CAPTURE_EDGE, Trigger};
pub use consumer::{DRAIN_BLOCK, Drained, LaneConsumer, LaneItem, LaneItems};
pub use layout::{
    AggSlot, CLOCK_MONOTONIC, CLOCK_TSC, GROW_RETRY_DROPS, HEADER_BYTES, LANE_ACTIVE, LANE_BYTES,
    LANE_CLAIMING, LANE_FIRST_BACKED, LANE_FREE, LANE_OPEN, LANE_RETIRED, LANE_STATE_BITS, LANE_UNBACKED,
    Lane, NO_LANE_COUNTERS, PaddedCounter, RING_ABI_VERSION, RING_CLOSED, RING_MAGIC, RING_SERVING,
    RingGeometry, RingHeader, grown_backing, is_valid_session_name, lane_generation, lane_state, lane_word,
    session_shm_name, validate_header,
};
pub use producer::{BackFn, Claim, LaneWriter, Pushed, signal_safe_add};
pub use view::RingView;
