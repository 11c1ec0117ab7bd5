//! The ABI proper: the `#[repr(C)]` blocks of the segment, the constants producers and the
//! consumer agree on, the geometry that sizes the segment, and the header check a producer runs
//! before it writes anything. Any change here is a [`RING_ABI_VERSION`] bump.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::func::AGG_SLOTS;
use crate::record::RECORD_BYTES;

/// The first 8 bytes of a ready ring; [`RingView::initialize`](super::RingView::initialize)
/// release-stores them last (as one `u64`, see [`RingHeader::magic`]), so a producer that maps
/// the segment early sees "not a ring" rather than half a header.
pub const RING_MAGIC: [u8; 8] = *b"MLPRING\0";
/// Bumped on any change of the layout below; producers refuse a ring of another version.
/// 3: lane states carry their generation and start unbacked; the image nonce, the interrupted
/// count, the heartbeat, the check period, the wake word and spread no-lane counters.
/// 4: lanes grow: a lane's `backed` count and its owner's `limit` (see [`LANE_FIRST_BACKED`]).
/// 5: producers count their claims in the header ([`RingHeader::lanes_claimed`]).
pub const RING_ABI_VERSION: u32 = 5;

/// Records of a lane backed with memory before it is offered or claimed (256 KiB). Its owner
/// backs more, doubling, when its head reaches the end of what is backed (the collector does,
/// ahead of the head, for an owner that could not): a thread costs memory, and the zeroing and
/// freeing of it, for what it records, not for the whole 4 MiB lane. Backing whole lanes cost
/// ~3 ms of CPU each at start and exit, most of a short run's fixed cost, for threads that
/// record a few hundred calls.
pub const LANE_FIRST_BACKED: u64 = 4096;

/// Per-cache-line counters of records that found no lane ([`RingHeader::no_lane_drops`]).
pub const NO_LANE_COUNTERS: usize = 16;

/// A counter alone on its 128-byte line pair (the adjacent-line prefetcher pulls pairs), so
/// threads that add to different ones never contend.
#[repr(C, align(128))]
pub struct PaddedCounter {
    /// The count.
    pub value: AtomicU64,
}

/// Bytes reserved for [`RingHeader`] at the start of the segment; lane blocks start here.
pub const HEADER_BYTES: usize = 4096;

/// [`RingHeader::clock_source`]: record times are raw TSC ticks (`rdtsc`), converted to
/// CLOCK_MONOTONIC ns by the collector. Chosen only where the TSC is invariant and is the
/// kernel's clocksource.
pub const CLOCK_TSC: u32 = 1;
/// [`RingHeader::clock_source`]: record times are already CLOCK_MONOTONIC ns.
pub const CLOCK_MONOTONIC: u32 = 2;

/// [`RingHeader::state`]: the ring accepts records.
pub const RING_SERVING: u32 = 1;
/// [`RingHeader::state`]: the collector finalized the run; producers stop writing.
pub const RING_CLOSED: u32 = 2;

/// Segment header, written once by the collector before the segment becomes visible
/// (it is created under a temporary name and renamed into place). Every field but the two
/// atomics is constant afterwards; producers check them with [`validate_header`].
#[repr(C)]
pub struct RingHeader {
    /// [`RING_MAGIC`] (read as a little-endian `u64`) once the header is complete: the
    /// collector release-stores it after every other field, producers acquire-load it before
    /// reading any.
    pub magic: AtomicU64,
    /// The collector's [`RING_ABI_VERSION`]; producers of another version do not write.
    pub abi_version: u32,
    /// [`HEADER_BYTES`]: bytes from the segment start to the first lane block.
    pub header_bytes: u32,
    /// Number of lane blocks (1..=65536): at most this many threads record at once.
    pub lane_count: u32,
    /// Records per lane, a power of two (64..=2^24).
    pub lane_capacity: u32,
    /// [`RECORD_BYTES`]: size of one slot, so a producer built with another record size
    /// refuses the ring.
    pub record_bytes: u32,
    /// [`LANE_BYTES`]: size of one lane control block.
    pub lane_bytes: u32,
    /// What record times count: [`CLOCK_TSC`] ticks or [`CLOCK_MONOTONIC`] ns.
    pub clock_source: u32,
    /// Effective uid of the collector that created the ring.
    pub owner_uid: u32,
    /// Pid of the collector; producers and a later collector check it is alive before trusting
    /// the ring.
    pub collector_pid: u32,
    /// Zero; keeps the 64-bit fields below 8-aligned.
    pub _reserved0: u32,
    /// Byte offset of lane 0 from the segment start ([`RingGeometry::lanes_offset`]).
    pub lanes_offset: u64,
    /// Byte offset of lane 0's slot array ([`RingGeometry::slots_offset`]).
    pub slots_offset: u64,
    /// Bytes the layout occupies ([`RingGeometry::total_bytes`]); the mapping is at least this
    /// large.
    pub total_bytes: u64,
    /// [`RING_SERVING`] or [`RING_CLOSED`]; written by the collector only.
    pub state: AtomicU32,
    /// Zero; keeps the 64-bit fields below 8-aligned.
    pub _reserved1: u32,
    /// The collector's clock at its latest pass over the ring, in ring clock units (TSC ticks
    /// or ns, as [`RingHeader::clock_source`] says): a producer that finds it older than
    /// twenty check periods asks the kernel whether the collector still exists.
    pub heartbeat: AtomicU64,
    /// About 100 ms in ring clock units: how often a producer looks at `state` and `heartbeat`
    /// (set before the magic; constant).
    pub check_period: u64,
    /// Futex word the collector may sleep on; a producer whose lane crosses its fill mark
    /// increments it and wakes the collector when `sleeping` is set.
    pub wake: AtomicU32,
    /// Non-zero while the collector sleeps on `wake`.
    pub sleeping: AtomicU32,
    /// Bumped by the collector (release) each time a lane becomes `FREE`: a thread that found
    /// no lane tries again only once this changed, which costs it one load per record meanwhile.
    pub lanes_offered: AtomicU32,
    /// Bumped by a producer (release) after each lane it claimed became `ACTIVE`: the
    /// collector reads the states of lanes it does not know to be in use only once this moved
    /// (and now and then), not all of them on every pass. Those 256 state words lie on 48
    /// pages; on these VMs, after a 100 ms sleep, their first read cost up to ~80 µs a pass.
    pub lanes_claimed: AtomicU32,
    /// The capture gate (in bytes that were reserved, so no ABI bump: an older collector
    /// leaves them zero, which means "record"): every hook loads it before it claims a lane or
    /// reads the clock and passes straight through while [`crate::ring::CAPTURE_PAUSED`] is
    /// set. The range count above that bit moves with each range opened; all transitions are
    /// compare-and-swaps (see `ring::capture`).
    pub capture: AtomicU32,
    /// What may open and close ranges ([`crate::ring::CaptureSource`] as a number; 0: nothing,
    /// the whole run is one range). Set before the magic; constant.
    pub capture_source: AtomicU32,
    /// How many ranges may be opened (`--capture-range-end`: 1 for `stop`, N for `repeat:N`,
    /// 0 for `repeat` without end). Set before the magic; constant.
    pub capture_limit: AtomicU32,
    /// Zero; places `no_lane_drops` at offset 1024.
    pub _reserved3: [u8; 900],
    /// Records dropped because no lane was free, spread over cache lines: a thread adds to
    /// counter `tid % NO_LANE_COUNTERS` (with a locked add: any thread of any process may).
    /// The total is their sum.
    pub no_lane_drops: [PaddedCounter; NO_LANE_COUNTERS],
}
const _: () = assert!(core::mem::size_of::<RingHeader>() <= HEADER_BYTES);
const _: () = assert!(core::mem::offset_of!(RingHeader, lanes_claimed) == 108);
const _: () = assert!(core::mem::offset_of!(RingHeader, capture) == 112);
const _: () = assert!(core::mem::offset_of!(RingHeader, no_lane_drops) == 1024);

impl RingHeader {
    /// Whether the collector finished initializing the header (acquire: the other fields may
    /// be read after a `true`).
    pub fn is_ready(&self) -> bool {
        self.magic.load(Ordering::Acquire) == u64::from_le_bytes(RING_MAGIC)
    }

    /// Records dropped so far because no lane was free.
    pub fn no_lane_drops_total(&self) -> u64 {
        self.no_lane_drops.iter().map(|c| c.value.load(Ordering::Relaxed)).fold(0, u64::wrapping_add)
    }
}

/// [`Lane::state`] (low bits): the lane's slots may not be backed by memory yet (a fresh,
/// zero-filled segment starts so); only the collector moves it on, to [`LANE_FREE`], once it
/// has allocated the slots (so a producer can never fault writing into a full tmpfs).
pub const LANE_UNBACKED: u32 = 0;
/// [`Lane::state`]: backed, nobody owns it; a producer may claim it (CAS to [`LANE_CLAIMING`]).
pub const LANE_FREE: u32 = 1;
/// [`Lane::state`]: a producer won the CAS and is filling in `pid`/`tid`/`uid`/`image`; the
/// consumer leaves the lane alone (unless it stays so for long: its claimer died, and the
/// collector gives it back with a CAS to `FREE`).
pub const LANE_CLAIMING: u32 = 2;
/// [`Lane::state`]: the owner writes records; the consumer drains them.
pub const LANE_ACTIVE: u32 = 3;
/// [`Lane::state`]: the owner thread exited; the consumer drains what is left, records the
/// final counters and frees the lane.
pub const LANE_RETIRED: u32 = 4;
/// [`Lane::state`]: not backed yet, but the collector allows a producer that finds no `FREE`
/// lane to claim it and back the slots itself (`MADV_POPULATE_WRITE`, which fails instead of
/// faulting when memory runs out) before writing; the collector opens lanes only while the shm
/// filesystem has room for the whole ring.
pub const LANE_OPEN: u32 = 5;
/// Bits of [`Lane::state`] that hold the state; the rest is the lane's generation.
pub const LANE_STATE_BITS: u32 = 3;

/// The state part of a [`Lane::state`] word (`LANE_UNBACKED` … `LANE_RETIRED`).
#[inline(always)]
pub const fn lane_state(word: u32) -> u32 {
    word & ((1 << LANE_STATE_BITS) - 1)
}

/// The generation part of a [`Lane::state`] word: incremented by every claim, so owners are
/// told apart and a stale compare-and-swap (a retire, a reclaim) fails instead of hitting the
/// next owner's lane.
#[inline(always)]
pub const fn lane_generation(word: u32) -> u32 {
    word >> LANE_STATE_BITS
}

/// A [`Lane::state`] word.
#[inline(always)]
pub const fn lane_word(generation: u32, state: u32) -> u32 {
    (generation << LANE_STATE_BITS) | lane_state(state)
}

/// Exact per-thread counters for calls kept as aggregates (clock reads), updated by the lane's
/// producer with plain relaxed stores and read by the collector at any time.
#[repr(C)]
pub struct AggSlot {
    /// Calls made (every call, timed or not).
    pub count: AtomicU64,
    /// Calls whose duration was measured (see `MLPROF_CLOCK_TIMING`).
    pub timed: AtomicU64,
    /// Sum of the measured durations, in ring clock ticks.
    pub ticks: AtomicU64,
}

/// One producer lane's control block; cache-line separated by writer.
#[repr(C, align(128))]
pub struct Lane {
    // Line 0: ownership, written at claim time.
    /// The lane's generation and state, as [`lane_word`] packs them; every transition is one
    /// compare-and-swap: `UNBACKED → FREE | OPEN`, `… → FREE` and a stale `CLAIMING → UNBACKED`
    /// by the collector; `FREE | OPEN → CLAIMING` (generation + 1) → `ACTIVE` → `RETIRED` (or,
    /// when backing an open lane fails, `CLAIMING → UNBACKED`) by the owner.
    pub state: AtomicU32,
    /// Process id of the owner (set while `CLAIMING`, valid once `ACTIVE`).
    pub pid: AtomicU32,
    /// Kernel thread id of the owner (set like `pid`).
    pub tid: AtomicU32,
    /// The effective uid of the claiming process (checked against /proc while it lives).
    pub uid: AtomicU32,
    /// The owner's process image: a nonce each image draws when it joins. A process that
    /// execs keeps its pid; the collector frees the lanes of its old image (which can no longer
    /// write) when the new image announces itself with another nonce.
    pub image: AtomicU64,
    /// Zero; fills line 0.
    pub _pad0: [u8; 104],
    // Line 1: producer-owned.
    /// Position one past the last published record (a count since the claim, never wrapped by
    /// the capacity); written only by the owner, with a release store after the slots.
    pub head: AtomicU64,
    /// The producer's last view of `tail` (saves a shared-line read per record).
    pub cached_tail: AtomicU64,
    /// Records the owner could not write because the lane had no room (a record, or a string
    /// the record needed), cumulative.
    pub dropped: AtomicU64,
    /// Calls a signal handler made while the owner was writing a record (the lane has one
    /// writer, so they cannot be recorded), cumulative.
    pub interrupted: AtomicU64,
    /// The owner's last view of the position it may write up to (exclusive): `tail +
    /// capacity`, or `backed` while that is less. A record below it is written with no other
    /// check; one at it makes the owner look at `tail` and `backed` again (and grow the lane).
    pub limit: AtomicU64,
    /// `dropped` + 1 when the owner last failed to back more of the lane (memory ran out, or
    /// it has no way to), 0 when it has not: it tries again only after [`GROW_RETRY_DROPS`]
    /// more drops, and the collector grows such a lane from then on, ahead of its head.
    pub grow_failed_at: AtomicU64,
    /// Zero; fills line 1.
    pub _pad1: [u8; 80],
    // Line 2: consumer-owned.
    /// Position of the first record the consumer has not released; written only by the
    /// consumer, with a release store once the records are copied out. `head - tail` is at
    /// most the capacity.
    pub tail: AtomicU64,
    /// Slots backed with memory, from slot 0 (a count, up to the capacity): while it is below
    /// the capacity the owner writes only positions below it (positions then have not wrapped).
    /// Raised, never lowered (`fetch_max`), by whoever backs more: the collector before it
    /// offers the lane, an owner that claims an `OPEN` lane or reaches the end (it maps the
    /// pages as it backs them, so it takes no page fault on them later), the collector when a
    /// head gets half-way in a lane whose owner could not. Kept when the lane is freed: the
    /// memory stays backed.
    pub backed: AtomicU64,
    /// Zero; fills line 2.
    pub _pad2: [u8; 112],
    // Lines 3..6: aggregates.
    /// Counters of aggregated calls, indexed as [`crate::func::agg_slot_meaning`] says.
    pub aggregates: [AggSlot; AGG_SLOTS],
}
/// Size of one [`Lane`] control block (six 128-byte lines).
pub const LANE_BYTES: usize = 768;
const _: () = assert!(core::mem::size_of::<Lane>() == LANE_BYTES);
const _: () = assert!(core::mem::offset_of!(Lane, image) == 16);
const _: () = assert!(core::mem::offset_of!(Lane, head) == 128);
const _: () = assert!(core::mem::offset_of!(Lane, tail) == 256);
const _: () = assert!(core::mem::offset_of!(Lane, backed) == 264);
const _: () = assert!(core::mem::offset_of!(Lane, aggregates) == 384);

/// How far a lane of `capacity` slots backed up to `backed` is grown so that `end` slots fit:
/// doubled (from at least [`LANE_FIRST_BACKED`]), in whole steps of it, at most the capacity.
/// `end` is clamped first: a head another process scribbled on may be anything. The owner and
/// the collector both grow lanes by this.
pub fn grown_backing(capacity: u64, backed: u64, end: u64) -> u64 {
    let step = LANE_FIRST_BACKED.min(capacity);
    backed.max(step / 2).saturating_mul(2).max(end.min(capacity)).next_multiple_of(step).min(capacity)
}

/// Drops between two tries of an owner to back more of its lane after one failed.
pub const GROW_RETRY_DROPS: u64 = 1024;

/// Sizes of a ring; the collector picks them, producers read them from the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    /// Number of lanes, 1..=65536.
    pub lane_count: u32,
    /// Records per lane, a power of two in 64..=2^24.
    pub lane_capacity: u32,
}

impl RingGeometry {
    /// 256 lanes (threads at once) × 65536 records (4 MiB) each: at 2.5 M records/s a lane
    /// holds 26 ms, enough for a collector that a busy 2-core machine schedules late. Pages are
    /// only backed once a lane is written, so the 1 GiB segment costs at most 4 MiB per thread
    /// that records (less for threads that record little).
    pub const DEFAULT: RingGeometry = RingGeometry { lane_count: 256, lane_capacity: 65536 };

    /// Whether both sizes are within the limits above (which keep every offset in a `u64` and
    /// every lane's slot array addressable).
    pub fn is_valid(&self) -> bool {
        (1..=65536).contains(&self.lane_count)
            && self.lane_capacity.is_power_of_two()
            && (64..=(1 << 24)).contains(&self.lane_capacity)
    }

    /// Byte offset of the first lane block: right after the header.
    pub fn lanes_offset(&self) -> u64 {
        HEADER_BYTES as u64
    }

    /// Byte offset of lane 0's slot array: right after the last lane block.
    pub fn slots_offset(&self) -> u64 {
        self.lanes_offset() + self.lane_count as u64 * LANE_BYTES as u64
    }

    /// Bytes of one lane's slot array (`lane_capacity` records).
    pub fn lane_slots_bytes(&self) -> u64 {
        self.lane_capacity as u64 * RECORD_BYTES as u64
    }

    /// Records of a lane backed before it is offered or claimed ([`LANE_FIRST_BACKED`], or the
    /// whole lane when smaller).
    pub fn first_backed(&self) -> u64 {
        LANE_FIRST_BACKED.min(self.lane_capacity as u64)
    }

    /// Size of the whole segment: header, lane blocks and slot arrays.
    pub fn total_bytes(&self) -> u64 {
        self.slots_offset() + self.lane_count as u64 * self.lane_slots_bytes()
    }
}

/// Checks a mapped header against what this build understands; `Err` says why not.
pub fn validate_header(header: &RingHeader, mapped_bytes: u64) -> Result<RingGeometry, &'static str> {
    if !header.is_ready() {
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

/// The segment file name of a per-user session (in the shm directory), e.g. `mlprof-1000-default`.
pub fn session_shm_name(uid: u32, session: &str) -> String {
    format!("mlprof-{uid}-{session}")
}

/// Whether a session name is usable in a shared-memory name.
pub fn is_valid_session_name(session: &str) -> bool {
    !session.is_empty()
        && session.len() <= 64
        && session.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::HeapRing;

    #[test]
    fn default_geometry_is_valid_and_sized() {
        let g = RingGeometry::DEFAULT;
        assert!(g.is_valid());
        assert_eq!(g.total_bytes(), 4096 + 256 * 768 + 256 * 65536 * 64);
        assert!(!RingGeometry { lane_count: 4, lane_capacity: 100 }.is_valid());
    }

    #[test]
    fn header_validates_and_garbage_does_not() {
        let geometry = RingGeometry { lane_count: 4, lane_capacity: 64 };
        let mapping = HeapRing::new(geometry);
        let view = mapping.view();
        assert_eq!(validate_header(view.header(), geometry.total_bytes()), Ok(geometry));
        assert!(validate_header(view.header(), geometry.total_bytes() - 1).is_err());
        // Safety: writing into our own buffer.
        unsafe { *mapping.base().add(20) = 0xff };
        assert!(validate_header(view.header(), geometry.total_bytes()).is_err());
    }

    #[test]
    fn session_names() {
        assert!(is_valid_session_name("default"));
        assert!(is_valid_session_name("run-1.a_b"));
        assert!(!is_valid_session_name("../x"));
        assert!(!is_valid_session_name(""));
        assert_eq!(session_shm_name(7, "s"), "mlprof-7-s");
    }
}
