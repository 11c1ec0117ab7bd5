//! What the GPUs did, from a run's GPU activity frames (CUPTI records, format 1.5): per device
//! the time some kernel, copy or memset ran (their intervals' union) and the rest of the job's
//! time, kernels and copies by GPU time, the links from GPU work to the host calls that issued
//! it, what was lost, and, when there is no timeline, why.
//!
//! Fed frame by frame ([`TimelineTally::add`]); kernels, copies and memsets are linked to their
//! host calls at the end, when every link of the run is known (CUPTI hands its records over
//! later than the calls that issued them).

mod reasons;

use std::collections::{BTreeMap, HashMap, HashSet};

use mlprof_format::gpu::{
    ACTIVITY_COUNTS, ACTIVITY_KERNEL, ACTIVITY_LINK, ACTIVITY_MEMCPY, ACTIVITY_MEMSET, ACTIVITY_STATE,
    GpuActivity, GpuTimelineState, copy_kind_name,
};

use crate::run::RunMeta;
use crate::run::demangle;

/// The GPU timeline of a run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuTimeline {
    /// `Some("cupti")` when some process collected one.
    pub(crate) source: Option<&'static str>,
    /// Why there is none, when no process collected one.
    pub(crate) unavailable: Option<String>,
    /// Processes whose timeline stood down or could not be linked, said once each.
    pub(crate) notes: Vec<String>,
    pub(crate) devices: Vec<DeviceTime>,
    /// By GPU time, most first.
    pub(crate) kernels: Vec<KernelTime>,
    /// By copy kind (`H2D`, `D2H`, `D2D`, …).
    pub(crate) copies: BTreeMap<&'static str, CopyTime>,
    /// Activities CUPTI dropped, and those lost to a full ring.
    pub(crate) dropped: u64,
    /// Kernels, copies and memsets whose host call was not recorded (or not linked).
    pub(crate) unmatched: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeviceTime {
    pub(crate) index: u8,
    /// Time at least one kernel, copy or memset ran.
    pub(crate) busy_ns: u64,
    /// `busy_ns` over the job's duration.
    pub(crate) busy_fraction: f64,
    /// The job's duration less `busy_ns`.
    pub(crate) idle_ns: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KernelTime {
    /// Demangled.
    pub(crate) name: String,
    pub(crate) count: u64,
    pub(crate) gpu_ns: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct CopyTime {
    pub(crate) count: u64,
    pub(crate) bytes: u64,
    pub(crate) gpu_ns: u64,
}

/// The GPU activity frames of a run, as they stream by.
#[derive(Default)]
pub(crate) struct TimelineTally {
    /// Per process: the state records it sent, in order.
    states: BTreeMap<u32, Vec<(GpuTimelineState, u64)>>,
    /// Per process: its last running totals.
    counts: HashMap<u32, GpuActivity>,
    /// (pid, correlation) of every host call linked.
    links: HashSet<(u32, u32)>,
    /// (pid, correlation) of every kernel, copy and memset.
    work: Vec<(u32, u32)>,
    /// Per device: the (start, end) of its kernels, copies and memsets.
    intervals: BTreeMap<u8, Vec<(u64, u64)>>,
    /// (pid, name string id) → (count, ns).
    kernels: HashMap<(u32, u64), (u64, u64)>,
    copies: BTreeMap<&'static str, CopyTime>,
}

impl TimelineTally {
    pub(crate) fn add(&mut self, records: &[GpuActivity]) {
        for record in records {
            match record.what {
                ACTIVITY_KERNEL | ACTIVITY_MEMCPY | ACTIVITY_MEMSET => self.work(record),
                ACTIVITY_LINK => {
                    self.links.insert((record.pid, record.correlation));
                }
                ACTIVITY_STATE => {
                    if let Some(state) = GpuTimelineState::from_u8(record.detail) {
                        self.states.entry(record.pid).or_default().push((state, record.value));
                    }
                }
                ACTIVITY_COUNTS => {
                    self.counts.insert(record.pid, *record);
                }
                _ => {}
            }
        }
    }

    fn work(&mut self, record: &GpuActivity) {
        let end = record.start.saturating_add(record.dur);
        self.intervals.entry(record.device).or_default().push((record.start, end));
        self.work.push((record.pid, record.correlation));
        match record.what {
            ACTIVITY_KERNEL => {
                let entry = self.kernels.entry((record.pid, record.value)).or_default();
                entry.0 += 1;
                entry.1 += record.dur;
            }
            ACTIVITY_MEMCPY => {
                let entry = self.copies.entry(copy_kind_name(record.detail)).or_default();
                entry.count += 1;
                entry.bytes += record.value;
                entry.gpu_ns += record.dur;
            }
            _ => {}
        }
    }

    /// The timeline over a job of `duration_ns`; `used_cuda`: whether any CUDA call was recorded
    /// (to say why there is no timeline).
    pub(crate) fn finish(self, meta: &RunMeta, duration_ns: u64, used_cuda: bool) -> GpuTimeline {
        let started =
            self.states.values().any(|s| s.iter().any(|(state, _)| *state == GpuTimelineState::Started));
        let devices = self
            .intervals
            .into_iter()
            .map(|(index, intervals)| {
                let busy_ns = union_ns(intervals);
                DeviceTime {
                    index,
                    busy_ns,
                    busy_fraction: if duration_ns == 0 { 0.0 } else { busy_ns as f64 / duration_ns as f64 },
                    idle_ns: duration_ns.saturating_sub(busy_ns),
                }
            })
            .collect();
        let mut by_name: HashMap<String, (u64, u64)> = HashMap::new();
        for ((_, name), (count, ns)) in self.kernels {
            let name = if name == 0 { "(unnamed kernel)".to_string() } else { demangle(&meta.string(name)) };
            let entry = by_name.entry(name).or_default();
            entry.0 += count;
            entry.1 += ns;
        }
        let mut kernels: Vec<KernelTime> =
            by_name.into_iter().map(|(name, (count, gpu_ns))| KernelTime { name, count, gpu_ns }).collect();
        kernels.sort_by(|a, b| b.gpu_ns.cmp(&a.gpu_ns).then(a.name.cmp(&b.name)));
        let unmatched = self.work.iter().filter(|key| !self.links.contains(key)).count() as u64;
        let dropped = self.counts.values().map(|c| c.grid + c.ring_dropped()).sum();
        GpuTimeline {
            source: started.then_some("cupti"),
            unavailable: (!started).then(|| reasons::why_none(&self.states, used_cuda)),
            notes: reasons::notes(&self.states),
            devices,
            kernels,
            copies: self.copies,
            dropped,
            unmatched,
        }
    }
}

/// The length of the union of `intervals` (ns).
fn union_ns(mut intervals: Vec<(u64, u64)>) -> u64 {
    intervals.sort_unstable();
    let (mut total, mut covered_to) = (0u64, 0u64);
    for (start, end) in intervals {
        let start = start.max(covered_to);
        if end > start {
            total += end - start;
            covered_to = end;
        }
    }
    total
}

#[cfg(test)]
mod tests;
