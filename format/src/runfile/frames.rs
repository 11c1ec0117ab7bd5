//! What a run file holds: the frame kinds, the metadata structs they carry (postcard-encoded,
//! fields only ever appended), and [`Frame`], one decoded frame as the reader returns it.

use serde::{Deserialize, Serialize};

use crate::energy::{EnergyDevice, EnergyNote, EnergySample};
use crate::gpu::GpuActivity;
use crate::rank::RankInfo;
use crate::record::Event;

/// Frame kind: [`RunInfo`], the first frame of every file. Kinds are only ever added.
pub const FRAME_RUN_INFO: u16 = 1;
/// Frame kind: an interned string, `id u64 (LE) | bytes`, sent before the first frame that
/// refers to the id.
pub const FRAME_STRING: u16 = 2;
/// Frame kind: [`ProcessInfo`].
pub const FRAME_PROCESS: u16 = 3;
/// Frame kind: [`ProcessExit`].
pub const FRAME_PROCESS_EXIT: u16 = 4;
/// Frame kind: raw 64-byte [`Event`] records (times in CLOCK_MONOTONIC ns), `len / 64` of them.
pub const FRAME_EVENTS: u16 = 5;
/// Frame kind: a batch of [`AggregateSample`]s.
pub const FRAME_AGGREGATES: u16 = 6;
/// Frame kind: a batch of [`DropSample`]s.
pub const FRAME_DROPS: u16 = 7;
/// Frame kind: [`ThreadInfo`].
pub const FRAME_THREAD: u16 = 8;
/// Frame kind: [`RunEnd`], the last frame of a cleanly finished file.
pub const FRAME_END: u16 = 9;
// 10..=19: energy and device samples (see [`crate::energy`]): one device, a batch of samples, a note.
/// Frame kind: [`EnergyDevice`] (since 1.2).
pub const FRAME_ENERGY_DEVICE: u16 = 10;
/// Frame kind: a batch of [`EnergySample`]s (since 1.2).
pub const FRAME_ENERGY_SAMPLES: u16 = 11;
/// Frame kind: [`EnergyNote`] (since 1.2).
pub const FRAME_ENERGY_NOTE: u16 = 12;
/// Frame kind: [`SymbolInfo`], the name of a GPU function handle (kernel) in one process.
pub const FRAME_SYMBOL: u16 = 20;
/// Frame kind: [`NodeInfo`], one node of a merged run (since 1.4; `mlprof merge` writes one
/// per input file, before any frame of that node).
pub const FRAME_NODE: u16 = 21;

/// Frame kind: raw 64-byte [`GpuActivity`] records (times in CLOCK_MONOTONIC ns), `len / 64`
/// of them (since 1.5): what the GPUs did, in the order CUPTI delivered it.
pub const FRAME_GPU_ACTIVITY: u16 = 22;

/// Largest frame a reader accepts; anything larger is corruption, not data.
pub const MAX_FRAME_BYTES: u32 = 64 << 20;

/// Run-wide facts, the first frame of every file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Version of the `mlprof-collect` that wrote the file.
    pub mlprof_version: String,
    /// Host name of the machine the run was recorded on.
    pub host: String,
    /// Session name the collector ran under (`--session`, `MLPROF_SESSION`, or `default`).
    pub session: String,
    /// The launched command; empty in attach mode.
    pub command: Vec<String>,
    /// CLOCK_MONOTONIC ns when the collector started; all times in the file use this clock.
    pub start_mono_ns: u64,
    /// CLOCK_REALTIME ns read right next to `start_mono_ns` (the wall-clock anchor).
    pub start_realtime_ns: u64,
    /// Clock the producers stamped with (`tsc` or `clock_monotonic`); converted on the way in.
    pub clock_source: String,
    /// The ring ABI the producers spoke ([`crate::ring::RING_ABI_VERSION`]).
    pub ring_abi_version: u32,
    /// Lanes of the ring: at most this many threads recorded at once.
    pub lane_count: u32,
    /// Records per lane: how far a thread could run ahead of the collector before dropping.
    pub lane_capacity: u32,
}

/// One process image (a new process, or a new program after exec in the same pid).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// Parent process id when the image started.
    pub ppid: u32,
    /// Command line, one element per argument (lossily UTF-8).
    pub argv: Vec<String>,
    /// CLOCK_MONOTONIC ns when the library started in the image.
    pub start_ns: u64,
    /// A fork child: it starts with its parent's open files.
    pub forked: bool,
    /// The rank its environment names (see [`crate::rank`]); children of a rank's process
    /// carry the same (appended in format 1.4; `None` when reading older files).
    pub rank: Option<RankInfo>,
    /// The [`NodeInfo::node`] the process ran on: 0 in a run of one collector (appended in
    /// format 1.4).
    pub node: u32,
}

/// [`ProcessInfo`] as files before format 1.4 wrote it.
#[derive(Deserialize)]
pub(super) struct ProcessInfoV1_3 {
    pid: u32,
    ppid: u32,
    argv: Vec<String>,
    start_ns: u64,
    forked: bool,
}

impl From<ProcessInfoV1_3> for ProcessInfo {
    fn from(old: ProcessInfoV1_3) -> ProcessInfo {
        let ProcessInfoV1_3 { pid, ppid, argv, start_ns, forked } = old;
        ProcessInfo { pid, ppid, argv, start_ns, forked, rank: None, node: 0 }
    }
}

/// One node (one collector's `run.bin`) of a run that `mlprof merge` put together: where its
/// times and pids went on the merged axis, and how well that is known.
///
/// Times of the node's frames were shifted by `offset_ns` (its CLOCK_MONOTONIC → the merged
/// axis, which is the reference node's CLOCK_MONOTONIC); pids and tids by `pid_offset` when
/// they collided with another node's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The index that [`ProcessInfo::node`] refers to (the input's position, from 0).
    pub node: u32,
    /// The node's host name (its [`RunInfo::host`]).
    pub host: String,
    /// The file it came from, as given to `mlprof merge`.
    pub source: String,
    /// The node's own [`RunInfo::start_mono_ns`] (its clock, before the shift).
    pub start_mono_ns: u64,
    /// The node's own [`RunInfo::start_realtime_ns`].
    pub start_realtime_ns: u64,
    /// Added to every time of the node.
    pub offset_ns: i64,
    /// What the realtime anchors alone gave as `offset_ns` (the first guess).
    pub realtime_offset_ns: i64,
    /// Added to every pid and tid of the node (0 unless they collided).
    pub pid_offset: u32,
    /// How `offset_ns` was found: `reference` (the axis itself), `collectives` (matched
    /// collective ends), or `realtime` (no collective to match: the anchors only).
    pub alignment: String,
    /// The node it was aligned against (itself for the reference).
    pub aligned_to: u32,
    /// Collective pairs matched with that node.
    pub matched: u64,
    /// Residual skew: the interquartile range of the matched pairs' end differences after
    /// the shift, ns; `None` without matches.
    pub residual_ns: Option<u64>,
}

/// How a process ended, from its own exit call or from the launcher's wait.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessExit {
    /// Process id.
    pub pid: u32,
    /// CLOCK_MONOTONIC ns of the exit call, or of the launcher seeing the process end.
    pub time_ns: u64,
    /// Exit code when known (exit/_exit seen, or waited for by the launcher).
    pub exit_code: Option<i32>,
    /// Terminating signal when the launcher saw one.
    pub signal: Option<i32>,
}

/// A recorded thread, written for each lane claim the collector accepts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// Process id.
    pub pid: u32,
    /// Kernel thread id.
    pub tid: u32,
    /// The thread's `comm` when the collector saw the claim (empty if it was already gone).
    pub name: String,
}

/// Cumulative counters of an aggregated call on one thread, as of `time_ns`. Each `stream`
/// (one claim of a ring lane by one thread) reports running totals; the last sample of a
/// stream is its final value, and a thread's total is the sum over its streams.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AggregateSample {
    /// The stream (lane claim) the counters belong to, numbered from 1 in the file.
    pub stream: u64,
    /// Process id of the stream's thread.
    pub pid: u32,
    /// Thread id of the stream's thread.
    pub tid: u32,
    /// The function id ([`crate::func::Func`]) counted.
    pub func: u16,
    /// The clock id for clock_gettime; `None` for gettimeofday or an unlisted clock.
    pub clock_id: Option<i32>,
    /// CLOCK_MONOTONIC ns when the counters were read.
    pub time_ns: u64,
    /// Calls made, cumulative.
    pub count: u64,
    /// Calls whose duration was measured, and the sum of those durations.
    pub timed: u64,
    /// Sum of the measured durations, ns.
    pub timed_ns: u64,
}

/// Cumulative drop counters, as of `time_ns`: per stream, plus `stream == 0` for records that
/// found no free lane. Last value per stream wins; the run total is the sum.
///
/// Why a record was lost: stream 0 counts calls that found no lane (every lane taken, or the
/// shm filesystem could back no more); on a stream, `interrupted` counts calls a signal handler
/// made while the thread was writing a record, and `dropped - interrupted` calls that found
/// the lane full.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DropSample {
    /// The stream (lane claim), or 0 for records that found no lane.
    pub stream: u64,
    /// Process id of the stream's thread (0 for stream 0).
    pub pid: u32,
    /// Thread id of the stream's thread (0 for stream 0).
    pub tid: u32,
    /// CLOCK_MONOTONIC ns when the counter was read.
    pub time_ns: u64,
    /// Records lost, cumulative, whatever the reason.
    pub dropped: u64,
    /// Of `dropped`, the calls a signal handler made while its thread was writing a record
    /// (appended in format 1.3; 0 when reading older files).
    pub interrupted: u64,
}

/// [`DropSample`] as files before format 1.3 wrote it.
#[derive(Deserialize)]
pub(super) struct DropSampleV1_2 {
    stream: u64,
    pid: u32,
    tid: u32,
    time_ns: u64,
    dropped: u64,
}

impl From<DropSampleV1_2> for DropSample {
    fn from(old: DropSampleV1_2) -> DropSample {
        let DropSampleV1_2 { stream, pid, tid, time_ns, dropped } = old;
        DropSample { stream, pid, tid, time_ns, dropped, interrupted: 0 }
    }
}

/// The name of a GPU function handle (a kernel) in process `pid`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SymbolInfo {
    /// Process id the handle is valid in.
    pub pid: u32,
    /// The handle as GPU launch records carry it ([`crate::record::GpuCall::object`]).
    pub handle: u64,
    /// String id of the name (mangled as the library reports it; tools demangle).
    pub name: u64,
}

/// The run's totals, the last frame of a cleanly finished file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    /// CLOCK_MONOTONIC ns when the collector finished.
    pub end_ns: u64,
    /// Events written in [`FRAME_EVENTS`] frames.
    pub events: u64,
    /// Records lost in total (full lanes, no lane, strings that did not fit).
    pub dropped: u64,
}

/// One decoded frame.
#[derive(Debug)]
pub enum Frame<'a> {
    /// [`FRAME_RUN_INFO`].
    RunInfo(RunInfo),
    /// [`FRAME_STRING`].
    String {
        /// The string's id ([`crate::string_id`] of its bytes).
        id: u64,
        /// The bytes (not necessarily UTF-8), borrowed from the reader until the next call.
        bytes: &'a [u8],
    },
    /// [`FRAME_PROCESS`].
    Process(ProcessInfo),
    /// [`FRAME_PROCESS_EXIT`].
    ProcessExit(ProcessExit),
    /// [`FRAME_EVENTS`]; borrowed from the reader's buffer until the next call.
    Events(&'a [Event]),
    /// [`FRAME_AGGREGATES`].
    Aggregates(Vec<AggregateSample>),
    /// [`FRAME_DROPS`].
    Drops(Vec<DropSample>),
    /// [`FRAME_THREAD`].
    Thread(ThreadInfo),
    /// [`FRAME_SYMBOL`].
    Symbol(SymbolInfo),
    /// [`FRAME_NODE`].
    Node(NodeInfo),
    /// [`FRAME_GPU_ACTIVITY`].
    GpuActivity(Vec<GpuActivity>),
    /// [`FRAME_END`].
    End(RunEnd),
    /// [`FRAME_ENERGY_DEVICE`].
    EnergyDevice(EnergyDevice),
    /// [`FRAME_ENERGY_SAMPLES`].
    EnergySamples(Vec<EnergySample>),
    /// [`FRAME_ENERGY_NOTE`].
    EnergyNote(EnergyNote),
    /// [`crate::site::FRAME_SITE`] (since 1.6).
    Site(crate::site::SiteInfo),
    /// [`crate::site::FRAME_EVENT_SITES`] (since 1.6): the site id of each event of the events
    /// frame returned just before.
    EventSites(Vec<u32>),
    /// [`crate::sample::FRAME_MODULE`] (since 1.7).
    Module(crate::sample::ModuleInfo),
    /// [`crate::sample::FRAME_STACK`] (since 1.7).
    Stack(crate::sample::StackInfo),
    /// [`crate::sample::FRAME_SAMPLES`] (since 1.7).
    Samples(Vec<crate::sample::CpuSample>),
    /// [`crate::sample::FRAME_SAMPLING`] (since 1.7).
    Sampling(crate::sample::SamplingInfo),
    /// [`crate::sample::FRAME_PYTHON`] (since 1.8).
    PythonFrame(crate::sample::PythonFrameInfo),
    /// [`crate::range::FRAME_CAPTURE`] (since 1.9).
    Capture(crate::range::CaptureInfo),
    /// [`crate::range::FRAME_RANGE_EDGE`] (since 1.9).
    RangeEdge(crate::range::RangeEdge),
}
