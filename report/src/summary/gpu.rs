//! The GPU section of the summary: calls per CUDA runtime / driver / NCCL function, copies by
//! direction, host time blocked on the GPU, kernels by launches. Copies, blocked time and
//! kernels count outer calls only: a driver call made inside a recorded runtime call counts in
//! its own API row but not a second time there.

use std::collections::{BTreeMap, HashMap};

use mlprof_format::func::{Class, Func};
use mlprof_format::record::{Event, FLAG_NESTED, GpuCall, copy_direction_name};

use super::{CallStats, CallTable};
use crate::gpu_timeline::{GpuTimeline, TimelineTally};
use crate::run::RunMeta;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuSummary {
    pub(crate) apis: CallTable,
    /// Copies per direction (`H2D`, `D2H`, `D2D`, `H2H`, `default`).
    pub(crate) copies: BTreeMap<&'static str, CopyRow>,
    /// Per thread, in (pid, tid) order.
    pub(crate) host_blocked: Vec<BlockedRow>,
    /// By kernel name (several handles and processes can share one), most launched first.
    pub(crate) kernels: Vec<KernelRow>,
    /// What the GPUs did (CUPTI), or why the run has no such record.
    pub(crate) timeline: GpuTimeline,
}

impl GpuSummary {
    pub(crate) fn host_blocked_ns(&self) -> u64 {
        self.host_blocked.iter().map(|b| b.ns).sum()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct CopyRow {
    pub(crate) calls: u64,
    pub(crate) bytes: u64,
}

/// Time a thread spent in synchronizing calls and blocking copies.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BlockedRow {
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) ns: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KernelRow {
    /// Demangled.
    pub(crate) name: String,
    pub(crate) launches: u64,
    /// Host time in the launch calls.
    pub(crate) host_ns: u64,
}

#[derive(Default)]
pub(super) struct GpuTally {
    apis: CallTable,
    copies: BTreeMap<&'static str, CopyRow>,
    /// (pid, tid) → ns inside synchronizing calls and blocking copies.
    blocked: BTreeMap<(u32, u32), u64>,
    /// (pid, function handle) → (launches, host ns).
    kernels: HashMap<(u32, u64), (u64, u64)>,
}

impl GpuTally {
    pub(super) fn add(&mut self, func: Func, event: &Event, stats: &CallStats) {
        self.apis.entry(func.name()).or_default().add(stats);
        if event.flags & FLAG_NESTED != 0 {
            return;
        }
        let call = GpuCall::from_event(event);
        if func.blocks_host() {
            *self.blocked.entry((event.pid, event.tid)).or_default() += event.dur;
        }
        match func.class() {
            Class::Copy => {
                let entry = self.copies.entry(copy_direction_name(call.aux)).or_default();
                entry.calls += 1;
                entry.bytes += call.arg;
            }
            Class::Launch => {
                let entry = self.kernels.entry((event.pid, call.object)).or_default();
                entry.0 += 1;
                entry.1 += event.dur;
            }
            _ => {}
        }
    }

    /// `None` when no GPU call was seen (nor any GPU activity).
    pub(super) fn finish(
        self,
        meta: &RunMeta,
        timeline: TimelineTally,
        window: (u64, u64),
    ) -> Option<GpuSummary> {
        let used_cuda = !self.apis.is_empty();
        let timeline = timeline.finish(meta, window, used_cuda);
        if !used_cuda && timeline.source.is_none() {
            return None;
        }
        let mut by_name: HashMap<String, (u64, u64)> = HashMap::new();
        for (&(pid, handle), &(launches, ns)) in &self.kernels {
            let entry = by_name.entry(meta.kernel_name(pid, handle)).or_default();
            entry.0 += launches;
            entry.1 += ns;
        }
        let mut kernels: Vec<KernelRow> = by_name
            .into_iter()
            .map(|(name, (launches, host_ns))| KernelRow { name, launches, host_ns })
            .collect();
        kernels.sort_by(|a, b| b.launches.cmp(&a.launches).then(a.name.cmp(&b.name)));
        Some(GpuSummary {
            apis: self.apis,
            copies: self.copies,
            host_blocked: self
                .blocked
                .into_iter()
                .map(|((pid, tid), ns)| BlockedRow { pid, tid, ns })
                .collect(),
            kernels,
            timeline,
        })
    }
}
