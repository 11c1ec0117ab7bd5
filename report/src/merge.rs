//! `mlprof merge`: the `run.bin` of every node of a job (one collector per node) into one run
//! on one time axis. The result is an ordinary run file, with every node's processes, a
//! [`NodeInfo`] frame per node and `ProcessInfo::node` naming where each process ran, so
//! every report reads it like any run.
//!
//! # Clock alignment
//!
//! Each node stamps with its own CLOCK_MONOTONIC, which counts from its boot: two nodes'
//! clocks differ by an arbitrary amount. The merged axis is the reference node's (the one
//! holding the lowest rank, else the first file); a node's times get `offset_ns` added.
//!
//! 1. **First guess: the realtime anchors.** Each collector read CLOCK_REALTIME next to its
//!    CLOCK_MONOTONIC when it started ([`RunInfo::start_realtime_ns`]): `offset = (rt_node −
//!    mono_node) − (rt_ref − mono_ref)`. Good to the hosts' wall-clock agreement: milliseconds
//!    on an NTP fleet, seconds on a bad one.
//! 2. **Then the collectives both sides recorded.** A blocking collective ends at nearly the
//!    same moment on every rank (none can finish before the last has arrived). Collectives are
//!    matched by their order, not by time, so a bad first guess does not matter: the n-th
//!    `gloo:all_reduce` (PyTorch op ranges, `--torch`) of a node's ranks is the n-th of the
//!    other node's, and without op ranges, the n-th call of an NCCL function on the k-th
//!    communicator a process created. Per node, a key's end time is the median over its
//!    ranks. For a pair of nodes, the offset is the median over the common keys of the end
//!    differences; the **residual skew** is their interquartile range (how far apart
//!    "simultaneous" ends still are after the shift).
//! 3. Nodes are aligned to the reference when they share collectives with it, else to any
//!    node already aligned (a chain through sub-groups); a node sharing none keeps the
//!    realtime guess, and says so (`alignment: "realtime"`).
//!
//! NCCL's host calls only enqueue the work on the GPU, so their ends are much less
//! simultaneous than those of PyTorch's op ranges, which end when the collective completes:
//! op ranges are used whenever both nodes have them.
//!
//! The matching assumes every node's collector saw the job from its start (the launcher mode,
//! or an attach session started before the job): a node that missed the first collectives
//! would pair the wrong ones, which shows as a large residual.
//!
//! # Identities
//!
//! Pids of different nodes may coincide (containers, identical images): when a node has a pid
//! an earlier node has, all its pids and tids get `node << 22` added (above Linux's largest
//! pid), said in [`NodeInfo::pid_offset`]. Lane streams and energy devices are renumbered per
//! node; device names get the host in front. Strings are content-addressed and shared.
//!
//! # Memory
//!
//! The inputs are read twice: once for the collectives (kept: a few words per collective),
//! once to write. The write interleaves the nodes' event frames by time, holding one frame
//! per node (at most 64 Ki events, 4 MiB) besides the readers' buffers.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use mlprof_filewrite::BackgroundFile;
use mlprof_format::energy::{EnergyDevice, EnergyNote, EnergySample};
use mlprof_format::func::{Class, Func};
use mlprof_format::record::{Event, GpuCall, IttSpan};
use mlprof_format::runfile::{
    AggregateSample, DropSample, Frame, NodeInfo, ProcessInfo, RunEnd, RunInfo, RunReader, RunWriter,
    create_run_file,
};
use mlprof_format::string_id;

use crate::pipeline::DATA;
use crate::run::is_collective_op;
use crate::run::{Image, RunMeta};

const PYTORCH: u64 = string_id(b"PyTorch");
/// Above Linux's largest pid (`PID_MAX_LIMIT`, 2^22).
const PID_SHIFT: u32 = 22;
/// Energy device ids of node n start at n × this (ids of one node stay below 512).
const DEVICE_STRIDE: u32 = 1024;
/// Lane streams of node n get n << this.
const STREAM_SHIFT: u32 = 48;

/// What a merge did.
#[derive(Debug, Clone)]
pub struct MergeOutcome {
    pub nodes: Vec<NodeInfo>,
    pub events: u64,
    pub processes: usize,
    pub warnings: Vec<String>,
}

/// Which collective a time belongs to, the same on every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    /// The n-th PyTorch op range of this name (`gloo:all_reduce`…) in a process.
    Op(u64, u32),
    /// The n-th call of NCCL function `func` on the k-th communicator a process created.
    Nccl(u32, u16, u32),
}

/// One node's file, as the first pass saw it.
struct Scan {
    path: PathBuf,
    info: RunInfo,
    /// Median end time per collective, on the node's own clock.
    ends: HashMap<Key, u64>,
    pids: HashSet<u32>,
    lowest_rank: Option<u32>,
    processes: usize,
}

/// A collective as recorded: (pid, start, end).
type Spans = Vec<(u32, u64, u64)>;

fn scan(path: &Path) -> Result<Scan, String> {
    let mut reader = crate::run::open(path)?;
    let read_err = |e: mlprof_format::runfile::Error| format!("{}: {e}", path.display());
    let mut meta = RunMeta::default();
    let mut op_names: HashSet<u64> = HashSet::new();
    let mut ops: HashMap<u64, Spans> = HashMap::new();
    // (pid, communicator) → creation time, and (pid, communicator, func) → calls.
    let mut comms: Vec<(u32, u64, u64)> = Vec::new();
    let mut nccl: HashMap<(u32, u64, u16), Vec<(u64, u64)>> = HashMap::new();
    let mut pids = HashSet::new();
    let mut described = false;
    while let Some(frame) = reader.next_frame().map_err(read_err)? {
        match frame {
            Frame::RunInfo(info) => {
                meta.info = info;
                described = true;
            }
            Frame::Node(_) => {
                return Err(format!(
                    "{} is already a merged run: merge the nodes' own files together",
                    path.display()
                ));
            }
            Frame::String { id, bytes } if is_collective_op(&String::from_utf8_lossy(bytes)) => {
                op_names.insert(id);
            }
            Frame::Process(info) => {
                pids.insert(info.pid);
                meta.images.entry(info.pid).or_default().push(Image { info, exit: None });
            }
            Frame::Thread(thread) => {
                pids.insert(thread.pid);
                pids.insert(thread.tid);
            }
            Frame::Events(events) => {
                for event in events {
                    pids.insert(event.pid);
                    pids.insert(event.tid);
                    let Some(func) = Func::from_id(event.kind) else { continue };
                    match func {
                        Func::IttTask => {
                            let span = IttSpan::from_event(event);
                            if span.domain == PYTORCH && op_names.contains(&span.name) {
                                ops.entry(span.name).or_default().push((
                                    span.pid,
                                    span.start,
                                    span.start + span.dur,
                                ));
                            }
                        }
                        _ if func.class() == Class::Comm && !func.name().contains("Destroy") => {
                            comms.push((event.pid, GpuCall::from_event(event).object, event.start));
                        }
                        _ if func.class() == Class::Collective => {
                            let call = GpuCall::from_event(event);
                            nccl.entry((event.pid, call.object, event.kind))
                                .or_default()
                                .push((event.start, event.start + event.dur));
                        }
                        _ => {}
                    }
                }
            }
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
    for images in meta.images.values_mut() {
        images.sort_by_key(|i| i.info.start_ns);
    }
    let ranked = meta.has_ranks();
    // Collectives of processes with a rank; every process's when the job names no rank.
    let counts = |pid: u32| {
        !ranked || meta.images.get(&pid).is_some_and(|images| images.iter().any(|i| i.info.rank.is_some()))
    };
    let mut by_key: HashMap<Key, Vec<u64>> = HashMap::new();
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
    let ends = by_key
        .into_iter()
        .map(|(key, mut ends)| {
            ends.sort_unstable();
            (key, ends[(ends.len() - 1) / 2])
        })
        .collect();
    let lowest_rank =
        meta.images.values().flatten().filter_map(|i| i.info.rank.as_ref().map(|r| r.rank)).min();
    let processes = meta.images.values().map(Vec::len).sum();
    Ok(Scan { path: path.to_path_buf(), info: meta.info, ends, pids, lowest_rank, processes })
}

/// Offset that puts `node`'s times on `to`'s axis, from their common collectives: (offset
/// relative to `to`, pairs, interquartile range). Op ranges when both have them, else NCCL.
fn match_collectives(to: &Scan, node: &Scan) -> Option<(i64, u64, u64)> {
    let pairs = |op: bool| -> Vec<i64> {
        let mut d: Vec<i64> = node
            .ends
            .iter()
            .filter(|(key, _)| matches!(key, Key::Op(..)) == op)
            .filter_map(|(key, &end)| to.ends.get(key).map(|&theirs| theirs as i64 - end as i64))
            .collect();
        d.sort_unstable();
        d
    };
    let mut d = pairs(true);
    if d.is_empty() {
        d = pairs(false);
    }
    if d.is_empty() {
        return None;
    }
    let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), d.len() as u64, (at(0.75) - at(0.25)) as u64))
}

/// The clock offsets of every node (see the module documentation).
fn align(scans: &[Scan]) -> Vec<NodeInfo> {
    let reference = scans
        .iter()
        .enumerate()
        .min_by_key(|(i, s)| (s.lowest_rank.is_none(), s.lowest_rank, *i))
        .map_or(0, |(i, _)| i);
    let anchor = |s: &Scan| s.info.start_realtime_ns as i128 - s.info.start_mono_ns as i128;
    let guess = |s: &Scan| (anchor(s) - anchor(&scans[reference])) as i64;
    let mut nodes: Vec<NodeInfo> = scans
        .iter()
        .enumerate()
        .map(|(i, s)| NodeInfo {
            node: i as u32,
            host: s.info.host.clone(),
            source: s.path.display().to_string(),
            start_mono_ns: s.info.start_mono_ns,
            start_realtime_ns: s.info.start_realtime_ns,
            offset_ns: guess(s),
            realtime_offset_ns: guess(s),
            alignment: "realtime".into(),
            aligned_to: reference as u32,
            ..Default::default()
        })
        .collect();
    nodes[reference].alignment = "reference".into();
    nodes[reference].offset_ns = 0;
    let mut aligned = vec![reference];
    loop {
        // The unaligned node with the most collectives in common with an aligned one.
        let best = (0..scans.len())
            .filter(|i| !aligned.contains(i))
            .flat_map(|i| aligned.iter().map(move |&j| (i, j)))
            .filter_map(|(i, j)| match_collectives(&scans[j], &scans[i]).map(|m| (i, j, m)))
            .max_by_key(|&(i, j, (_, pairs, _))| (pairs, std::cmp::Reverse((j != reference, i))));
        let Some((i, j, (offset, pairs, residual))) = best else { break };
        nodes[i].offset_ns = nodes[j].offset_ns + offset;
        nodes[i].alignment = "collectives".into();
        nodes[i].aligned_to = j as u32;
        nodes[i].matched = pairs;
        nodes[i].residual_ns = Some(residual);
        aligned.push(i);
    }
    // The reference's own figures: the closest node's match, for the summary's table.
    if let Some(other) =
        nodes.iter().find(|n| n.aligned_to == reference as u32 && n.alignment == "collectives")
    {
        let (matched, residual) = (other.matched, other.residual_ns);
        nodes[reference].matched = matched;
        nodes[reference].residual_ns = residual;
    }
    nodes
}

fn shift(time: u64, offset: i64) -> u64 {
    time.saturating_add_signed(offset)
}

/// How one node's frames are rewritten.
struct Rewrite {
    node: u32,
    offset: i64,
    pid_offset: u32,
    host: String,
}

impl Rewrite {
    fn pid(&self, pid: u32) -> u32 {
        if pid == 0 { 0 } else { pid + self.pid_offset }
    }

    fn stream(&self, stream: u64) -> u64 {
        stream | (self.node as u64) << STREAM_SHIFT
    }

    fn device(&self, id: u32) -> u32 {
        id + self.node * DEVICE_STRIDE
    }

    fn event(&self, event: &Event) -> Event {
        let mut e = *event;
        e.start = shift(e.start, self.offset);
        if self.pid_offset != 0 {
            e.pid = self.pid(e.pid);
            e.tid = self.pid(e.tid);
            if e.kind == Func::IttTask as u16 {
                // A DataLoader span's parent is its main process's pid.
                let mut span = IttSpan::from_event(&e);
                if span.domain == DATA {
                    span.parent = self.pid(span.parent as u32) as u64;
                    e = span.into_event();
                }
            }
        }
        e
    }
}

/// One input being written.
struct Input {
    reader: RunReader,
    rewrite: Rewrite,
    /// Its next events frame, rewritten, waiting for its turn.
    pending: Vec<Event>,
    done: bool,
    events: u64,
    end: Option<RunEnd>,
}

/// Writes what a frame of `input` holds (metadata at once, events into `pending`) until its
/// next events frame or its end.
fn advance(
    input: &mut Input,
    out: &mut RunWriter<BackgroundFile>,
    strings: &mut HashSet<u64>,
    path: &Path,
) -> Result<(), String> {
    let write_err = |e: std::io::Error| format!("writing the merged run: {e}");
    let rw = &input.rewrite;
    while let Some(frame) = input.reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))? {
        match frame {
            Frame::Events(events) => {
                input.pending.clear();
                input.pending.extend(events.iter().map(|e| rw.event(e)));
                input.events += events.len() as u64;
                return Ok(());
            }
            Frame::RunInfo(_) | Frame::Node(_) => {}
            Frame::String { id, bytes } => {
                if strings.insert(id) {
                    out.write_string(id, bytes).map_err(write_err)?;
                }
            }
            Frame::Process(info) => out
                .write_process(&ProcessInfo {
                    pid: rw.pid(info.pid),
                    ppid: rw.pid(info.ppid),
                    start_ns: shift(info.start_ns, rw.offset),
                    node: rw.node,
                    ..info
                })
                .map_err(write_err)?,
            Frame::ProcessExit(mut exit) => {
                exit.pid = rw.pid(exit.pid);
                exit.time_ns = shift(exit.time_ns, rw.offset);
                out.write_process_exit(&exit).map_err(write_err)?;
            }
            Frame::Thread(mut thread) => {
                thread.pid = rw.pid(thread.pid);
                thread.tid = rw.pid(thread.tid);
                out.write_thread(&thread).map_err(write_err)?;
            }
            Frame::Symbol(mut symbol) => {
                symbol.pid = rw.pid(symbol.pid);
                out.write_symbol(&symbol).map_err(write_err)?;
            }
            Frame::Aggregates(samples) => {
                let samples: Vec<AggregateSample> = samples
                    .into_iter()
                    .map(|s| AggregateSample {
                        stream: rw.stream(s.stream),
                        pid: rw.pid(s.pid),
                        tid: rw.pid(s.tid),
                        time_ns: shift(s.time_ns, rw.offset),
                        ..s
                    })
                    .collect();
                out.write_aggregates(&samples).map_err(write_err)?;
            }
            Frame::Drops(samples) => {
                let samples: Vec<DropSample> = samples
                    .into_iter()
                    .map(|s| DropSample {
                        stream: rw.stream(s.stream),
                        pid: rw.pid(s.pid),
                        tid: rw.pid(s.tid),
                        time_ns: shift(s.time_ns, rw.offset),
                        ..s
                    })
                    .collect();
                out.write_drops(&samples).map_err(write_err)?;
            }
            Frame::EnergyDevice(device) => out
                .write_energy_device(&EnergyDevice {
                    id: rw.device(device.id),
                    name: format!("{}: {}", rw.host, device.name),
                    ..device
                })
                .map_err(write_err)?,
            Frame::EnergySamples(samples) => {
                let samples: Vec<EnergySample> = samples
                    .into_iter()
                    .map(|s| EnergySample {
                        device: rw.device(s.device),
                        time_ns: shift(s.time_ns, rw.offset),
                        ..s
                    })
                    .collect();
                out.write_energy_samples(&samples).map_err(write_err)?;
            }
            Frame::EnergyNote(note) => out
                .write_energy_note(&EnergyNote {
                    device: note.device.map(|d| rw.device(d)),
                    time_ns: shift(note.time_ns, rw.offset),
                    ..note
                })
                .map_err(write_err)?,
            Frame::End(end) => input.end = Some(end),
        }
    }
    input.done = true;
    input.pending.clear();
    Ok(())
}

/// Merges the nodes' runs `inputs` into `output` (see the module documentation).
pub fn merge(inputs: &[PathBuf], output: &Path) -> Result<MergeOutcome, String> {
    if inputs.is_empty() {
        return Err("nothing to merge".into());
    }
    if inputs.len() as u64 >= 1 << (32 - PID_SHIFT) {
        return Err(format!("at most {} nodes can be merged", (1u32 << (32 - PID_SHIFT)) - 1));
    }
    let scans = inputs.iter().map(|p| scan(p)).collect::<Result<Vec<_>, _>>()?;
    let mut nodes = align(&scans);
    // Keep every time on the axis non-negative (a node whose clock is behind the reference's).
    let lowest =
        nodes.iter().zip(&scans).map(|(n, s)| s.info.start_mono_ns as i128 + n.offset_ns as i128).min();
    if let Some(lowest) = lowest.filter(|&l| l < 0) {
        for n in &mut nodes {
            n.offset_ns += (-lowest) as i64;
        }
    }
    let mut seen: HashSet<u32> = HashSet::new();
    for (i, (node, scan)) in nodes.iter_mut().zip(&scans).enumerate() {
        if i > 0 && scan.pids.iter().any(|p| seen.contains(p)) {
            node.pid_offset = (i as u32) << PID_SHIFT;
        }
        seen.extend(scan.pids.iter().map(|p| p + node.pid_offset));
    }
    let mut warnings = Vec::new();
    for (node, scan) in nodes.iter().zip(&scans) {
        if node.alignment == "realtime" && scans.len() > 1 {
            warnings.push(format!(
                "{}: no collective in common with the other nodes; aligned by its realtime clock only",
                scan.path.display()
            ));
        }
    }

    let reference = nodes.iter().position(|n| n.alignment == "reference").unwrap_or(0);
    let ref_info = &scans[reference].info;
    let start_mono_ns =
        nodes.iter().zip(&scans).map(|(n, s)| shift(s.info.start_mono_ns, n.offset_ns)).min().unwrap_or(0);
    let ref_start = shift(ref_info.start_mono_ns, nodes[reference].offset_ns);
    let mut hosts: Vec<&str> = Vec::new();
    for s in &scans {
        if !hosts.contains(&s.info.host.as_str()) {
            hosts.push(&s.info.host);
        }
    }
    let host = match hosts.len() {
        0..=4 => hosts.join("+"),
        n => format!("{}+{} more", hosts[..3].join("+"), n - 3),
    };
    let mut clock_sources: Vec<&str> = scans.iter().map(|s| s.info.clock_source.as_str()).collect();
    clock_sources.dedup();
    let info = RunInfo {
        mlprof_version: env!("CARGO_PKG_VERSION").into(),
        host,
        session: ref_info.session.clone(),
        command: ref_info.command.clone(),
        start_mono_ns,
        start_realtime_ns: ref_info.start_realtime_ns.saturating_sub(ref_start.saturating_sub(start_mono_ns)),
        clock_source: clock_sources.join(","),
        ring_abi_version: ref_info.ring_abi_version,
        lane_count: scans.iter().map(|s| s.info.lane_count).sum(),
        lane_capacity: ref_info.lane_capacity,
    };
    // Written by a thread of its own, past the page cache where it can (a merged run is the
    // size of all its nodes' runs; see mlprof-filewrite).
    let mut out = create_run_file(output)
        .and_then(BackgroundFile::paced)
        .and_then(|file| RunWriter::new(file, &info))
        .map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    let write_err = |e: std::io::Error| format!("writing {}: {e}", output.display());
    for node in &nodes {
        out.write_node(node).map_err(write_err)?;
    }
    let mut strings = HashSet::new();
    let mut inputs: Vec<Input> = nodes
        .iter()
        .zip(&scans)
        .map(|(node, scan)| {
            Ok(Input {
                reader: crate::run::open(&scan.path)?,
                rewrite: Rewrite {
                    node: node.node,
                    offset: node.offset_ns,
                    pid_offset: node.pid_offset,
                    host: scan.info.host.clone(),
                },
                pending: Vec::new(),
                done: false,
                events: 0,
                end: None,
            })
        })
        .collect::<Result<_, String>>()?;
    for (input, scan) in inputs.iter_mut().zip(&scans) {
        advance(input, &mut out, &mut strings, &scan.path)?;
    }
    // Event frames in the order of their first event's end (each frame is sorted by end).
    loop {
        let next = inputs
            .iter()
            .enumerate()
            .filter(|(_, i)| !i.pending.is_empty())
            .min_by_key(|(_, i)| i.pending[0].start + i.pending[0].dur)
            .map(|(at, _)| at);
        let Some(at) = next else { break };
        out.write_events(&inputs[at].pending).map_err(write_err)?;
        advance(&mut inputs[at], &mut out, &mut strings, &scans[at].path)?;
    }
    let events = inputs.iter().map(|i| i.events).sum();
    let end_ns = inputs
        .iter()
        .zip(&nodes)
        .filter_map(|(i, n)| i.end.as_ref().map(|e| shift(e.end_ns, n.offset_ns)))
        .max()
        .unwrap_or(start_mono_ns);
    for (input, scan) in inputs.iter().zip(&scans) {
        if input.end.is_none() {
            warnings.push(format!(
                "{}: no end record (collector killed?); merged what it holds",
                scan.path.display()
            ));
        }
    }
    let dropped = inputs.iter().filter_map(|i| i.end.as_ref()).map(|e| e.dropped).sum();
    out.finish(&RunEnd { end_ns, events, dropped }).and_then(BackgroundFile::close).map_err(write_err)?;
    Ok(MergeOutcome { nodes, events, processes: scans.iter().map(|s| s.processes).sum(), warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_with(host: &str, mono: u64, realtime: u64, rank: Option<u32>, ends: &[(Key, u64)]) -> Scan {
        Scan {
            path: PathBuf::from(format!("{host}.bin")),
            info: RunInfo {
                host: host.into(),
                start_mono_ns: mono,
                start_realtime_ns: realtime,
                ..Default::default()
            },
            ends: ends.iter().copied().collect(),
            pids: HashSet::new(),
            lowest_rank: rank,
            processes: 0,
        }
    }

    #[test]
    fn collectives_correct_a_wrong_realtime_guess() {
        const S: u64 = 1_000_000_000;
        // Node b booted 1000 s later than node a's clock says (monotonic far behind), and its
        // wall clock is 3 s fast: the anchors alone would be 3 s off.
        let true_offset: i64 = 1000 * S as i64;
        let op = string_id(b"gloo:all_reduce");
        let a_ends: Vec<(Key, u64)> =
            (0..9).map(|n| (Key::Op(op, n), 2000 * S + n as u64 * 7_000_000)).collect();
        let jitter = [0i64, 30_000, -20_000, 10_000, 0, 50_000, -40_000, 5_000, 2_000];
        let b_ends: Vec<(Key, u64)> =
            a_ends.iter().zip(jitter).map(|(&(k, t), j)| (k, (t as i64 - true_offset + j) as u64)).collect();
        let a = scan_with("a", 1500 * S, 1_700_000_000 * S, Some(0), &a_ends);
        let b = scan_with("b", 500 * S, 1_700_000_000 * S + 3 * S, Some(1), &b_ends);
        let c = scan_with("c", 10 * S, 1_700_000_000 * S, None, &[]);
        let nodes = align(&[b, a, c]);
        let (b, a, c) = (&nodes[0], &nodes[1], &nodes[2]);
        assert_eq!((a.alignment.as_str(), a.offset_ns), ("reference", 0));
        assert_eq!(b.alignment, "collectives");
        assert_eq!(b.realtime_offset_ns, true_offset + 3 * S as i64);
        assert!((b.offset_ns - true_offset).abs() <= 10_000, "{}", b.offset_ns - true_offset);
        assert_eq!(b.matched, 9);
        assert!(b.residual_ns.unwrap() <= 40_000);
        assert_eq!((c.alignment.as_str(), c.offset_ns), ("realtime", 1490 * S as i64));
    }
}
