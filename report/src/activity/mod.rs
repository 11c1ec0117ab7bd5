//! What each main process (or rank) spent its wall time on, and the run's activity over time:
//! the figures `mlprof report` draws and `mlprof diff` compares per rank.
//!
//! * **Main processes**: the processes that trained — they waited for DataLoader batches,
//!   recorded a training phase or called the GPU — and have no such ancestor (a DataLoader
//!   worker or a compile helper belongs to its main). A run with none of that (a plain
//!   program) has its root processes as mains. Each main is one row; when a run carries rank
//!   metadata ([`MainActivity::rank`]), rows are ranks.
//! * **Wall-time breakdown** of a main: its lifetime (first image start to exit, within the
//!   run), cut by the union of its threads' intervals in each category, highest priority first:
//!   data wait (`batch.wait`), GPU synchronization (calls that block the host), file I/O
//!   (calls on descriptors that name a file, and opens), ops and phases (ITT tasks other than
//!   the DataLoader's), and the rest. Each instant counts once, in the first category active
//!   at it, so the parts add up to the wall time.
//! * **Timelines** ([`Timelines`]), on the run's time axis in [`BINS`] equal slices: bytes
//!   read and written per process, DataLoader waits per batch, training-step times.
//!
//! One streaming pass over the events ([`Activity::compute`]); memory holds the intervals of
//! the main processes' calls and spans (24 bytes each), not the events.

mod intervals;
pub(crate) mod power;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::{Event, IttSpan};
use mlprof_format::runfile::Frame;
use mlprof_format::string_id;
use rustc_hash::FxHashMap;

use crate::pipeline::{DATA, FETCH, WAIT};
use crate::run::{self, RunMeta, bytes_moved};
use crate::shapes::SHAPES;

pub(crate) use crate::host_time::Category;
pub(crate) use intervals::exclusive_times;

/// Slices of the run's time axis in every timeline.
pub(crate) const BINS: usize = 240;

/// One main process (or rank) and where its wall time went.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MainActivity {
    pub(crate) pid: u32,
    /// The rank, when the run's process metadata carries one (run file 1.4 and later); rows
    /// without ranks are main processes in start order.
    pub(crate) rank: Option<u32>,
    pub(crate) cmdline: String,
    /// From the run start.
    pub(crate) start_ns: u64,
    pub(crate) wall_ns: u64,
    /// Exclusive time per [`Category`] (indexed by `Category as usize`).
    pub(crate) by_category: [u64; 4],
    /// Calls (not spans) of the main and the processes below it, their time and bytes moved.
    pub(crate) calls: u64,
    pub(crate) calls_ns: u64,
    pub(crate) bytes: u64,
}

impl MainActivity {
    /// Wall time in none of the categories.
    pub(crate) fn rest_ns(&self) -> u64 {
        self.wall_ns.saturating_sub(self.by_category.iter().sum())
    }

    /// "rank 3" or "pid 4242".
    pub(crate) fn label(&self) -> String {
        match self.rank {
            Some(rank) => format!("rank {rank}"),
            None => format!("pid {}", self.pid),
        }
    }
}

/// Per-slice figures on the run's time axis.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Timelines {
    /// Run start (CLOCK_MONOTONIC ns) and the width of one slice.
    pub(crate) start_ns: u64,
    pub(crate) bin_ns: u64,
    /// Bytes read and written per slice, per process (most bytes first).
    pub(crate) io: Vec<(u32, Vec<u64>)>,
    /// Each `batch.wait` of a main: (end time from the run start, duration), in time order.
    pub(crate) waits: Vec<(u32, Vec<(u64, u64)>)>,
    /// Each training step of a main: (end time from the run start, time since the previous
    /// step's end), from its `optimizer.step` phases.
    pub(crate) steps: Vec<(u32, Vec<(u64, u64)>)>,
}

/// The activity figures of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Activity {
    pub(crate) duration_ns: u64,
    pub(crate) mains: Vec<MainActivity>,
    pub(crate) timelines: Timelines,
}

const PHASE: u64 = string_id(b"mlprof.phase");
const OPTIMIZER_STEP: u64 = string_id(b"optimizer.step");

/// Who did what while the events streamed by.
#[derive(Default)]
struct Pass {
    /// Per pid: (category, start, end) of its calls and spans.
    intervals: FxHashMap<u32, Vec<(Category, u64, u64)>>,
    /// Processes with training activity: batch waits, phases, GPU calls.
    active: BTreeSet<u32>,
    /// Processes that fetched batches (DataLoader workers).
    fetchers: BTreeSet<u32>,
    /// Per pid: (calls, ns, bytes).
    calls: FxHashMap<u32, (u64, u64, u64)>,
    io: FxHashMap<u32, Vec<u64>>,
    waits: FxHashMap<u32, Vec<(u64, u64)>>,
    step_ends: FxHashMap<u32, Vec<u64>>,
    first_ns: u64,
    last_ns: u64,
}

impl Activity {
    /// Reads the run's metadata, then streams its events once.
    pub(crate) fn compute(path: &Path) -> Result<Activity, String> {
        let meta = RunMeta::load(path)?;
        Self::compute_with(&meta, path)
    }

    /// With the metadata already loaded.
    pub(crate) fn compute_with(meta: &RunMeta, path: &Path) -> Result<Activity, String> {
        let start_ns = meta.info.start_mono_ns;
        let end_ns = meta.end.as_ref().map(|e| e.end_ns);
        // The time axis needs the run's end before the events: a run without an end record
        // (a killed collector) gets it from a first look at the events' last end.
        let end_ns = match end_ns {
            Some(end) if end > start_ns => end,
            _ => last_event_end(path)?.max(start_ns + 1),
        };
        let bin_ns = (end_ns - start_ns).div_ceil(BINS as u64).max(1);
        let mut pass = Pass { first_ns: u64::MAX, ..Default::default() };
        let mut reader = run::open(path)?;
        while let Some(frame) = reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))? {
            if let Frame::Events(events) = frame {
                for event in events {
                    pass.add(meta, event, start_ns, bin_ns);
                }
            }
        }
        Ok(pass.finish(meta, start_ns, end_ns, bin_ns))
    }
}

fn last_event_end(path: &Path) -> Result<u64, String> {
    let mut reader = run::open(path)?;
    let mut last = 0;
    while let Some(frame) = reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))? {
        if let Frame::Events(events) = frame {
            last = events.iter().fold(last, |l, e| l.max(e.start.saturating_add(e.dur)));
        }
    }
    Ok(last)
}

impl Pass {
    fn add(&mut self, meta: &RunMeta, event: &Event, start_ns: u64, bin_ns: u64) {
        let Some(func) = Func::from_id(event.kind) else { return };
        let end = event.start.saturating_add(event.dur);
        self.first_ns = self.first_ns.min(event.start);
        self.last_ns = self.last_ns.max(end);
        let pid = event.pid;
        if let Some(category) =
            crate::host_time::category_of(func, event, || meta.fds.path_of(meta, event).is_some())
        {
            self.intervals.entry(pid).or_default().push((category, event.start, end));
        }
        match func.api() {
            Api::Itt => {
                if func.class() != Class::Span {
                    return;
                }
                let span = IttSpan::from_event(event);
                match (span.domain, span.name) {
                    (DATA, WAIT) => {
                        self.active.insert(pid);
                        self.waits.entry(pid).or_default().push((end.saturating_sub(start_ns), span.dur));
                    }
                    (DATA, FETCH) => {
                        self.fetchers.insert(pid);
                    }
                    (DATA, _) | (SHAPES, _) => {}
                    (domain, name) => {
                        if domain == PHASE {
                            self.active.insert(pid);
                            if name == OPTIMIZER_STEP {
                                self.step_ends.entry(pid).or_default().push(end);
                            }
                        }
                    }
                }
            }
            api => {
                let calls = self.calls.entry(pid).or_default();
                calls.0 += 1;
                calls.1 += event.dur;
                let bytes = bytes_moved(func, event);
                calls.2 += bytes;
                if api != Api::Libc {
                    self.active.insert(pid);
                    return;
                }
                if matches!(func.class(), Class::Read | Class::Write) && bytes > 0 {
                    let bins = self.io.entry(pid).or_insert_with(|| vec![0; BINS]);
                    let bin = (end.saturating_sub(start_ns) / bin_ns) as usize;
                    bins[bin.min(BINS - 1)] += bytes;
                }
            }
        }
    }

    fn finish(mut self, meta: &RunMeta, start_ns: u64, end_ns: u64, bin_ns: u64) -> Activity {
        let ppid_of = |pid: u32| meta.images.get(&pid).and_then(|i| i.first()).map(|i| i.info.ppid);
        // Ancestors of a process, nearest first (bounded: pids can be reused into cycles).
        let ancestors = |pid: u32| {
            let mut out = Vec::new();
            let mut at = pid;
            while let Some(parent) = ppid_of(at).filter(|&p| p != 0 && p != at && out.len() < 64) {
                out.push(parent);
                at = parent;
            }
            out
        };
        // Workers are not mains even when they call the GPU (pinned-memory copies), unless
        // they also waited for batches of their own.
        let trained: BTreeSet<u32> = self
            .active
            .iter()
            .copied()
            .filter(|p| !self.fetchers.contains(p) || self.waits.contains_key(p))
            .collect();
        let mut mains: Vec<u32> =
            trained.iter().copied().filter(|&p| !ancestors(p).iter().any(|a| trained.contains(a))).collect();
        if mains.is_empty() {
            mains = meta
                .images
                .keys()
                .copied()
                .filter(|&p| ppid_of(p).is_none_or(|pp| !meta.images.contains_key(&pp)))
                .collect();
        }
        // The calls of every process count for the main above it (or itself).
        let mut owner: BTreeMap<u32, u32> = BTreeMap::new();
        for &pid in self.calls.keys() {
            let main = std::iter::once(pid).chain(ancestors(pid)).find(|p| mains.contains(p));
            if let Some(main) = main {
                owner.insert(pid, main);
            }
        }
        let lifetime = |pid: u32| -> (u64, u64) {
            let images = meta.images.get(&pid).map(Vec::as_slice).unwrap_or_default();
            let start = images.first().map(|i| i.info.start_ns).unwrap_or(start_ns).clamp(start_ns, end_ns);
            let end =
                images.iter().filter_map(|i| i.exit.as_ref().map(|e| e.time_ns)).max().unwrap_or(end_ns);
            (start, end.clamp(start, end_ns))
        };
        let mut rows: Vec<MainActivity> = mains
            .iter()
            .map(|&pid| {
                let (start, end) = lifetime(pid);
                let intervals = self.intervals.remove(&pid).unwrap_or_default();
                let by_category = exclusive_times(&intervals, start, end);
                let (mut calls, mut calls_ns, mut bytes) = (0, 0, 0);
                for (p, (c, ns, b)) in &self.calls {
                    if owner.get(p) == Some(&pid) {
                        (calls, calls_ns, bytes) = (calls + c, calls_ns + ns, bytes + b);
                    }
                }
                let cmdline = meta
                    .images
                    .get(&pid)
                    .and_then(|i| i.last())
                    .map(|i| i.info.argv.join(" "))
                    .unwrap_or_default();
                MainActivity {
                    pid,
                    rank: rank_of(meta, pid),
                    cmdline,
                    start_ns: start - start_ns,
                    wall_ns: end - start,
                    by_category,
                    calls,
                    calls_ns,
                    bytes,
                }
            })
            .collect();
        rows.sort_by_key(|m| (m.rank.is_none(), m.rank, m.start_ns, m.pid));

        let mut io: Vec<(u32, Vec<u64>)> = self.io.into_iter().collect();
        io.sort_by_key(|(pid, bins)| (std::cmp::Reverse(bins.iter().sum::<u64>()), *pid));
        let mut waits: Vec<(u32, Vec<(u64, u64)>)> = self.waits.into_iter().collect();
        for (_, w) in &mut waits {
            w.sort_unstable();
        }
        waits.sort_by_key(|(pid, _)| *pid);
        let mut steps: Vec<(u32, Vec<(u64, u64)>)> = self
            .step_ends
            .into_iter()
            .map(|(pid, mut ends)| {
                ends.sort_unstable();
                let steps = ends.windows(2).map(|w| (w[1] - start_ns, w[1] - w[0])).collect();
                (pid, steps)
            })
            .collect();
        steps.sort_by_key(|(pid, _)| *pid);
        Activity {
            duration_ns: end_ns - start_ns,
            mains: rows,
            timelines: Timelines { start_ns, bin_ns, io, waits, steps },
        }
    }
}

/// The rank of main process `pid`, from the run's process metadata (run file 1.4 and later):
/// the rank of its first image that is the rank's own process, not a worker inheriting it.
pub(crate) fn rank_of(meta: &RunMeta, pid: u32) -> Option<u32> {
    let images = meta.images.get(&pid)?;
    images.iter().enumerate().find_map(|(index, image)| {
        let rank = image.info.rank.as_ref()?;
        (meta.rank_main(pid, index) == Some(pid)).then_some(rank.rank)
    })
}

#[cfg(test)]
mod tests;
