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

mod align;
mod samples;
mod scan;
mod sites;
mod write;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use mlprof_format::runfile::{NodeInfo, RunInfo};

use align::{align, keep_times_non_negative};
use scan::{Scan, scan};
use write::shift;

/// Above Linux's largest pid (`PID_MAX_LIMIT`, 2^22).
const PID_SHIFT: u32 = 22;

/// What a merge did.
#[derive(Debug, Clone)]
pub struct MergeOutcome {
    pub nodes: Vec<NodeInfo>,
    pub events: u64,
    pub processes: usize,
    pub warnings: Vec<String>,
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
    keep_times_non_negative(&mut nodes, &scans);
    separate_pids(&mut nodes, &scans);
    let mut warnings = Vec::new();
    for (node, scan) in nodes.iter().zip(&scans) {
        if node.alignment == "realtime" && scans.len() > 1 {
            warnings.push(format!(
                "{}: no collective in common with the other nodes; aligned by its realtime clock only",
                scan.path.display()
            ));
        }
    }
    let info = merged_info(&nodes, &scans);
    let events = write::write(output, &info, &nodes, &scans, &mut warnings)?;
    Ok(MergeOutcome { nodes, events, processes: scans.iter().map(|s| s.processes).sum(), warnings })
}

/// When a node has a pid an earlier node has, adds `node << 22` to all its pids and tids
/// ([`NodeInfo::pid_offset`]), so that no two processes of the merged run share a pid.
fn separate_pids(nodes: &mut [NodeInfo], scans: &[Scan]) {
    let mut seen: HashSet<u32> = HashSet::new();
    for (i, (node, scan)) in nodes.iter_mut().zip(scans).enumerate() {
        if i > 0 && scan.pids.iter().any(|p| seen.contains(p)) {
            node.pid_offset = (i as u32) << PID_SHIFT;
        }
        seen.extend(scan.pids.iter().map(|p| p + node.pid_offset));
    }
}

/// The merged run's description: the reference node's session and command, the earliest
/// node's start, and the hosts, clock sources and lanes of all nodes.
fn merged_info(nodes: &[NodeInfo], scans: &[Scan]) -> RunInfo {
    let reference = nodes.iter().position(|n| n.alignment == "reference").unwrap_or(0);
    let ref_info = &scans[reference].info;
    let start_mono_ns =
        nodes.iter().zip(scans).map(|(n, s)| shift(s.info.start_mono_ns, n.offset_ns)).min().unwrap_or(0);
    let ref_start = shift(ref_info.start_mono_ns, nodes[reference].offset_ns);
    let mut hosts: Vec<&str> = Vec::new();
    for s in scans {
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
    RunInfo {
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
    }
}

#[cfg(test)]
mod tests;
