//! What a GPU did, on its own clock: CUPTI activity records (kernels, copies, memsets,
//! synchronizations, CUPTI's overhead) and the state of their collection, as libmlprof.so sends
//! them from CUPTI's buffer thread (since ring records of kind [`KIND_GPU_ACTIVITY`]) and as
//! `run.bin` stores them ([`crate::runfile::FRAME_GPU_ACTIVITY`] frames, since format 1.5).
//!
//! One 64-byte [`GpuActivity`] per activity, `what` saying which; the fields per `what`:
//!
//! | `what` | `detail` | `correlation` | `aux` | `value` | `grid`, `block` | `shared` |
//! |---|---|---|---|---|---|---|
//! | [`ACTIVITY_KERNEL`] | – | CUPTI correlation id | registers per thread | kernel name string id | packed as [`crate::record::pack_launch_dims`] | static + dynamic shared memory bytes |
//! | [`ACTIVITY_MEMCPY`] | CUPTI copy kind ([`copy_kind_name`]) | correlation id | source memory kind \| destination << 8 | bytes | – | – |
//! | [`ACTIVITY_MEMSET`] | – | correlation id | memory kind | bytes | – | – |
//! | [`ACTIVITY_SYNC`] | CUPTI synchronization type | correlation id | – | CUDA event id | – | – |
//! | [`ACTIVITY_OVERHEAD`] | CUPTI overhead kind | – | – | – | – | – |
//! | [`ACTIVITY_STATE`] | [`GpuTimelineState`] | – | – | the state's figure (see each state) | – | – |
//! | [`ACTIVITY_COUNTS`] | – | – | – | activities CUPTI delivered so far | `grid`: dropped by CUPTI so far; `block`/`shared`: (low/high 32 bits) lost to a full ring so far | – |
//! | [`ACTIVITY_LINK`] | – | correlation id | the host call's function id | the host call's tid | – | – |
//!
//! `start`/`dur` are ring ticks in the ring (CUPTI stamps records with the ring's own clock
//! through its timestamp callback) unless [`ACTIVITY_FLAG_MONOTONIC`] says they are
//! CLOCK_MONOTONIC ns already (CUPTI refused the callback: its own timestamps, moved onto the
//! monotonic axis by a calibration whose residual the STATE record gives in `aux`, ns); in
//! `run.bin` always CLOCK_MONOTONIC ns. `pid` is the process's (the collector writes the lane
//! owner's); where an [`Event`] has its `tid`, this has `correlation`, which the collector keeps.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::record::{Event, RECORD_BYTES};

/// Ring control kind (and the `kind` stored in `run.bin`) of a [`GpuActivity`]. Older
/// collectors skip it like any unknown control kind.
pub const KIND_GPU_ACTIVITY: u16 = 0x8006;

/// A kernel ran (CUPTI's concurrent-kernel kind).
pub const ACTIVITY_KERNEL: u8 = 1;
/// A memory copy ran.
pub const ACTIVITY_MEMCPY: u8 = 2;
/// A memset ran.
pub const ACTIVITY_MEMSET: u8 = 3;
/// The host waited on the GPU (stream, event, context synchronization), as CUPTI saw it.
pub const ACTIVITY_SYNC: u8 = 4;
/// CUPTI's own work (buffer flushes, instrumentation) on the host.
pub const ACTIVITY_OVERHEAD: u8 = 5;
/// The state of the GPU timeline in this process changed: [`GpuTimelineState`] in `detail`.
pub const ACTIVITY_STATE: u8 = 6;
/// Running totals of this process's GPU activities (delivered, dropped by reason).
pub const ACTIVITY_COUNTS: u8 = 7;
/// A host API call with a known correlation id (the collector writes it for each call flagged
/// [`crate::record::FLAG_CORRELATED`]): `correlation`, the call's thread in `value`, its
/// `start`/`dur`, and its function id in `aux`. GPU work with the same (pid, correlation) was
/// issued by that call.
pub const ACTIVITY_LINK: u8 = 8;

/// `flags` bit: `start`/`dur` are CLOCK_MONOTONIC ns already (in the ring; see the module).
pub const ACTIVITY_FLAG_MONOTONIC: u8 = 1;

/// One GPU activity (see the module for the fields of each `what`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GpuActivity {
    /// [`KIND_GPU_ACTIVITY`].
    pub kind: u16,
    /// What happened: [`ACTIVITY_KERNEL`] …
    pub what: u8,
    /// Per `what` (see the module): the copy kind, synchronization type, state.
    pub detail: u8,
    /// Process id; the collector overwrites it with the lane owner's before storing.
    pub pid: u32,
    /// CUPTI's correlation id: the same number as the host API call that issued the work.
    pub correlation: u32,
    /// The device's index (CUPTI's device id; a node has far fewer than 256).
    pub device: u8,
    /// [`ACTIVITY_FLAG_MONOTONIC`].
    pub flags: u8,
    /// Per `what` (see the module): registers per thread, memory kinds.
    pub aux: u16,
    /// When the GPU started it: ring ticks in the ring, CLOCK_MONOTONIC ns in `run.bin`.
    pub start: u64,
    /// How long it ran, same unit as `start`.
    pub dur: u64,
    /// Per `what`: kernel name string id, bytes, event id, result code, totals.
    pub value: u64,
    /// Kernel grid dimensions (packed), or a second total.
    pub grid: u64,
    /// Kernel block dimensions (packed), or a third total's low half.
    pub block: u32,
    /// CUPTI's stream id.
    pub stream: u32,
    /// CUPTI's context id.
    pub context: u32,
    /// Per `what`: a kernel's shared memory bytes, or a third total's high half.
    pub shared: u32,
}

// The ring's consumer and the collector's time conversion treat every record alike: kind at 0,
// pid at 4, times at 16 and 24, as in `Event`.
const _: () = assert!(core::mem::size_of::<GpuActivity>() == RECORD_BYTES);
const _: () = assert!(core::mem::offset_of!(GpuActivity, pid) == core::mem::offset_of!(Event, pid));
const _: () = assert!(core::mem::offset_of!(GpuActivity, start) == core::mem::offset_of!(Event, start));
const _: () = assert!(core::mem::offset_of!(GpuActivity, dur) == core::mem::offset_of!(Event, dur));

impl GpuActivity {
    /// The same 64 bytes read as a GPU activity (no check of `kind`).
    pub fn from_event(event: &Event) -> GpuActivity {
        zerocopy::transmute!(*event)
    }

    /// The same 64 bytes as an [`Event`], for the ring.
    pub fn into_event(self) -> Event {
        zerocopy::transmute!(self)
    }

    /// Whether this is work that ran on a GPU (a kernel, copy or memset), as opposed to a
    /// synchronization, CUPTI's overhead or a record about the timeline itself.
    pub fn is_work(&self) -> bool {
        matches!(self.what, ACTIVITY_KERNEL | ACTIVITY_MEMCPY | ACTIVITY_MEMSET)
    }

    /// The lost-to-a-full-ring total of an [`ACTIVITY_COUNTS`] record.
    pub fn ring_dropped(&self) -> u64 {
        self.block as u64 | (self.shared as u64) << 32
    }

    /// Sets the lost-to-a-full-ring total of an [`ACTIVITY_COUNTS`] record.
    pub fn set_ring_dropped(&mut self, total: u64) {
        self.block = total as u32;
        self.shared = (total >> 32) as u32;
    }
}

/// The name of a CUPTI memcpy kind (`detail` of an [`ACTIVITY_MEMCPY`]), as reports print it.
pub fn copy_kind_name(detail: u8) -> &'static str {
    // CUpti_ActivityMemcpyKind: H = pageable or pinned host memory, D = device, A = array.
    match detail {
        1 => "H2D",
        2 => "D2H",
        3 => "H2A",
        4 => "A2H",
        5 => "A2A",
        6 => "A2D",
        7 => "D2A",
        8 => "D2D",
        9 => "H2H",
        10 => "P2P",
        _ => "other",
    }
}

/// What the GPU timeline of a process is doing (`detail` of an [`ACTIVITY_STATE`] record).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuTimelineState {
    /// Collecting: CUPTI loaded, callbacks registered, kinds enabled (`value`: CUPTI's API
    /// version).
    Started = 1,
    /// Not collected: `MLPROF_CUPTI=off` (`value` 0), or not asked for (`value` 1: the timeline
    /// is opt-in, `mlprof-collect --gpu-timeline` or `MLPROF_CUPTI=on`).
    Off = 2,
    /// No libcupti found beside the CUDA libraries in use (nor `MLPROF_CUPTI`'s path; `value`:
    /// the CUDA major version looked for).
    NotFound = 3,
    /// The libcupti found is for another CUDA major version (`value`: its API version).
    VersionMismatch = 4,
    /// A CUPTI call failed (`value`: its result; 15 = not initialized).
    Failed = 5,
    /// Another tool took CUPTI (torch.profiler, Nsight Systems, …): mlprof stood down (`value`:
    /// 39 when CUPTI refused our subscription for it, 0 when the tool took CUPTI later).
    StoodDown = 6,
    /// CUPTI refused the timestamp callback: times are its own, calibrated onto the monotonic
    /// clock (`value`: the calibration's residual, ns).
    Calibrated = 7,
    /// Collecting, but GPU work cannot be linked to its host calls: CUPTI's callbacks were
    /// refused (`value`: the result of `cuptiSubscribe`), or `MLPROF_CUPTI_LINKS=off` asked for
    /// none (`value` 0xFFFF_FFFE).
    Unlinked = 8,
    /// Collecting through CUPTI's multi-subscriber API (CUPTI 13.3+, driver r610+): our own
    /// subscriber, beside which other tools that use that API trace too (`value` 0).
    MultiSubscriber = 9,
    /// CUPTI offers the multi-subscriber API but refused it (`value`: the result of
    /// `cuptiSubscribe_v2`; a driver older than r610): one subscriber, as before CUPTI 13.3.
    SingleSubscriber = 10,
}

impl GpuTimelineState {
    /// The state of `detail`, if known to this build.
    pub fn from_u8(detail: u8) -> Option<GpuTimelineState> {
        use GpuTimelineState::*;
        [
            Started,
            Off,
            NotFound,
            VersionMismatch,
            Failed,
            StoodDown,
            Calibrated,
            Unlinked,
            MultiSubscriber,
            SingleSubscriber,
        ]
        .into_iter()
        .find(|s| *s as u8 == detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runfile::{Error, Frame, RunEnd, RunInfo, RunReader, RunWriter};

    fn kernel(i: u32) -> GpuActivity {
        GpuActivity {
            kind: KIND_GPU_ACTIVITY,
            what: ACTIVITY_KERNEL,
            pid: 7,
            correlation: i,
            start: 1000 * i as u64,
            dur: 10,
            value: 0xfeed,
            ..Default::default()
        }
    }

    fn file_with(records: &[GpuActivity]) -> Vec<u8> {
        let mut w = RunWriter::new(Vec::new(), &RunInfo::default()).unwrap();
        w.write_gpu_activity(records).unwrap();
        w.finish(&RunEnd::default()).unwrap()
    }

    #[test]
    fn records_go_through_a_run_file_unchanged() {
        let records: Vec<GpuActivity> = (1..=3).map(kernel).collect();
        let bytes = file_with(&records);
        let mut reader = RunReader::new(&bytes[..]).unwrap();
        let mut read = Vec::new();
        while let Some(frame) = reader.next_frame().unwrap() {
            if let Frame::GpuActivity(batch) = frame {
                read.extend(batch);
            }
        }
        assert_eq!(read, records);
        assert_eq!(reader.skipped_frames(), 0);
    }

    #[test]
    fn a_frame_that_is_not_whole_records_is_corrupt_at_its_offset() {
        let mut bytes = file_with(&[kernel(1)]);
        // The GPU frame follows the 16-byte file header and the run-info frame; make its length
        // 63 (one byte short of a record): an error naming the frame's offset, not a panic.
        let mut reader = RunReader::new(&bytes[..]).unwrap();
        reader.next_frame().unwrap();
        let at = reader.offset() as usize;
        bytes[at + 4..at + 8].copy_from_slice(&63u32.to_le_bytes());
        let mut reader = RunReader::new(&bytes[..]).unwrap();
        reader.next_frame().unwrap();
        match reader.next_frame() {
            Err(Error::Corrupt { offset, .. }) => assert_eq!(offset, at as u64),
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn ring_totals_use_both_halves_and_states_round_trip() {
        let mut counts = GpuActivity { what: ACTIVITY_COUNTS, ..Default::default() };
        counts.set_ring_dropped(0x1_0000_0002);
        assert_eq!(counts.ring_dropped(), 0x1_0000_0002);
        for state in 1..=10 {
            assert_eq!(GpuTimelineState::from_u8(state).map(|s| s as u8), Some(state));
        }
        assert_eq!(GpuTimelineState::from_u8(0), None);
        assert_eq!(GpuActivity::from_event(&kernel(4).into_event()), kernel(4));
    }
}
