//! An op's GPU energy from the GPU side (runs with a GPU timeline): each GPU's energy is shared
//! among the kernels, copies and memsets running on it (the overlap rule of `share`), and each
//! piece of work's share goes to the op that launched it — the innermost ITT span (of an
//! application or PyTorch domain, not mlprof's own) around its launch call on the launching
//! thread. What no work covers is the GPU's idle energy; work whose call lies in no op (or was
//! not linked) is "outside any op". Together they are the GPUs' measured energy, by
//! construction, for every GPU the timeline's devices can be matched with (CUDA device N with
//! the GPU of index N, or the one GPU of a run that has one).

use std::collections::HashMap;

use mlprof_format::energy::DEVICE_GPU;

use super::curve::EnergyCurve;
use super::load::{CALLS_LAYER, Device, EnergyRun, GpuWork};
use super::share::{Figure, share};

/// The GPU energy of a run split the GPU side's way.
#[derive(Default)]
pub(super) struct GpuSide {
    /// Per span key (an op): the GPU energy of the work it launched.
    pub(super) per_key: HashMap<u32, Figure>,
    /// While no work ran on the GPU.
    pub(super) idle: Figure,
    /// Work launched outside any op, or whose launch was not linked.
    pub(super) outside: Figure,
    /// The matched GPUs' measured energy over the run, J.
    pub(super) measured_j: f64,
    /// Work on a CUDA device no measured GPU could be matched with.
    pub(super) unmatched_work: usize,
}

/// Per (pid, tid): the op spans of the thread as (start, end, key), by start.
type OpsByThread = HashMap<(u32, u32), Vec<(u64, u64, u32)>>;

/// Walks at most this many earlier spans of a thread looking for the one around a launch
/// (siblings that ended before it); past it the work counts as outside any op.
const MAX_WALK: usize = 4096;

/// The GPU side's split, or `None` for a run without GPU work or without a measured GPU.
pub(super) fn gpu_side(run: &EnergyRun, curves: &[(&Device, EnergyCurve)]) -> Option<GpuSide> {
    let gpus: Vec<(&Device, &EnergyCurve)> =
        curves.iter().filter(|(d, _)| d.info.kind == DEVICE_GPU).map(|(d, c)| (*d, c)).collect();
    if run.gpu_work.is_empty() || gpus.is_empty() {
        return None;
    }
    let ops = ops_by_thread(run);
    let mut side = GpuSide::default();
    let mut by_device: HashMap<u8, Vec<&GpuWork>> = HashMap::new();
    for work in &run.gpu_work {
        by_device.entry(work.device).or_default().push(work);
    }
    for (device, work) in by_device {
        let matched: Vec<(&Device, &EnergyCurve)> =
            match gpus.iter().filter(|(d, _)| d.info.index == u32::from(device)) {
                found if found.clone().count() > 0 => found.copied().collect(),
                _ if gpus.len() == 1 => gpus.clone(),
                _ => {
                    side.unmatched_work += work.len();
                    continue;
                }
            };
        let intervals: Vec<(u64, u64)> = work
            .iter()
            .map(|w| {
                let start = w.start.clamp(run.start_ns, run.end_ns);
                (start, w.end.clamp(start, run.end_ns))
            })
            .collect();
        let sharing = share(&intervals, &matched);
        for (w, figure) in work.iter().zip(&sharing.per_interval) {
            match w.launch.and_then(|(tid, at)| op_around(&ops, w.pid, tid, at)) {
                Some(key) => side.per_key.entry(key).or_default().add(figure),
                None => side.outside.add(figure),
            }
        }
        for (_, curve) in &matched {
            let ((e0, u0), (e1, u1)) = (curve.at(run.start_ns as f64), curve.at(run.end_ns as f64));
            let total = (e1 - e0) / 1e6;
            side.measured_j += total;
            let idle = (total - sharing.attributed.min(total)).max(0.0);
            let u = curve.interval_uncertainty(run.start_ns as f64, run.end_ns as f64, u0, u1) / 1e6;
            side.idle.add(&Figure { energy: idle, var: u * u, gpu: idle, cpu: 0.0 });
        }
    }
    Some(side)
}

/// Per (pid, tid): the spans of application and PyTorch ITT domains, by start.
fn ops_by_thread(run: &EnergyRun) -> OpsByThread {
    let mut ops = OpsByThread::new();
    for span in &run.spans {
        let layer = &run.keys[span.key as usize].layer;
        if layer == CALLS_LAYER || layer.starts_with("itt:mlprof.") {
            continue;
        }
        ops.entry((span.pid, span.tid)).or_default().push((span.start, span.end, span.key));
    }
    for spans in ops.values_mut() {
        spans.sort_unstable_by_key(|&(start, _, _)| start);
    }
    ops
}

/// The key of the innermost span of thread (`pid`, `tid`) around time `at`: spans of one
/// thread nest, so walking back from the last one started by then, the first that has not
/// ended is the innermost.
fn op_around(ops: &OpsByThread, pid: u32, tid: u32, at: u64) -> Option<u32> {
    let spans = ops.get(&(pid, tid))?;
    let started = spans.partition_point(|&(start, _, _)| start <= at);
    spans[..started].iter().rev().take(MAX_WALK).find(|&&(_, end, _)| end > at).map(|&(_, _, key)| key)
}

#[cfg(test)]
mod tests;
