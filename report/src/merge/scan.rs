//! The merge's first pass: one node's file read for its clock anchors, its pids, its ranks
//! and the end time of every collective it recorded, keyed the same on every node.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use mlprof_format::func::{Class, Func};
use mlprof_format::record::{Event, GpuCall, IttSpan};
use mlprof_format::runfile::{Frame, RunInfo};
use mlprof_format::string_id;

use crate::run::is_collective_op;
use crate::run::{Image, RunMeta};

const PYTORCH: u64 = string_id(b"PyTorch");

/// Which collective a time belongs to, the same on every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Key {
    /// The n-th PyTorch op range of this name (`gloo:all_reduce`…) in a process.
    Op(u64, u32),
    /// The n-th call of NCCL function `func` on the k-th communicator a process created.
    Nccl(u32, u16, u32),
}

/// One node's file, as the first pass saw it.
pub(super) struct Scan {
    pub(super) path: PathBuf,
    pub(super) info: RunInfo,
    /// Median end time per collective, on the node's own clock.
    pub(super) ends: HashMap<Key, u64>,
    pub(super) pids: HashSet<u32>,
    pub(super) lowest_rank: Option<u32>,
    pub(super) processes: usize,
}

/// A collective as recorded: (pid, start, end).
type Spans = Vec<(u32, u64, u64)>;

/// What the read of a node's file keeps: its description and processes, its pids, and every
/// collective as recorded (not yet keyed).
#[derive(Default)]
struct Recorded {
    meta: RunMeta,
    /// The ids of the strings naming a collective op (`gloo:all_reduce`…).
    op_names: HashSet<u64>,
    /// PyTorch op ranges of collectives, by name.
    ops: HashMap<u64, Spans>,
    /// NCCL communicators as created: (pid, communicator, creation time).
    comms: Vec<(u32, u64, u64)>,
    /// NCCL collective calls: (pid, communicator, func) → their (start, end).
    nccl: HashMap<(u32, u64, u16), Vec<(u64, u64)>>,
    pids: HashSet<u32>,
}

/// Reads `path` for its clock anchors, pids, ranks and collectives.
pub(super) fn scan(path: &Path) -> Result<Scan, String> {
    let Recorded { mut meta, ops, comms, nccl, pids, .. } = read(path)?;
    for images in meta.images.values_mut() {
        images.sort_by_key(|i| i.info.start_ns);
    }
    let ends = collective_ends(&meta, ops, comms, nccl);
    let lowest_rank =
        meta.images.values().flatten().filter_map(|i| i.info.rank.as_ref().map(|r| r.rank)).min();
    let processes = meta.images.values().map(Vec::len).sum();
    Ok(Scan { path: path.to_path_buf(), info: meta.info, ends, pids, lowest_rank, processes })
}

/// Reads every frame of `path`, keeping what [`Recorded`] holds.
fn read(path: &Path) -> Result<Recorded, String> {
    let mut reader = crate::run::open(path)?;
    let read_err = |e: mlprof_format::runfile::Error| format!("{}: {e}", path.display());
    let mut recorded = Recorded::default();
    let mut described = false;
    while let Some(frame) = reader.next_frame().map_err(read_err)? {
        match frame {
            Frame::RunInfo(info) => {
                recorded.meta.info = info;
                described = true;
            }
            Frame::Node(_) => {
                return Err(format!(
                    "{} is already a merged run: merge the nodes' own files together",
                    path.display()
                ));
            }
            Frame::String { id, bytes } if is_collective_op(&String::from_utf8_lossy(bytes)) => {
                recorded.op_names.insert(id);
            }
            Frame::Process(info) => {
                recorded.pids.insert(info.pid);
                recorded.meta.images.entry(info.pid).or_default().push(Image { info, exit: None });
            }
            Frame::Thread(thread) => {
                recorded.pids.insert(thread.pid);
                recorded.pids.insert(thread.tid);
            }
            Frame::Events(events) => recorded.events(events),
            _ => {}
        }
    }
    // Every writer puts the run's description first; without it (a damaged frame kind, skipped
    // as unknown) the node's clock anchors are unknown and its place on the axis a guess.
    if !described {
        return Err(format!(
            "{}: no run description (RunInfo frame, the first of every run file): its clocks are unknown, \
             so it cannot be placed on the merged time axis",
            path.display()
        ));
    }
    Ok(recorded)
}

impl Recorded {
    /// Keeps the pids and collectives of one events frame.
    fn events(&mut self, events: &[Event]) {
        for event in events {
            self.pids.insert(event.pid);
            self.pids.insert(event.tid);
            let Some(func) = Func::from_id(event.kind) else { continue };
            match func {
                Func::IttTask => {
                    let span = IttSpan::from_event(event);
                    if span.domain == PYTORCH && self.op_names.contains(&span.name) {
                        self.ops.entry(span.name).or_default().push((
                            span.pid,
                            span.start,
                            span.start + span.dur,
                        ));
                    }
                }
                _ if func.class() == Class::Comm && !func.name().contains("Destroy") => {
                    self.comms.push((event.pid, GpuCall::from_event(event).object, event.start));
                }
                _ if func.class() == Class::Collective => {
                    let call = GpuCall::from_event(event);
                    self.nccl
                        .entry((event.pid, call.object, event.kind))
                        .or_default()
                        .push((event.start, event.start + event.dur));
                }
                _ => {}
            }
        }
    }
}

/// The median end time of every collective key over the node's processes.
fn collective_ends(
    meta: &RunMeta,
    ops: HashMap<u64, Spans>,
    comms: Vec<(u32, u64, u64)>,
    nccl: HashMap<(u32, u64, u16), Vec<(u64, u64)>>,
) -> HashMap<Key, u64> {
    let ranked = meta.has_ranks();
    // Collectives of processes with a rank; every process's when the job names no rank.
    let counts = |pid: u32| {
        !ranked || meta.images.get(&pid).is_some_and(|images| images.iter().any(|i| i.info.rank.is_some()))
    };
    let mut by_key: HashMap<Key, Vec<u64>> = HashMap::new();
    op_ends(ops, &counts, &mut by_key);
    nccl_ends(comms, nccl, &counts, &mut by_key);
    by_key
        .into_iter()
        .map(|(key, mut ends)| {
            ends.sort_unstable();
            (key, ends[(ends.len() - 1) / 2])
        })
        .collect()
}

/// Adds the end of every op range of a process that `counts` to `by_key`, keyed by its name
/// and its ordinal among the process's ranges of that name.
fn op_ends(ops: HashMap<u64, Spans>, counts: &impl Fn(u32) -> bool, by_key: &mut HashMap<Key, Vec<u64>>) {
    for (name, mut spans) in ops {
        spans.sort_unstable_by_key(|&(pid, start, _)| (pid, start));
        let mut ordinal = 0;
        for (i, &(pid, _, end)) in spans.iter().enumerate() {
            ordinal = if i > 0 && spans[i - 1].0 == pid { ordinal + 1 } else { 0 };
            if counts(pid) {
                by_key.entry(Key::Op(name, ordinal)).or_default().push(end);
            }
        }
    }
}

/// Adds the end of every NCCL call of a process that `counts` to `by_key`, keyed by its
/// communicator's ordinal in the process, its function and its ordinal among those calls.
fn nccl_ends(
    mut comms: Vec<(u32, u64, u64)>,
    nccl: HashMap<(u32, u64, u16), Vec<(u64, u64)>>,
    counts: &impl Fn(u32) -> bool,
    by_key: &mut HashMap<Key, Vec<u64>>,
) {
    // Communicators numbered per process in creation order (unknown ones after, by first use).
    comms.sort_unstable_by_key(|&(pid, _, time)| (pid, time));
    let mut comm_ordinal: HashMap<(u32, u64), u32> = HashMap::new();
    for &(pid, comm, _) in &comms {
        let next = comm_ordinal.keys().filter(|(p, _)| *p == pid).count() as u32;
        comm_ordinal.entry((pid, comm)).or_insert(next);
    }
    let mut calls: Vec<_> = nccl.into_iter().collect();
    calls.sort_unstable_by_key(|((pid, _, _), c)| (*pid, c.first().map_or(0, |c| c.0)));
    for ((pid, comm, func), mut times) in calls {
        if !counts(pid) {
            continue;
        }
        let next = comm_ordinal.keys().filter(|(p, _)| *p == pid).count() as u32;
        let comm = *comm_ordinal.entry((pid, comm)).or_insert(next);
        times.sort_unstable();
        for (n, &(_, end)) in times.iter().enumerate() {
            by_key.entry(Key::Nccl(comm, func, n as u32)).or_default().push(end);
        }
    }
}
