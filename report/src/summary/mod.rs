//! `mlprof summary`: per-function call statistics for the whole process tree and per process
//! image, the files read and written, the GPU calls, the ITT spans and the data pipeline.
//! [`Summary::compute`] streams a run once and returns plain figures; [`json`] and [`text`]
//! render them.

mod gpu;
pub mod json;
pub(crate) mod ranks;
pub mod sites;
pub(crate) mod startup;
pub(crate) mod syscalls;
pub mod text;
mod timeline;

pub(crate) use gpu::GpuSummary;
pub(crate) use ranks::Ranks;
pub(crate) use startup::{Part, StartupRow};
pub(crate) use syscalls::SyscallView;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::rank::RankInfo;
use mlprof_format::runfile::{Frame, NodeInfo, ProcessExit};
use serde::Serialize;

use crate::pipeline::{DataPipeline, Pipeline, SpanRow};
use crate::run::{self, RunMeta, bytes_moved};

/// Calls of one function.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct CallStats {
    pub(crate) count: u64,
    pub(crate) errors: u64,
    pub(crate) total_ns: u64,
    pub(crate) bytes: u64,
}

impl CallStats {
    fn add(&mut self, other: &CallStats) {
        self.count += other.count;
        self.errors += other.errors;
        self.total_ns += other.total_ns;
        self.bytes += other.bytes;
    }
}

/// Function name → its calls.
pub(crate) type CallTable = BTreeMap<&'static str, CallStats>;

/// Everything `mlprof summary` reports about a run.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The launched command, or the attach session (for the text header).
    pub(crate) command_line: String,
    pub(crate) command: Vec<String>,
    pub(crate) host: String,
    pub(crate) clock_source: String,
    /// What the run-file reader had to say (a truncated tail, skipped frames).
    pub(crate) warnings: Vec<String>,
    /// Recorded events plus aggregated clock calls.
    pub(crate) events: u64,
    /// Events of function ids this build does not know (a newer recorder).
    pub(crate) unknown_events: u64,
    pub(crate) dropped: u64,
    /// `dropped` by why.
    pub(crate) drops: crate::run::DropReasons,
    pub(crate) truncated: bool,
    pub(crate) duration_ns: u64,
    /// Threads the run named.
    pub(crate) threads: usize,
    /// Process images in (start time, pid) order.
    pub(crate) processes: Vec<ProcessRow>,
    pub(crate) calls: CallTable,
    /// Most bytes moved first, then by path.
    pub(crate) files: Vec<FileRow>,
    /// `None` when the run made no CUDA or NCCL call.
    pub(crate) gpu: Option<GpuSummary>,
    /// ITT spans per (domain, name), most total time first.
    pub(crate) spans: Vec<SpanRow>,
    pub(crate) data_pipeline: Option<DataPipeline>,
    /// `None` when no process has a rank.
    pub(crate) ranks: Option<Ranks>,
    /// The nodes of a merged run, with the clock offsets `mlprof merge` applied.
    pub(crate) nodes: Vec<NodeInfo>,
    /// Each launched program's start-up: until its first training step or DataLoader batch.
    pub(crate) startup: Vec<StartupRow>,
    /// The calls as the system calls they make (`mlprof summary --syscalls`).
    pub(crate) syscalls: SyscallView,
    /// Call sites (`mlprof-collect --sites`), most total time first; empty without.
    pub(crate) sites: Vec<sites::SiteRow>,
    /// Calls and spans of a run with sites that have none.
    pub(crate) sites_missing: u64,
    /// Capture ranges: what was recorded of the job (one range, the whole run, without a
    /// capture option).
    pub(crate) capture: crate::run::ranges::Capture,
}

/// One process image: a process, or a program it exec'd into.
#[derive(Debug, Clone)]
pub(crate) struct ProcessRow {
    pub(crate) pid: u32,
    pub(crate) ppid: u32,
    /// 0 for the process's first program, then one more per exec.
    pub(crate) exec_index: usize,
    pub(crate) forked: bool,
    /// argv joined by spaces.
    pub(crate) cmdline: String,
    /// Relative to the run start.
    pub(crate) start_ns: u64,
    /// `None` when no exit was seen.
    pub(crate) exit: Option<ProcessExit>,
    pub(crate) calls: CallTable,
    pub(crate) rank: Option<RankInfo>,
    /// The pid of the rank's own process (itself, or the parent whose rank a worker inherited).
    pub(crate) rank_main: Option<u32>,
    pub(crate) node: u32,
    pub(crate) host: String,
}

/// Calls on one file (by the path its fd named when each call started).
#[derive(Debug, Clone, Default)]
pub(crate) struct FileRow {
    pub(crate) path: String,
    pub(crate) opens: u64,
    pub(crate) calls: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    pub(crate) total_ns: u64,
    pub(crate) by_call: BTreeMap<&'static str, u64>,
    /// The sites that made the most of its calls' time (`--sites`), at most
    /// [`sites::SITES_PER_FILE`].
    pub(crate) sites: Vec<sites::FileSite>,
}

use crate::gpu_timeline::TimelineTally;

impl Summary {
    /// Reads the run's metadata, then streams its events once.
    pub fn compute(path: &Path) -> Result<Summary, String> {
        let meta = RunMeta::load(path)?;
        let mut tally = Tally {
            startup: startup::StartupTally::new(&meta),
            timeline: TimelineTally::new(&meta),
            ..Tally::default()
        };
        let mut reader = run::open(path)?;
        // What the processes do not gate themselves follows the capture ranges here.
        let window = meta.window();
        while let Some(frame) = reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))? {
            match frame {
                Frame::Events(events) => {
                    tally.sites.events_frame();
                    for event in events {
                        tally.add(&meta, event);
                    }
                }
                Frame::EventSites(sites) => tally.sites.sites(&meta, &sites),
                Frame::GpuActivity(mut records) => {
                    window.keep_gpu(&mut records);
                    tally.timeline.add(&records);
                }
                _ => {}
            }
        }
        Ok(tally.finish(meta))
    }
}

/// The counts while the events stream by.
struct Tally {
    events: u64,
    unknown_events: u64,
    /// Per (pid, image, function id), folded into the tables at the end: one fast hash lookup
    /// per event instead of two ordered-map walks by name.
    by_image_and_func: rustc_hash::FxHashMap<(u32, usize, u16), CallStats>,
    /// Path id → its row (path filled in at the end).
    files: HashMap<u64, FileRow>,
    /// Paths of `*at` calls made absolute here (id → path).
    joined: HashMap<u64, String>,
    first_ns: u64,
    last_ns: u64,
    gpu: gpu::GpuTally,
    timeline: TimelineTally,
    pipeline: Pipeline,
    ranks: ranks::RankTally,
    syscalls: syscalls::SyscallTally,
    startup: startup::StartupTally,
    sites: sites::SiteTally,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            events: 0,
            unknown_events: 0,
            by_image_and_func: Default::default(),
            files: HashMap::new(),
            joined: HashMap::new(),
            first_ns: u64::MAX,
            last_ns: 0,
            gpu: Default::default(),
            timeline: Default::default(),
            pipeline: Default::default(),
            ranks: Default::default(),
            syscalls: Default::default(),
            startup: Default::default(),
            sites: Default::default(),
        }
    }
}

impl Tally {
    fn add(&mut self, meta: &RunMeta, event: &mlprof_format::record::Event) {
        let Some(func) = Func::from_id(event.kind) else {
            self.unknown_events += 1;
            self.sites.note(meta, event, None, &CallStats::default(), 0);
            return;
        };
        self.events += 1;
        self.first_ns = self.first_ns.min(event.start);
        self.last_ns = self.last_ns.max(event.start + event.dur);
        let stats = CallStats {
            count: 1,
            errors: event.is_error() as u64,
            total_ns: event.dur,
            bytes: bytes_moved(func, event),
        };
        if matches!(func.api(), Api::CudaRuntime | Api::CudaDriver | Api::Nccl) {
            self.gpu.add(func, event, &stats);
        } else if func.api() == Api::Itt {
            self.pipeline.add(func, event);
        }
        self.syscalls.add(func, event);
        self.startup.add(func, event);
        // One fd lookup for both: the GPU idle split and the file tables.
        let path = meta.fds.path_of(meta, event);
        self.timeline.add_host(func, event, path.is_some());
        let image = meta.image_at(event.pid, event.start).unwrap_or(0);
        self.ranks.add(meta, func, event, image);
        self.by_image_and_func.entry((event.pid, image, event.kind)).or_default().add(&stats);
        let path = path.map(|path_id| self.absolute(meta, func, event, path_id));
        self.sites.note(meta, event, Some(func), &stats, path.unwrap_or(0));
        if let Some(path_id) = path {
            let file = self.files.entry(path_id).or_default();
            file.calls += 1;
            file.total_ns += event.dur;
            *file.by_call.entry(func.name()).or_default() += 1;
            match func.class() {
                Class::Open if !event.is_error() && func != Func::Opendir => file.opens += 1,
                Class::Read => file.bytes_read += stats.bytes,
                Class::Write => file.bytes_written += stats.bytes,
                _ => {}
            }
        }
    }

    /// `path_id` made absolute when it is relative to an `*at` call's directory fd (a string
    /// of this summary's own, kept in `joined`).
    fn absolute(
        &mut self,
        meta: &RunMeta,
        func: Func,
        event: &mlprof_format::record::Event,
        path_id: u64,
    ) -> u64 {
        if !func.has_path() || event.fd < 0 || event.arg2 != path_id {
            return path_id;
        }
        let Some(name) = meta.strings.get(&path_id) else { return path_id };
        match meta.fds.resolve_relative(meta, event, name) {
            Some(joined) => {
                let id = mlprof_format::string_id(joined.as_bytes());
                self.joined.entry(id).or_insert(joined);
                id
            }
            None => path_id,
        }
    }

    fn finish(mut self, meta: RunMeta) -> Summary {
        let mut calls = CallTable::new();
        let mut per_image: HashMap<(u32, usize), CallTable> = HashMap::new();
        for ((pid, image, kind), stats) in std::mem::take(&mut self.by_image_and_func) {
            let Some(func) = Func::from_id(kind) else { continue };
            calls.entry(func.name()).or_default().add(&stats);
            per_image.entry((pid, image)).or_default().entry(func.name()).or_default().add(&stats);
        }
        // Aggregated calls (clock reads) join the tables with their exact counts. When only
        // some calls were timed, the total time is scaled from the timed ones.
        let mut events = self.events;
        for sample in meta.aggregates.values() {
            let Some(func) = Func::from_id(sample.func) else {
                continue;
            };
            let total_ns = if sample.timed > 0 && sample.timed < sample.count {
                (sample.timed_ns as u128 * sample.count as u128 / sample.timed as u128) as u64
            } else {
                sample.timed_ns
            };
            let stats = CallStats { count: sample.count, errors: 0, total_ns, bytes: 0 };
            if func == Func::ClockGettime {
                self.syscalls.add_clock_reads(sample.pid, sample.clock_id, sample.count, total_ns);
            }
            events += sample.count;
            calls.entry(func.name()).or_default().add(&stats);
            let image = meta.image_at(sample.pid, sample.time_ns).unwrap_or(0);
            per_image.entry((sample.pid, image)).or_default().entry(func.name()).or_default().add(&stats);
        }

        let start_ns = meta.info.start_mono_ns;
        let end_ns = meta.end.as_ref().map(|e| e.end_ns).unwrap_or(self.last_ns);
        let duration_ns = end_ns.max(self.last_ns).saturating_sub(start_ns.min(self.first_ns));

        let mut processes: Vec<ProcessRow> = meta
            .images
            .iter()
            .flat_map(|(&pid, images)| {
                let (per_image, meta) = (&per_image, &meta);
                images.iter().enumerate().map(move |(index, image)| ProcessRow {
                    pid,
                    ppid: image.info.ppid,
                    exec_index: index,
                    forked: image.info.forked,
                    cmdline: image.info.argv.join(" "),
                    start_ns: image.info.start_ns.saturating_sub(start_ns),
                    exit: image.exit.clone(),
                    calls: per_image.get(&(pid, index)).cloned().unwrap_or_default(),
                    rank: image.info.rank.clone(),
                    rank_main: meta.rank_main(pid, index),
                    node: image.info.node,
                    host: meta.host_of(image.info.node).to_string(),
                })
            })
            .collect();
        // By absolute start: relative starts saturate at 0 for images older than the run.
        processes.sort_by_key(|p| {
            let absolute = meta.images[&p.pid][p.exec_index].info.start_ns;
            (absolute, p.pid, p.exec_index)
        });

        let joined = std::mem::take(&mut self.joined);
        let mut file_sites = self.sites.file_sites(&meta);
        let mut files: Vec<FileRow> = std::mem::take(&mut self.files)
            .into_iter()
            .map(|(id, row)| FileRow {
                path: joined.get(&id).cloned().unwrap_or_else(|| meta.string(id)),
                sites: file_sites.remove(&id).unwrap_or_default(),
                ..row
            })
            .collect();
        files.sort_by(|a, b| {
            (b.bytes_read + b.bytes_written).cmp(&(a.bytes_read + a.bytes_written)).then(a.path.cmp(&b.path))
        });

        Summary {
            command_line: meta.command_line(),
            events,
            unknown_events: self.unknown_events,
            dropped: meta.dropped(),
            drops: meta.drops_by_reason(),
            truncated: meta.truncated,
            duration_ns,
            threads: meta.threads.len(),
            processes,
            calls,
            files,
            gpu: std::mem::take(&mut self.gpu).finish(
                &meta,
                std::mem::take(&mut self.timeline),
                (start_ns.min(self.first_ns), end_ns.max(self.last_ns)),
            ),
            spans: self.pipeline.spans(&meta),
            data_pipeline: self.pipeline.data_pipeline(&meta),
            ranks: self.ranks.finish(&meta),
            nodes: meta.nodes.clone(),
            startup: std::mem::take(&mut self.startup).finish(&meta, start_ns, end_ns),
            syscalls: std::mem::take(&mut self.syscalls).finish(),
            sites_missing: self.sites.without_site(),
            capture: meta.capture(start_ns.min(self.first_ns), end_ns.max(self.last_ns)),
            sites: self.sites.finish(&meta),
            command: meta.info.command,
            host: meta.info.host,
            clock_source: meta.info.clock_source,
            warnings: meta.warnings,
        }
    }
}

#[cfg(test)]
mod tests;
