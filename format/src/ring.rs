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

use core::sync::atomic::{AtomicU32, AtomicU64};

use crate::func::AGG_SLOTS;
use crate::record::RECORD_BYTES;

pub const RING_MAGIC: [u8; 8] = *b"MLPRING\0";
/// Bumped on any change of the layout below; producers refuse a ring of another version.
pub const RING_ABI_VERSION: u32 = 1;

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

/// One producer lane's control block; cache-line separated by writer.
#[repr(C, align(128))]
pub struct Lane {
    // Line 0: ownership, written at claim time.
    pub state: AtomicU32,
    pub pid: AtomicU32,
    pub tid: AtomicU32,
    /// Incremented on every claim, so the consumer tells successive owners apart.
    pub generation: AtomicU32,
    pub _pad0: [u8; 112],
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
    /// 256 lanes (threads at once) × 16384 records (1 MiB) each. Pages are only backed once a
    /// lane is used, so the 256 MiB segment costs about 1 MiB per live thread.
    pub const DEFAULT: RingGeometry = RingGeometry {
        lane_count: 256,
        lane_capacity: 16384,
    };

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
pub fn validate_header(
    header: &RingHeader,
    mapped_bytes: u64,
) -> Result<RingGeometry, &'static str> {
    if header.magic != RING_MAGIC {
        return Err("not an mlprof ring (bad magic)");
    }
    if header.abi_version != RING_ABI_VERSION {
        return Err("ring ABI version differs from this libmlprof.so");
    }
    let geometry = RingGeometry {
        lane_count: header.lane_count,
        lane_capacity: header.lane_capacity,
    };
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
        && session
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_geometry_is_valid_and_sized() {
        let g = RingGeometry::DEFAULT;
        assert!(g.is_valid());
        assert_eq!(g.total_bytes(), 4096 + 256 * 768 + 256 * 16384 * 64);
        assert!(
            !RingGeometry {
                lane_count: 4,
                lane_capacity: 100
            }
            .is_valid()
        );
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
