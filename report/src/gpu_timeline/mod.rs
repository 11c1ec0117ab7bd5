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
    ACTIVITY_COUNTS, ACTIVITY_KERNEL, ACTIVITY_LINK, ACTIVITY_MEMCPY, ACTIVITY_STATE, GpuActivity,
    GpuTimelineState, copy_kind_name,
};

use mlprof_format::func::{Class, Func};
use mlprof_format::record::{Event, FLAG_NESTED};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::host_time::{Category, category_of, exclusive_times};
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
    /// The process that issued most of the device's work, whose doings split `idle_ns`.
    pub(crate) main_pid: u32,
    pub(crate) idle_by: IdleBy,
    /// When the device was busy: its work's intervals merged, in time order (the report's
    /// busy-over-time panel; not in the JSON).
    pub(crate) busy_regions: Vec<(u64, u64)>,
}

impl DeviceTime {
    /// The share of each of `bins` slices of `bin_ns` from `start` the device was busy.
    pub(crate) fn busy_by_bin(&self, start: u64, bin_ns: u64, bins: usize) -> Vec<f64> {
        let mut busy = vec![0u64; bins];
        let bin_ns = bin_ns.max(1);
        for &(from, to) in &self.busy_regions {
            let (mut at, to) = (from.max(start), to.min(start.saturating_add(bin_ns * bins as u64)));
            while at < to {
                let bin = ((at - start) / bin_ns) as usize;
                let bin_end = start + (bin as u64 + 1) * bin_ns;
                let upto = to.min(bin_end);
                if let Some(slot) = busy.get_mut(bin) {
                    *slot += upto - at;
                }
                at = upto;
            }
        }
        busy.into_iter().map(|ns| ns as f64 / bin_ns as f64).collect()
    }
}

/// A device's idle time by what its main process was doing meanwhile, each instant in the
/// first that applies: waiting for a DataLoader batch, blocked on the GPU (a synchronization or
/// blocking copy: waiting for work that had not started?), file I/O, an op or training phase or
/// a launch (the host preparing work), anything else.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct IdleBy {
    pub(crate) data_wait: u64,
    pub(crate) sync: u64,
    pub(crate) io: u64,
    pub(crate) ops: u64,
    pub(crate) other: u64,
}

/// The parts of [`IdleBy`] as the renderings name them, in its order: (JSON key, label).
pub(crate) const IDLE_PARTS: [(&str, &str); 5] = [
    ("data_wait", "data wait"),
    ("sync", "GPU sync"),
    ("io", "file I/O"),
    ("ops", "ops & launches"),
    ("other", "other"),
];

impl IdleBy {
    /// The parts' values, in the order of [`IDLE_PARTS`].
    pub(crate) fn values(&self) -> [u64; 5] {
        [self.data_wait, self.sync, self.io, self.ops, self.other]
    }
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

/// The GPU activity frames of a run, as they stream by, and what the processes that may issue
/// GPU work did on the host.
#[derive(Default)]
pub(crate) struct TimelineTally {
    /// Processes that may be a device's main: those with no recorded parent, and ranks' own
    /// (asked at every event of the summary's pass: a fast hash).
    candidates: FxHashSet<u32>,
    /// Per candidate: its calls and spans by [`Category`] (launches count as ops).
    host: FxHashMap<u32, Vec<(Category, u64, u64)>>,
    /// (device, pid) → kernels, copies and memsets issued.
    work_by: HashMap<(u8, u32), u64>,
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
    /// A tally for the run `meta` describes (its processes name the candidates).
    pub(crate) fn new(meta: &RunMeta) -> TimelineTally {
        let candidates = meta
            .images
            .iter()
            .filter(|(pid, images)| {
                let parent_recorded = images.first().is_some_and(|i| meta.images.contains_key(&i.info.ppid));
                !parent_recorded || meta.rank_main(**pid, 0) == Some(**pid)
            })
            .map(|(pid, _)| *pid)
            .collect();
        TimelineTally { candidates, ..TimelineTally::default() }
    }

    /// A host call or span: kept when its process may be a device's main and it says what the
    /// process was doing; `names_file`: whether the call's descriptor names a file (the caller
    /// looked it up already).
    #[inline]
    pub(crate) fn add_host(&mut self, func: Func, event: &Event, names_file: bool) {
        if !self.candidates.contains(&event.pid) {
            return;
        }
        let category = category_of(func, event, || names_file)
            .or((func.class() == Class::Launch && event.flags & FLAG_NESTED == 0)
                .then_some(Category::OpsPhases));
        if let Some(category) = category {
            let end = event.start.saturating_add(event.dur);
            self.host.entry(event.pid).or_default().push((category, event.start, end));
        }
    }

    pub(crate) fn add(&mut self, records: &[GpuActivity]) {
        for record in records {
            match record.what {
                _ if record.is_work() => self.work(record),
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
        *self.work_by.entry((record.device, record.pid)).or_default() += 1;
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

    /// The timeline over a job that ran from `from` to `to` (CLOCK_MONOTONIC ns); `used_cuda`:
    /// whether any CUDA call was recorded (to say why there is no timeline).
    pub(crate) fn finish(mut self, meta: &RunMeta, (from, to): (u64, u64), used_cuda: bool) -> GpuTimeline {
        let started =
            self.states.values().any(|s| s.iter().any(|(state, _)| *state == GpuTimelineState::Started));
        let intervals = std::mem::take(&mut self.intervals);
        // Busy and idle time within the capture ranges (the whole job without them).
        let spans = meta.window().spans(from, to);
        let devices =
            intervals.into_iter().map(|(index, intervals)| self.device(index, intervals, &spans)).collect();
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

impl TimelineTally {
    /// Device `index`'s busy time (the union of its work's `intervals`) within the job's
    /// `spans` (the capture ranges, or the whole job), and its idle time split by what its main
    /// process did meanwhile.
    fn device(&self, index: u8, intervals: Vec<(u64, u64)>, spans: &[(u64, u64)]) -> DeviceTime {
        let main_pid = self
            .work_by
            .iter()
            .filter(|((device, _), _)| *device == index)
            .max_by_key(|((_, pid), count)| (**count, std::cmp::Reverse(*pid)))
            .map_or(0, |((_, pid), _)| *pid);
        // Busy first (index 0): an instant the GPU works is not idle, whatever the host did.
        let busy_regions = merged(intervals);
        let mut all: Vec<(usize, u64, u64)> =
            busy_regions.iter().map(|&(start, end)| (0, start, end)).collect();
        let host = self.host.get(&main_pid).map_or(&[][..], Vec::as_slice);
        all.extend(host.iter().map(|&(category, start, end)| (1 + category as usize, start, end)));
        let mut times = [0u64; 5];
        for &(from, to) in spans {
            let span: [u64; 5] = exclusive_times(&all, |i| i, from, to);
            times.iter_mut().zip(span).for_each(|(total, t)| *total += t);
        }
        let [busy_ns, data_wait, sync, io, ops] = times;
        let job_ns = spans.iter().map(|&(from, to)| to.saturating_sub(from)).sum::<u64>();
        let idle_ns = job_ns.saturating_sub(busy_ns);
        let other = idle_ns.saturating_sub(data_wait + sync + io + ops);
        DeviceTime {
            index,
            busy_ns,
            busy_fraction: if job_ns == 0 { 0.0 } else { busy_ns as f64 / job_ns as f64 },
            idle_ns,
            main_pid,
            idle_by: IdleBy { data_wait, sync, io, ops, other },
            busy_regions,
        }
    }
}

/// `intervals` merged where they overlap or touch, in time order (a device's busy regions).
pub(crate) fn merged(mut intervals: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    intervals.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (start, end) in intervals {
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

#[cfg(test)]
mod tests;
