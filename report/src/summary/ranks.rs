//! The per-rank part of the summary: for each rank of a distributed job (all its processes:
//! the rank's own and its DataLoader workers), the time in collectives, waiting for data, in
//! file I/O and blocked on the GPU, and its training steps; and the stragglers — per step, the
//! rank that took longest and by how much more than the median rank.
//!
//! What counts:
//! * collectives: PyTorch's `gloo:*` / `nccl:*` op ranges (`--torch`; they cover the whole
//!   collective, on the backend's thread); in a process without them, the host time of NCCL's
//!   collective calls (which only enqueue the work on the GPU).
//! * data wait: `batch.wait` spans (`--torch`).
//! * I/O: file calls (open, read, write, close, seek, sync, mmap), not clock reads or ioctls.
//! * GPU sync: calls that block the host on the GPU (synchronizations, blocking copies).
//! * steps: `optimizer.step` phases (`--torch`) in the rank's own process. A step's time is
//!   from the end of the previous step to the end of this one, so the first step has none.
//!
//! The straggler of a step is the rank with the most time outside collectives in it (its step
//! time less the union of its collective ranges in the step). In synchronous training every
//! rank's step takes as long as the slowest one's — the others wait for it inside the
//! collective — so the step time alone cannot tell who held the others up; the work done
//! before arriving at the collectives does.

use std::collections::BTreeMap;

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::{Event, FLAG_NESTED, IttSpan};
use mlprof_format::string_id;
use rustc_hash::FxHashMap;

use crate::pipeline::{DATA, WAIT};
use crate::run::{RunMeta, is_collective_op};

const PHASE: u64 = string_id(b"mlprof.phase");
const OPTIMIZER_STEP: u64 = string_id(b"optimizer.step");
const PYTORCH: u64 = string_id(b"PyTorch");

/// One rank's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RankRow {
    pub(crate) rank: u32,
    /// Processes with this rank (its own and its children), and the rank's own pids.
    pub(crate) processes: usize,
    pub(crate) main_pids: Vec<u32>,
    pub(crate) hosts: Vec<String>,
    pub(crate) collectives_ns: u64,
    pub(crate) collectives: u64,
    pub(crate) data_wait_ns: u64,
    pub(crate) io_ns: u64,
    pub(crate) gpu_sync_ns: u64,
    pub(crate) steps: u64,
    /// Median step time (see the module documentation), 0 with fewer than two steps.
    pub(crate) step_median_ns: u64,
}

/// In step `step`, `slowest_rank` spent `by_ns` more outside collectives than the median rank.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StragglerStep {
    pub(crate) step: usize,
    pub(crate) slowest_rank: u32,
    /// The slowest rank's time outside collectives in the step.
    pub(crate) duration_ns: u64,
    pub(crate) median_ns: u64,
    pub(crate) by_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Ranks {
    pub(crate) rows: Vec<RankRow>,
    /// Steps that at least two ranks finished, in order.
    pub(crate) stragglers: Vec<StragglerStep>,
}

impl Ranks {
    /// The rank slowest in most steps: (rank, steps it was slowest in).
    pub(crate) fn most_often_slowest(&self) -> Option<(u32, usize)> {
        let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
        for s in &self.stragglers {
            *counts.entry(s.slowest_rank).or_default() += 1;
        }
        counts.into_iter().max_by_key(|&(rank, n)| (n, std::cmp::Reverse(rank)))
    }
}

#[derive(Default)]
struct Acc {
    op_ns: u64,
    ops: u64,
    nccl_ns: u64,
    nccl: u64,
    data_wait_ns: u64,
    io_ns: u64,
    gpu_sync_ns: u64,
    /// End times of the steps of the rank's own process.
    step_ends: Vec<u64>,
    /// The collective op ranges (start, end) of the rank, to take out of its step times.
    collective_ranges: Vec<(u64, u64)>,
}

/// Collects while the summary streams the events.
#[derive(Default)]
pub(super) struct RankTally {
    /// (pid, image) → (rank, is the rank's own process); `None`: no rank.
    of_image: FxHashMap<(u32, usize), Option<(u32, bool)>>,
    collective_names: FxHashMap<u64, bool>,
    ranks: FxHashMap<u32, Acc>,
}

impl RankTally {
    pub(super) fn add(&mut self, meta: &RunMeta, func: Func, event: &Event, image: usize) {
        let Some((rank, own)) = *self.of_image.entry((event.pid, image)).or_insert_with(|| {
            let info = meta.images.get(&event.pid)?.get(image)?.info.rank.as_ref()?;
            Some((info.rank, meta.rank_main(event.pid, image) == Some(event.pid)))
        }) else {
            return;
        };
        let acc = self.ranks.entry(rank).or_default();
        match func.api() {
            Api::Itt if func == Func::IttTask => {
                let span = IttSpan::from_event(event);
                if span.domain == DATA && span.name == WAIT {
                    acc.data_wait_ns += span.dur;
                } else if span.domain == PHASE && span.name == OPTIMIZER_STEP && own {
                    acc.step_ends.push(span.start + span.dur);
                } else if span.domain == PYTORCH
                    && *self
                        .collective_names
                        .entry(span.name)
                        .or_insert_with(|| is_collective_op(&meta.string(span.name)))
                {
                    acc.op_ns += span.dur;
                    acc.ops += 1;
                    acc.collective_ranges.push((span.start, span.start + span.dur));
                }
            }
            Api::Itt => {}
            Api::Libc => {
                if matches!(
                    func.class(),
                    Class::Open
                        | Class::Read
                        | Class::Write
                        | Class::Close
                        | Class::Seek
                        | Class::Sync
                        | Class::Map
                ) {
                    acc.io_ns += event.dur;
                }
            }
            Api::CudaRuntime | Api::CudaDriver | Api::Nccl => {
                if event.flags & FLAG_NESTED != 0 {
                    return;
                }
                if func.blocks_host() {
                    acc.gpu_sync_ns += event.dur;
                }
                if func.class() == Class::Collective {
                    acc.nccl_ns += event.dur;
                    acc.nccl += 1;
                }
                if func.class() == Class::Collective || func.blocks_host() {
                    acc.collective_ranges.push((event.start, event.start + event.dur));
                }
            }
        }
    }

    /// `None` when no process of the run has a rank.
    pub(super) fn finish(self, meta: &RunMeta) -> Option<Ranks> {
        if !meta.has_ranks() {
            return None;
        }
        let mut rows: BTreeMap<u32, RankRow> = BTreeMap::new();
        let mut hosts: BTreeMap<u32, std::collections::BTreeSet<String>> = BTreeMap::new();
        for (&pid, images) in &meta.images {
            for (index, image) in images.iter().enumerate() {
                let Some(info) = &image.info.rank else { continue };
                let row = rows
                    .entry(info.rank)
                    .or_insert_with(|| RankRow { rank: info.rank, ..Default::default() });
                row.processes += 1;
                if meta.rank_main(pid, index) == Some(pid) && !row.main_pids.contains(&pid) {
                    row.main_pids.push(pid);
                }
                hosts.entry(info.rank).or_default().insert(meta.host_of(image.info.node).to_string());
            }
        }
        let mut steps: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (rank, mut acc) in self.ranks {
            let Some(row) = rows.get_mut(&rank) else { continue };
            (row.collectives_ns, row.collectives) =
                if acc.ops > 0 { (acc.op_ns, acc.ops) } else { (acc.nccl_ns, acc.nccl) };
            row.data_wait_ns = acc.data_wait_ns;
            row.io_ns = acc.io_ns;
            row.gpu_sync_ns = acc.gpu_sync_ns;
            row.steps = acc.step_ends.len() as u64;
            acc.step_ends.sort_unstable();
            let durations: Vec<u64> = acc.step_ends.windows(2).map(|w| w[1] - w[0]).collect();
            row.step_median_ns = median(&durations);
            acc.collective_ranges.sort_unstable();
            let busy = acc
                .step_ends
                .windows(2)
                .map(|w| (w[1] - w[0]).saturating_sub(covered(&acc.collective_ranges, w[0], w[1])))
                .collect();
            steps.insert(rank, busy);
        }
        for (rank, row) in rows.iter_mut() {
            row.hosts = hosts.remove(rank).map(|h| h.into_iter().collect()).unwrap_or_default();
            row.main_pids.sort_unstable();
        }
        Some(Ranks { rows: rows.into_values().collect(), stragglers: stragglers(&steps) })
    }
}

/// Length of the union of `ranges` (sorted by start) inside [from, to).
fn covered(ranges: &[(u64, u64)], from: u64, to: u64) -> u64 {
    let first = ranges.partition_point(|r| r.1 <= from);
    let (mut total, mut reach) = (0, from);
    for &(start, end) in ranges.iter().skip(first) {
        if start >= to {
            break;
        }
        let (start, end) = (start.max(reach), end.min(to));
        if end > start {
            total += end - start;
            reach = end;
        }
    }
    total
}

fn median(values: &[u64]) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted[(sorted.len() - 1) / 2]
}

/// Per step that two ranks or more finished: the slowest rank and its excess over the median
/// (lower median) of the ranks' times outside collectives. Step k here is the time from the end
/// of step k to the end of step k + 1, numbered from 1 like the step it ends.
fn stragglers(steps: &BTreeMap<u32, Vec<u64>>) -> Vec<StragglerStep> {
    let longest = steps.values().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .filter_map(|k| {
            let times: Vec<(u32, u64)> =
                steps.iter().filter_map(|(&rank, d)| d.get(k).map(|&ns| (rank, ns))).collect();
            if times.len() < 2 {
                return None;
            }
            let &(slowest_rank, duration_ns) =
                times.iter().max_by_key(|&&(rank, ns)| (ns, std::cmp::Reverse(rank)))?;
            let median_ns = median(&times.iter().map(|t| t.1).collect::<Vec<_>>());
            Some(StragglerStep {
                step: k + 1,
                slowest_rank,
                duration_ns,
                median_ns,
                by_ns: duration_ns - median_ns,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_rank_per_step_and_its_excess_over_the_median() {
        let steps = BTreeMap::from([(0, vec![10, 10, 30]), (1, vec![20, 12, 10]), (2, vec![11, 11])]);
        let s = stragglers(&steps);
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].step, s[0].slowest_rank, s[0].by_ns), (1, 1, 9));
        assert_eq!((s[1].slowest_rank, s[1].duration_ns, s[1].by_ns), (1, 12, 1));
        // Only ranks 0 and 1 have a third step: the median of two is the lower one.
        assert_eq!((s[2].step, s[2].slowest_rank, s[2].by_ns), (3, 0, 20));
        let ranks = Ranks { rows: vec![], stragglers: s };
        assert_eq!(ranks.most_often_slowest(), Some((1, 2)));
        assert!(is_collective_op("gloo:all_reduce") && is_collective_op("nccl:all_gather"));
        assert!(!is_collective_op("c10d::allreduce_"));
    }

    #[test]
    fn union_of_ranges_inside_a_window() {
        let ranges = [(0, 10), (5, 15), (20, 30), (40, 50)];
        assert_eq!(covered(&ranges, 0, 100), 35);
        assert_eq!(covered(&ranges, 8, 25), 12);
        assert_eq!(covered(&ranges, 30, 40), 0);
        assert_eq!(covered(&[], 0, 10), 0);
    }
}
