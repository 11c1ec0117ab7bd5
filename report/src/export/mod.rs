//! `mlprof export --parquet DIR RUN.bin...`: runs as Hive-partitioned Parquet tables, for
//! the engines that query many runs at once (DuckDB, Spark, Dask, Polars). We write files;
//! querying is theirs.
//!
//! ```text
//! DIR/events/run=<id>/rank=<r>/part-0.parquet      file calls (C library)
//! DIR/spans/run=<id>/rank=<r>/part-0.parquet       ITT tasks, frames, markers: ops, phases, DataLoader
//! DIR/gpu_calls/run=<id>/rank=<r>/part-0.parquet   CUDA runtime, driver and NCCL calls
//! DIR/processes/run=<id>/part-0.parquet            one row per process image
//! DIR/files/run=<id>/part-0.parquet                per-path totals
//! DIR/energy/run=<id>/part-0.parquet               energy and device samples
//! DIR/runs/run=<id>/part-0.parquet                 one row: the run itself
//! ```
//!
//! `run` and `rank` are partition columns: they are in the paths, not in the files (an engine
//! reading with Hive partitioning adds them as columns). `rank` is `none` for processes
//! without one, so engines type it as a string. The run id is the run's start time (UTC)
//! and a hash of its identity (host, clocks, session): exports of different runs into one
//! folder never meet, and exporting the same run again replaces its own files.
//!
//! Times are ns on the run's axis (CLOCK_MONOTONIC of the recording host, or of the merged
//! run's reference node); `runs.start_realtime_ns − runs.start_mono_ns` converts them to Unix
//! time. Memory is bounded: rows are buffered per table up to a fixed count and written as
//! row groups, the metadata of the run aside.

mod dictionary;
mod table;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel, sync_channel};

use bytes::Bytes;
use mlprof_format::energy::{EnergyDevice, EnergySample};
use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::{Event, FLAG_NESTED, GpuCall, IttSpan};
use mlprof_format::runfile::Frame;
use rustc_hash::FxHashMap;

use crate::run::{self, FdCache, FdIntervals, PathIndex, RunMeta, bytes_moved};
use table::{Kind, Spec, Symbols, Table, col, delta, dictionary, opt, plain};

const EVENTS: &[Spec] = &[
    col("name", Kind::Str),
    col("pid", Kind::I32),
    col("tid", Kind::I32),
    delta("start_ns"),
    delta("dur_ns"),
    col("fd", Kind::I32),
    dictionary("bytes"),
    dictionary("ret"),
    col("errno", Kind::I32),
    opt("path", Kind::Str),
];

const SPANS: &[Spec] = &[
    col("name", Kind::Str),
    col("domain", Kind::Str),
    col("kind", Kind::Str),
    col("pid", Kind::I32),
    col("tid", Kind::I32),
    delta("start_ns"),
    plain("dur_ns", Kind::I64),
    col("depth", Kind::I32),
    plain("id", Kind::I64),
    plain("parent", Kind::I64),
];

const GPU_CALLS: &[Spec] = &[
    col("name", Kind::Str),
    col("pid", Kind::I32),
    col("tid", Kind::I32),
    delta("start_ns"),
    plain("dur_ns", Kind::I64),
    col("device", Kind::I32),
    col("status", Kind::I32),
    col("stream", Kind::I64),
    col("object", Kind::I64),
    col("bytes", Kind::I64),
    col("nested", Kind::Bool),
    opt("kernel", Kind::Str),
];

const PROCESSES: &[Spec] = &[
    col("pid", Kind::I32),
    col("ppid", Kind::I32),
    col("exec_index", Kind::I32),
    opt("rank", Kind::I32),
    opt("local_rank", Kind::I32),
    opt("world_size", Kind::I32),
    opt("local_world_size", Kind::I32),
    opt("node_rank", Kind::I32),
    opt("rank_role", Kind::Str),
    opt("rank_main_pid", Kind::I32),
    col("node", Kind::I32),
    col("host", Kind::Str),
    col("cmdline", Kind::Str),
    col("forked", Kind::Bool),
    col("start_ns", Kind::I64),
    opt("exit_code", Kind::I32),
    opt("signal", Kind::I32),
];

const FILES: &[Spec] = &[
    col("path", Kind::Str),
    col("opens", Kind::I64),
    col("calls", Kind::I64),
    col("bytes_read", Kind::I64),
    col("bytes_written", Kind::I64),
    col("total_ns", Kind::I64),
];

const ENERGY: &[Spec] = &[
    col("device", Kind::I32),
    col("device_name", Kind::Str),
    col("device_kind", Kind::Str),
    col("in_run", Kind::Bool),
    delta("time_ns"),
    opt("energy_uj", Kind::I64),
    opt("power_mw", Kind::I32),
    opt("gpu_util", Kind::I32),
    opt("mem_util", Kind::I32),
    opt("sm_clock_mhz", Kind::I32),
    opt("mem_used_bytes", Kind::I64),
    opt("temperature_c", Kind::I32),
];

const RUNS: &[Spec] = &[
    col("source", Kind::Str),
    col("host", Kind::Str),
    col("command", Kind::Str),
    col("session", Kind::Str),
    col("start_mono_ns", Kind::I64),
    col("start_realtime_ns", Kind::I64),
    col("duration_ns", Kind::I64),
    col("events", Kind::I64),
    col("dropped", Kind::I64),
    col("nodes", Kind::I32),
    col("truncated", Kind::Bool),
];

/// What one run's export wrote.
#[derive(Debug, Clone, Default)]
pub struct Exported {
    pub run_id: String,
    /// Rows per table.
    pub rows: Vec<(&'static str, u64)>,
    /// Parquet bytes of the events table (for bytes per event).
    pub events_bytes: u64,
    /// Parquet bytes of all tables.
    pub bytes: u64,
    pub warnings: Vec<String>,
    /// Why the run was read twice (its fd histories learned in a first pass): a change of an
    /// fd came too late for the single pass.
    pub second_pass: Option<String>,
}

/// `YYYYmmddTHHMMSS` (UTC) of Unix time `ns`.
fn utc_stamp(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + (month <= 2) as i64;
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}", rem / 3600, rem / 60 % 60, rem % 60)
}

/// The run's id in the partition paths: start time and a hash of what identifies it.
pub fn run_id(meta: &RunMeta) -> String {
    let info = &meta.info;
    let identity = format!(
        "{}\0{}\0{}\0{}\0{}",
        info.host, info.session, info.start_mono_ns, info.start_realtime_ns, info.mlprof_version
    );
    let hash = mlprof_format::string_id(identity.as_bytes());
    format!("{}-{:08x}", utc_stamp(info.start_realtime_ns), hash as u32)
}

fn i64_of(v: u64) -> i64 {
    v as i64
}

/// Per-path totals, as `mlprof summary` counts them.
#[derive(Default)]
struct FileTotals {
    opens: u64,
    calls: u64,
    bytes_read: u64,
    bytes_written: u64,
    total_ns: u64,
}

/// A path met in the run: its string id, its symbol, its totals.
struct PathSlot {
    id: u64,
    symbol: u32,
    totals: FileTotals,
}

/// The paths met, by string id and by fd-history path index.
#[derive(Default)]
struct Paths {
    slots: Vec<PathSlot>,
    by_id: FxHashMap<u64, u32>,
    /// Slot + 1 by [`PathIndex`] (0: not met yet).
    by_index: Vec<u32>,
}

impl Paths {
    /// The slot of path string `id`.
    fn of_id(&mut self, meta: &RunMeta, symbols: &mut Symbols, id: u64) -> u32 {
        *self.by_id.entry(id).or_insert_with(|| {
            let text = meta.strings.get(&id).cloned().unwrap_or_default();
            let symbol = symbols.add(Bytes::from(text));
            self.slots.push(PathSlot { id, symbol, totals: FileTotals::default() });
            (self.slots.len() - 1) as u32
        })
    }

    /// The slot of the path of fd-history index `index`.
    #[inline]
    fn of_index(
        &mut self,
        meta: &RunMeta,
        symbols: &mut Symbols,
        fds: &FdIntervals,
        index: PathIndex,
    ) -> u32 {
        let at = index as usize;
        if let Some(&slot) = self.by_index.get(at)
            && slot > 0
        {
            return slot - 1;
        }
        let slot = self.of_id(meta, symbols, fds.path_id(index));
        if at >= self.by_index.len() {
            self.by_index.resize(at + 1, 0);
        }
        self.by_index[at] = slot + 1;
        slot
    }

    fn at(&mut self, slot: u32) -> (u32, &mut FileTotals) {
        let slot = &mut self.slots[slot as usize];
        (slot.symbol, &mut slot.totals)
    }
}

/// An image's partitions in events, spans and gpu_calls.
type Parts = (usize, usize, usize);

/// Slots of [`PidPartitions`]' direct-mapped cache: a merged run's batches interleave the
/// events of many processes (64 ranks and their workers), and a hash lookup at every change
/// of pid was 4 % of an export's CPU.
const PID_CACHE_SLOTS: usize = 256;

/// The partitions of each process image, by pid.
struct PidPartitions {
    /// (pid, index in `pids`) by pid modulo the size; `u32::MAX` in an empty slot's pid.
    recent: Box<[(u32, u32); PID_CACHE_SLOTS]>,
    by_pid: FxHashMap<u32, usize>,
    /// Per pid: its images' start times, and their partitions.
    pids: Vec<(Vec<u64>, Vec<Parts>)>,
}

impl Default for PidPartitions {
    fn default() -> Self {
        PidPartitions {
            recent: Box::new([(u32::MAX, 0); PID_CACHE_SLOTS]),
            by_pid: FxHashMap::default(),
            pids: Vec::new(),
        }
    }
}

impl PidPartitions {
    /// The partitions of the image of `pid` running at `time`; `partitions` makes them for
    /// a rank (`none` for an image without one).
    #[inline]
    fn get(
        &mut self,
        meta: &RunMeta,
        pid: u32,
        time: u64,
        mut partitions: impl FnMut(&str) -> Parts,
    ) -> Parts {
        let cached = self.recent[pid as usize % PID_CACHE_SLOTS];
        let at = match cached {
            (cached, at) if cached == pid => at as usize,
            _ => {
                let at = *self.by_pid.entry(pid).or_insert_with(|| {
                    let images = meta.images.get(&pid).map_or(&[][..], Vec::as_slice);
                    let rank = |image: Option<&run::Image>| {
                        image
                            .and_then(|i| i.info.rank.as_ref())
                            .map_or("none".to_string(), |r| r.rank.to_string())
                    };
                    let starts = images.iter().map(|i| i.info.start_ns).collect();
                    let mut parts: Vec<_> = images.iter().map(|i| partitions(&rank(Some(i)))).collect();
                    if parts.is_empty() {
                        parts.push(partitions(&rank(None)));
                    }
                    self.pids.push((starts, parts));
                    self.pids.len() - 1
                });
                self.recent[pid as usize % PID_CACHE_SLOTS] = (pid, at as u32);
                at
            }
        };
        let (starts, parts) = &self.pids[at];
        // As `RunMeta::image_at`: the latest image that started before `time`, else the first.
        let image = if starts.len() <= 1 { 0 } else { starts.iter().rposition(|&s| s <= time).unwrap_or(0) };
        parts[image]
    }
}

/// Events whose fd changes (opens, closes, duplicates) are noted before the first of them is
/// exported: the collector writes records in drain order, not causal order (as `mlprof
/// convert`, [`crate::convert::LOOKAHEAD_EVENTS`]).
const LOOKAHEAD_EVENTS: usize = crate::convert::LOOKAHEAD_EVENTS;

/// How a pass over the events ended.
enum Pass {
    Done(Exported),
    /// A streaming fd history may have named a call's file wrongly (why): nothing was written.
    Inexact(String),
}

/// A frame read ahead, waiting for its turn.
enum Item {
    /// Events, and (streaming) the path index each open with a path gave its fd (`None`: the
    /// open failed), in order: found when the open was noted, not hashed again.
    Events(Vec<Event>, Vec<Option<PathIndex>>),
    EnergyDevice(EnergyDevice),
    EnergySamples(Vec<EnergySample>),
}

/// What the reader thread hands on, in file order.
enum Read {
    /// An events frame's records (the reader's own buffer, not a copy).
    Events(Vec<Event>),
    Other(Item),
    /// The end of the data: the reader's warnings, and how many frames of unknown kinds it
    /// skipped.
    End {
        warnings: Vec<String>,
        skipped_frames: u64,
    },
}

/// What [`read_ahead`] hands on: a frame, or why reading stopped.
type Frames = Receiver<Result<Read, String>>;

/// Frames a reader thread reads ahead of the export (events frames are up to a few MiB).
const READ_AHEAD_FRAMES: usize = 2;

/// Reads the frames of `path` on a thread of its own, which the export needs (events and
/// energy frames; the metadata was read before): the system calls that copy the file from
/// the page cache then run beside the export rather than in it. Event buffers sent back on
/// the second channel are filled again. The thread stops at the end of the data, at an
/// error (sent on), or when the receiver is dropped.
fn read_ahead(path: &Path) -> Result<(Frames, Sender<Vec<Event>>), String> {
    let mut reader = run::open(path)?;
    let path = path.to_path_buf();
    let (frames, receiver) = sync_channel(READ_AHEAD_FRAMES);
    let (spare, spares) = channel::<Vec<Event>>();
    std::thread::Builder::new()
        .name("run-reader".into())
        .spawn(move || {
            loop {
                let read = match reader.next_frame() {
                    Err(e) => Err(format!("{}: {e}", path.display())),
                    Ok(None) => Ok(Read::End {
                        warnings: reader.warnings().to_vec(),
                        skipped_frames: reader.skipped_frames(),
                    }),
                    Ok(Some(Frame::Events(_))) => {
                        Ok(Read::Events(reader.take_events(spares.try_recv().unwrap_or_default())))
                    }
                    Ok(Some(Frame::EnergyDevice(d))) => Ok(Read::Other(Item::EnergyDevice(d))),
                    Ok(Some(Frame::EnergySamples(s))) => Ok(Read::Other(Item::EnergySamples(s))),
                    Ok(Some(_)) => continue,
                };
                let last = !matches!(read, Ok(Read::Events(_) | Read::Other(_)));
                if frames.send(read).is_err() || last {
                    break;
                }
            }
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    Ok((receiver, spare))
}

/// Exports one run into `dir` (see the module documentation).
///
/// One pass over the file: the metadata frames first (event frames skipped), then the events,
/// which files their fds named learned from the events themselves, read a little ahead
/// ([`FdIntervals::streaming`]). Should a change of an fd arrive too late for that (see
/// [`FdIntervals::inexact`]), what was written is dropped and the export starts over with
/// the run's complete fd histories, from a full first pass: the rows are always the same.
///
/// `on_progress` is called after each batch of events (a few hundred thousand), from the
/// start again should the export start over.
pub fn export_parquet(
    path: &Path,
    dir: &Path,
    on_progress: &mut dyn FnMut(&ExportProgress),
) -> Result<Exported, String> {
    export_looking_ahead(path, dir, LOOKAHEAD_EVENTS, on_progress)
}

/// How far an export is.
#[derive(Clone, Copy, Debug)]
pub struct ExportProgress {
    /// Events exported so far.
    pub events: u64,
    /// The run's events, when its end record says (a run cut short has none).
    pub total: Option<u64>,
}

/// [`export_parquet`], noting fd changes `lookahead` events ahead.
fn export_looking_ahead(
    path: &Path,
    dir: &Path,
    lookahead: usize,
    on_progress: &mut dyn FnMut(&ExportProgress),
) -> Result<Exported, String> {
    let meta = RunMeta::load_without_events(path)?;
    let fds = FdIntervals::streaming(meta.images.values().flatten());
    match export_pass(path, dir, &meta, fds, Some(lookahead), on_progress)? {
        Pass::Done(exported) => Ok(exported),
        Pass::Inexact(reason) => {
            let mut meta = RunMeta::load(path)?;
            let fds = std::mem::take(&mut meta.fds);
            match export_pass(path, dir, &meta, fds, None, on_progress)? {
                Pass::Done(exported) => Ok(Exported { second_pass: Some(reason), ..exported }),
                Pass::Inexact(reason) => Err(format!("a complete fd history is exact, yet: {reason}")),
            }
        }
    }
}

/// One pass over the events of `path` with fd histories `fds`: streaming ones noted
/// `lookahead` events ahead, or complete ones (`None`), taken out of `meta`, which the lookups
/// read.
fn export_pass(
    path: &Path,
    dir: &Path,
    meta: &RunMeta,
    mut fds: FdIntervals,
    lookahead: Option<usize>,
    on_progress: &mut dyn FnMut(&ExportProgress),
) -> Result<Pass, String> {
    let mut progress = ExportProgress { events: 0, total: meta.end.as_ref().map(|e| e.events) };
    // Looked up through a cache: most calls on an fd fall in the interval of the one before.
    let mut fd_cache = FdCache::default();
    let id = run_id(meta);
    let io_err = |e: std::io::Error| format!("writing {}: {e}", dir.display());
    let tables = ["events", "spans", "gpu_calls", "processes", "files", "energy", "runs"];
    let run_dir = |table: &str| dir.join(table).join(format!("run={id}"));
    // Exporting a run again replaces its files, never another run's.
    for table in tables {
        match std::fs::remove_dir_all(run_dir(table)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_err(e)),
            _ => {}
        }
    }
    let by_rank = Some("rank");
    let mut events = Table::new("events", EVENTS, &run_dir("events"), by_rank).map_err(io_err)?;
    let mut spans = Table::new("spans", SPANS, &run_dir("spans"), by_rank).map_err(io_err)?;
    let mut gpu = Table::new("gpu_calls", GPU_CALLS, &run_dir("gpu_calls"), by_rank).map_err(io_err)?;
    let mut energy = Table::new("energy", ENERGY, &run_dir("energy"), None).map_err(io_err)?;

    // Every string once, as a Parquet value; rows hold its index.
    let mut symbols = Symbols::default();
    let mut by_string: FxHashMap<u64, u32> = FxHashMap::default();
    let mut string = |symbols: &mut Symbols, id: u64| -> u32 {
        *by_string
            .entry(id)
            .or_insert_with(|| symbols.add(Bytes::from(meta.strings.get(&id).cloned().unwrap_or_default())))
    };
    let text = |symbols: &mut Symbols, text: &str| symbols.add(Bytes::copy_from_slice(text.as_bytes()));
    // A function, its API, class and name by its id (an array: looked up for every event).
    let mut funcs: Vec<Option<(Func, Api, Class, u32)>> =
        vec![None; Func::ALL.iter().map(|f| *f as usize + 1).max().unwrap_or(0)];
    for &f in Func::ALL {
        let name = symbols.add(Bytes::from_static(f.name().as_bytes()));
        funcs[f as usize] = Some((f, f.api(), f.class(), name));
    }
    // The partitions of each process's images, by pid (the last pid remembered: a batch holds
    // runs of one thread's events).
    let mut pids = PidPartitions::default();
    // The paths met, each with its symbol and totals: found from an fd call's path index by
    // an array, from an open's path string id by a hash.
    let mut paths = Paths::default();
    let mut kernels: FxHashMap<(u32, u64), u32> = FxHashMap::default();
    let kinds: [u32; 5] = ["task", "frame", "marker", "pause", "resume"].map(|k| text(&mut symbols, k));
    let mut devices: HashMap<u32, (u32, u32, bool)> = HashMap::new();
    let unknown_device = (text(&mut symbols, "?"), text(&mut symbols, "?"), false);
    let energy_part = energy.partition("");

    let (reader, spare_events) = read_ahead(path)?;
    let mut window: VecDeque<Item> = VecDeque::new();
    // Lists of opens' path indexes, for batches to come.
    let mut spare: Vec<Vec<Option<PathIndex>>> = Vec::new();
    // Events in `window`; what the reader said at the end of the file.
    let (mut ahead, mut read_all) = (0, None);
    loop {
        while read_all.is_none() && (window.is_empty() || lookahead.is_some_and(|n| ahead <= n)) {
            let frame = reader.recv().unwrap_or_else(|_| Err("the run reader thread stopped".into()))?;
            match frame {
                Read::End { warnings, skipped_frames } => read_all = Some((warnings, skipped_frames)),
                Read::Events(batch) => {
                    let mut opens = spare.pop().unwrap_or_default();
                    opens.clear();
                    if lookahead.is_some() {
                        let opens_path = |event: &Event| {
                            event.arg2 != 0
                                && matches!(
                                    funcs.get(event.kind as usize),
                                    Some(Some((_, Api::Libc, Class::Open, _)))
                                )
                        };
                        for (at, event) in batch.iter().enumerate() {
                            // An open's path index is a cache miss over a run's paths.
                            if let Some(ahead) = batch.get(at + 16).filter(|e| opens_path(e)) {
                                fds.prefetch_path(ahead.arg2);
                            }
                            if let Some(&Some((
                                _,
                                Api::Libc,
                                class @ (Class::Open | Class::Close | Class::Fd),
                                _,
                            ))) = funcs.get(event.kind as usize)
                            {
                                let index = fds.observe_streaming(meta, event, &mut fd_cache);
                                if class == Class::Open && event.arg2 != 0 {
                                    opens.push(index);
                                }
                            }
                        }
                    }
                    ahead += batch.len();
                    window.push_back(Item::Events(batch, opens));
                }
                Read::Other(item) => window.push_back(item),
            }
        }
        let Some(item) = window.pop_front() else { break };
        match item {
            Item::Events(batch, opens) => {
                ahead -= batch.len();
                let mut opens_noted = opens.iter();
                for event in &batch {
                    let Some(&Some((func, api, class, name))) = funcs.get(event.kind as usize) else {
                        continue;
                    };
                    let (events_part, spans_part, gpu_part) =
                        pids.get(meta, event.pid, event.start, |rank| {
                            (events.partition(rank), spans.partition(rank), gpu.partition(rank))
                        });
                    match api {
                        Api::Libc => {
                            let slot = match class {
                                // An open names its own path: by the dense index the fd
                                // histories gave it (an array), unless no fd ever named it.
                                Class::Open if event.arg2 != 0 => {
                                    let index = match lookahead {
                                        Some(_) => opens_noted.next().copied().flatten(),
                                        None => fds.path_index(event.arg2),
                                    };
                                    Some(match index {
                                        Some(index) => paths.of_index(meta, &mut symbols, &fds, index),
                                        None => paths.of_id(meta, &mut symbols, event.arg2),
                                    })
                                }
                                Class::Open | Class::Clock => None,
                                _ if event.fd < 0 => None,
                                _ => fds
                                    .lookup_cached(meta, event.pid, event.fd, event.start, &mut fd_cache)
                                    .map(|index| paths.of_index(meta, &mut symbols, &fds, index)),
                            };
                            let bytes = bytes_moved(func, event);
                            let path = slot.map(|slot| {
                                let (symbol, file) = paths.at(slot);
                                file.calls += 1;
                                file.total_ns += event.dur;
                                match class {
                                    Class::Open if !event.is_error() => file.opens += 1,
                                    Class::Read => file.bytes_read += bytes,
                                    Class::Write => file.bytes_written += bytes,
                                    _ => {}
                                }
                                symbol
                            });
                            events
                                .push(&symbols, events_part, |row| {
                                    row.str(name)
                                        .i32(event.pid as i32)
                                        .i32(event.tid as i32)
                                        .i64(i64_of(event.start))
                                        .i64(i64_of(event.dur))
                                        .i32(event.fd)
                                        .i64(i64_of(bytes))
                                        .i64(event.ret)
                                        .i32(event.errno)
                                        .opt_str(path);
                                })
                                .map_err(io_err)?;
                        }
                        Api::Itt => {
                            let span = IttSpan::from_event(event);
                            let task = string(&mut symbols, span.name);
                            let domain = string(&mut symbols, span.domain);
                            let kind = match func {
                                Func::IttTask => kinds[0],
                                Func::IttFrame => kinds[1],
                                Func::IttMarker => kinds[2],
                                Func::IttPause => kinds[3],
                                _ => kinds[4],
                            };
                            spans
                                .push(&symbols, spans_part, |row| {
                                    row.str(task)
                                        .str(domain)
                                        .str(kind)
                                        .i32(span.pid as i32)
                                        .i32(span.tid as i32)
                                        .i64(i64_of(span.start))
                                        .i64(i64_of(span.dur))
                                        .i32(span.depth)
                                        .i64(span.id as i64)
                                        .i64(span.parent as i64);
                                })
                                .map_err(io_err)?;
                        }
                        Api::CudaRuntime | Api::CudaDriver | Api::Nccl => {
                            let call = GpuCall::from_event(event);
                            let kernel = (class == Class::Launch).then(|| {
                                *kernels.entry((event.pid, call.object)).or_insert_with(|| {
                                    let name = meta.kernel_name(event.pid, call.object);
                                    symbols.add(Bytes::from(name.into_bytes()))
                                })
                            });
                            gpu.push(&symbols, gpu_part, |row| {
                                row.str(name)
                                    .i32(call.pid as i32)
                                    .i32(call.tid as i32)
                                    .i64(i64_of(call.start))
                                    .i64(i64_of(call.dur))
                                    .i32(call.device)
                                    .i32(call.status)
                                    .i64(call.stream as i64)
                                    .i64(call.object as i64)
                                    .i64(i64_of(bytes_moved(func, event)))
                                    .bool(call.flags & FLAG_NESTED != 0)
                                    .opt_str(kernel);
                            })
                            .map_err(io_err)?;
                        }
                    }
                }
                progress.events += batch.len() as u64;
                on_progress(&progress);
                // Its records are not cleared: the reader overwrites them with the next frame's.
                let _ = spare_events.send(batch);
                spare.push(opens);
                if let Some(reason) = fds.inexact() {
                    // The tables, dropped unclosed, remove the files they began.
                    return Ok(Pass::Inexact(reason.to_string()));
                }
            }
            Item::EnergyDevice(d) => {
                let (name, kind) = (text(&mut symbols, &d.name), text(&mut symbols, &d.kind));
                devices.insert(d.id, (name, kind, d.in_run));
            }
            Item::EnergySamples(samples) => {
                for s in samples {
                    let (name, kind, in_run) = *devices.get(&s.device).unwrap_or(&unknown_device);
                    energy
                        .push(&symbols, energy_part, |row| {
                            row.i32(s.device as i32)
                                .str(name)
                                .str(kind)
                                .bool(in_run)
                                .i64(i64_of(s.time_ns))
                                .opt_i64(s.energy_uj.map(i64_of))
                                .opt_i32(s.power_mw.map(|v| v as i32))
                                .opt_i32(s.gpu_util.map(i32::from))
                                .opt_i32(s.mem_util.map(i32::from))
                                .opt_i32(s.sm_clock_mhz.map(|v| v as i32))
                                .opt_i64(s.mem_used_bytes.map(i64_of))
                                .opt_i32(s.temperature_c.map(|v| v as i32));
                        })
                        .map_err(io_err)?;
                }
            }
        }
    }
    // The small tables are written while the rest is built; the events table, whose last
    // rows take longest, after them (closing a table waits for its writer to take each job).
    for table in [&mut spans, &mut gpu, &mut energy] {
        table.close(&symbols).map_err(io_err)?;
    }
    let (mut warnings, skipped_frames) = read_all.unwrap_or_default();
    if skipped_frames > 0 {
        warnings.push(format!("{skipped_frames} frames of kinds this mlprof does not know were skipped"));
    }

    let mut processes = Table::new("processes", PROCESSES, &run_dir("processes"), None).map_err(io_err)?;
    let processes_part = processes.partition("");
    let (main_role, child_role) = (text(&mut symbols, "main"), text(&mut symbols, "child"));
    let mut images: Vec<(u32, usize)> =
        meta.images.iter().flat_map(|(&pid, images)| (0..images.len()).map(move |i| (pid, i))).collect();
    images.sort_by_key(|&(pid, i)| (meta.images[&pid][i].info.start_ns, pid, i));
    for (pid, index) in images {
        let image = &meta.images[&pid][index];
        let info = &image.info;
        let rank = info.rank.as_ref();
        let main = meta.rank_main(pid, index);
        let role = rank.map(|_| if main == Some(pid) { main_role } else { child_role });
        let host = text(&mut symbols, meta.host_of(info.node));
        let cmdline = text(&mut symbols, &info.argv.join(" "));
        processes
            .push(&symbols, processes_part, |row| {
                row.i32(pid as i32)
                    .i32(info.ppid as i32)
                    .i32(index as i32)
                    .opt_i32(rank.map(|r| r.rank as i32))
                    .opt_i32(rank.and_then(|r| r.local_rank).map(|v| v as i32))
                    .opt_i32(rank.and_then(|r| r.world_size).map(|v| v as i32))
                    .opt_i32(rank.and_then(|r| r.local_world_size).map(|v| v as i32))
                    .opt_i32(rank.and_then(|r| r.node_rank).map(|v| v as i32))
                    .opt_str(role)
                    .opt_i32(rank.and(main).map(|m| m as i32))
                    .i32(info.node as i32)
                    .str(host)
                    .str(cmdline)
                    .bool(info.forked)
                    .i64(i64_of(info.start_ns))
                    .opt_i32(image.exit.as_ref().and_then(|e| e.exit_code))
                    .opt_i32(image.exit.as_ref().and_then(|e| e.signal));
            })
            .map_err(io_err)?;
    }

    let mut file_table = Table::new("files", FILES, &run_dir("files"), None).map_err(io_err)?;
    let files_part = file_table.partition("");
    let mut paths: Vec<(String, FileTotals)> =
        paths.slots.into_iter().map(|slot| (meta.string(slot.id), slot.totals)).collect();
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, t) in &paths {
        let path = text(&mut symbols, path);
        file_table
            .push(&symbols, files_part, |row| {
                row.str(path)
                    .i64(i64_of(t.opens))
                    .i64(i64_of(t.calls))
                    .i64(i64_of(t.bytes_read))
                    .i64(i64_of(t.bytes_written))
                    .i64(i64_of(t.total_ns));
            })
            .map_err(io_err)?;
    }

    let mut runs = Table::new("runs", RUNS, &run_dir("runs"), None).map_err(io_err)?;
    let runs_part = runs.partition("");
    let end_ns = meta.end.as_ref().map_or(meta.info.start_mono_ns, |e| e.end_ns);
    let source = text(&mut symbols, &path.display().to_string());
    let host = text(&mut symbols, &meta.info.host);
    let command = text(&mut symbols, &meta.command_line());
    let session = text(&mut symbols, &meta.info.session);
    runs.push(&symbols, runs_part, |row| {
        row.str(source)
            .str(host)
            .str(command)
            .str(session)
            .i64(i64_of(meta.info.start_mono_ns))
            .i64(i64_of(meta.info.start_realtime_ns))
            .i64(i64_of(end_ns.saturating_sub(meta.info.start_mono_ns)))
            .i64(i64_of(meta.end.as_ref().map_or(0, |e| e.events)))
            .i64(i64_of(meta.dropped()))
            .i32(meta.nodes.len().max(1) as i32)
            .bool(meta.truncated);
    })
    .map_err(io_err)?;

    for table in [&mut processes, &mut file_table, &mut runs, &mut events] {
        table.close(&symbols).map_err(io_err)?;
    }
    let mut exported = Exported { run_id: id, warnings, ..Default::default() };
    for (name, table) in [
        ("events", events),
        ("spans", spans),
        ("gpu_calls", gpu),
        ("processes", processes),
        ("files", file_table),
        ("energy", energy),
        ("runs", runs),
    ] {
        let table = table.finish(&symbols).map_err(io_err)?;
        exported.rows.push((name, table.rows));
        exported.bytes += table.bytes;
        if name == "events" {
            exported.events_bytes = table.bytes;
        }
    }
    Ok(Pass::Done(exported))
}

/// Where `export_parquet` puts table `table` of run `id` (for messages and tests).
pub fn table_dir(dir: &Path, table: &str, id: &str) -> PathBuf {
    dir.join(table).join(format!("run={id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under `dir`, hidden ones too, sorted (none if `dir` does not exist).
    pub(super) fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut files = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    todo.push(path);
                } else {
                    files.push(path);
                }
            }
        }
        files.sort();
        files
    }

    /// Rows of every Parquet file under `dir` (sorted by path), each as its fields' text.
    pub(super) fn rows(dir: &Path) -> Vec<Vec<String>> {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let mut out = Vec::new();
        for file in files_under(dir) {
            let reader = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
            for row in reader.get_row_iter(None).unwrap() {
                out.push(row.unwrap().get_column_iter().map(|(_, f)| f.to_string()).collect());
            }
        }
        out
    }

    /// GPU calls (kernel names, from the run's symbols or the handle, and null for calls that
    /// launch nothing), ITT spans and energy samples (null readings) read back as written.
    #[test]
    fn gpu_calls_spans_and_energy_read_back() {
        use mlprof_format::energy::{EnergyDevice, EnergySample};
        use mlprof_format::record::Event;
        use mlprof_format::runfile::{ProcessInfo, RunEnd, RunInfo, RunWriter, SymbolInfo};

        let dir = std::env::temp_dir().join(format!("mlprof-export-gpu-{}", std::process::id()));
        let run = dir.join("run.bin");
        std::fs::create_dir_all(&dir).unwrap();
        let start = 1_000_000_000u64;
        let info = RunInfo { host: "h".into(), start_mono_ns: start, ..Default::default() };
        let mut w = RunWriter::create(&run, &info).unwrap();
        let (kernel, task, domain) = (1u64, 2u64, 3u64);
        w.write_string(kernel, b"_Z6kernelv").unwrap();
        w.write_string(task, b"forward").unwrap();
        w.write_string(domain, b"torch").unwrap();
        w.write_process(&ProcessInfo { pid: 7, ppid: 1, start_ns: start, ..Default::default() }).unwrap();
        w.write_symbol(&SymbolInfo { pid: 7, handle: 0xabc, name: kernel }).unwrap();
        let gpu = |func: Func, at: u64, object: u64| {
            GpuCall {
                kind: func as u16,
                pid: 7,
                tid: 7,
                start: start + at,
                dur: 10,
                object,
                ..Default::default()
            }
            .into_event()
        };
        let span = IttSpan {
            kind: Func::IttTask as u16,
            pid: 7,
            tid: 7,
            start: start + 5,
            dur: 100,
            id: 9,
            name: task,
            domain,
            ..Default::default()
        }
        .into_event();
        let read = Event {
            kind: Func::Read as u16,
            pid: 7,
            tid: 7,
            fd: -1,
            start: start + 50,
            ..Default::default()
        };
        w.write_events(&[
            gpu(Func::CudaLaunchKernel, 10, 0xabc),
            gpu(Func::CudaMemcpy, 20, 0),
            gpu(Func::CudaLaunchKernel, 30, 0xdef),
            span,
            read,
        ])
        .unwrap();
        w.write_energy_device(&EnergyDevice {
            id: 0,
            kind: "gpu".into(),
            name: "GPU 0".into(),
            in_run: true,
            ..Default::default()
        })
        .unwrap();
        w.write_energy_samples(&[
            EnergySample {
                device: 0,
                time_ns: start + 1,
                energy_uj: Some(5),
                power_mw: Some(70),
                ..Default::default()
            },
            EnergySample {
                device: 0,
                time_ns: start + 2,
                energy_uj: None,
                power_mw: None,
                ..Default::default()
            },
        ])
        .unwrap();
        w.finish(&RunEnd { end_ns: start + 1000, events: 5, dropped: 0 }).unwrap();

        let out = dir.join("parquet");
        let mut progress = Vec::new();
        let exported = export_parquet(&run, &out, &mut |p| progress.push((p.events, p.total))).unwrap();
        // After each batch: here one, of the 5 events the end record counts.
        assert_eq!(progress, [(5, Some(5))]);
        let table = |name: &str| rows(&table_dir(&out, name, &exported.run_id));
        let gpu_rows = table("gpu_calls");
        let kernels: Vec<&str> = gpu_rows.iter().map(|r| r[11].as_str()).collect();
        assert_eq!(kernels, ["\"kernel()\"", "null", "\"kernel@0xdef\""]);
        assert_eq!(gpu_rows[1][0], "\"cudaMemcpy\"");
        let spans = table("spans");
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0][..3], ["\"forward\"", "\"torch\"", "\"task\""]);
        let energy = table("energy");
        assert_eq!(energy.len(), 2);
        assert_eq!(
            (energy[0][1].as_str(), energy[0][5].as_str(), energy[0][6].as_str()),
            ("\"GPU 0\"", "5", "70")
        );
        assert_eq!((energy[1][5].as_str(), energy[1][6].as_str()), ("null", "null"));
        let events = table("events");
        assert_eq!((events.len(), events[0][9].as_str()), (1, "null"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A read recorded a batch before the open of its fd: read ahead, the open is known in
    /// time; not, the export starts over with the complete fd history, leaving no file of its
    /// first pass. Either way the read names the file.
    #[test]
    fn an_open_recorded_after_its_reads_names_them_all_the_same() {
        use crate::testing::{self, DATASET};

        let run = testing::write_late_open("export-late-open");
        let dir = std::env::temp_dir().join(format!("mlprof-export-late-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for lookahead in [LOOKAHEAD_EVENTS, 0] {
            let out = dir.join(format!("parquet-{lookahead}"));
            let exported = export_looking_ahead(run.path(), &out, lookahead, &mut |_| {}).unwrap();
            assert_eq!(exported.second_pass.is_some(), lookahead == 0, "{:?}", exported.second_pass);
            let events = rows(&table_dir(&out, "events", &exported.run_id));
            let path = format!("{DATASET:?}");
            assert_eq!(events.len(), 2);
            assert!(events.iter().all(|r| r[9] == path), "lookahead {lookahead}: {events:?}");
            let files = rows(&table_dir(&out, "files", &exported.run_id));
            assert_eq!(files, [[path, "1".into(), "2".into(), "7".into(), "0".into(), "1100".into()]]);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0), "19700101T000000");
        assert_eq!(utc_stamp(1_764_151_353 * 1_000_000_000), "20251126T100233");
        assert_eq!(utc_stamp(951_782_400 * 1_000_000_000), "20000229T000000");
    }
}
