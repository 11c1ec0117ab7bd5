//! Every table's columns and how a row of it is filled, side by side: adding a column is one
//! line in a schema and one in the row function below it (values go in schema order; a
//! mismatch fails the table's own check when the row is pushed).

use mlprof_format::energy::EnergySample;
use mlprof_format::gpu::{ACTIVITY_MEMCPY, ACTIVITY_MEMSET, GpuActivity};
use mlprof_format::record::{Event, FLAG_NESTED, GpuCall, IttSpan};
use mlprof_format::sample::CpuSample;

use super::lookups::FileTotals;
use super::table::{Kind, Row, Spec, col, delta, dictionary, opt, plain};
use crate::run::{Image, RunMeta};

fn i64_of(v: u64) -> i64 {
    v as i64
}

/// `events`: file calls (C library).
pub(super) const EVENTS: &[Spec] = &[
    col("name", Kind::Str),
    col("pid", Kind::I32),
    col("tid", Kind::I32),
    delta("start_ns"),
    delta("dur_ns"),
    col("fd", Kind::I32),
    dictionary("bytes"),
    dictionary("ret"),
    col("errno", Kind::I32),
    opt("path", Kind::Str),
    opt("site_file", Kind::Str),
    opt("site_line", Kind::I32),
    opt("site_function", Kind::Str),
];

/// A call site's columns: file and function (symbols), line (`mlprof-collect --sites`).
#[derive(Clone, Copy)]
pub(super) struct SiteColumns {
    pub(super) file: u32,
    pub(super) line: i32,
    pub(super) function: u32,
}

/// A libc call named `name` that moved `bytes` on the file `path` (symbols), made at `site`.
#[inline]
pub(super) fn call(
    row: &mut Row<'_>,
    name: u32,
    event: &Event,
    bytes: u64,
    path: Option<u32>,
    site: Option<SiteColumns>,
) {
    row.str(name)
        .i32(event.pid as i32)
        .i32(event.tid as i32)
        .i64(i64_of(event.start))
        .i64(i64_of(event.dur))
        .i32(event.fd)
        .i64(i64_of(bytes))
        .i64(event.ret)
        .i32(event.errno)
        .opt_str(path)
        .opt_str(site.map(|s| s.file))
        .opt_i32(site.map(|s| s.line))
        .opt_str(site.map(|s| s.function));
}

/// `spans`: ITT tasks, frames, markers (ops, phases, DataLoader).
pub(super) const SPANS: &[Spec] = &[
    col("name", Kind::Str),
    col("domain", Kind::Str),
    col("kind", Kind::Str),
    col("pid", Kind::I32),
    col("tid", Kind::I32),
    delta("start_ns"),
    plain("dur_ns", Kind::I64),
    col("depth", Kind::I32),
    plain("id", Kind::I64),
    plain("parent", Kind::I64),
    opt("site_file", Kind::Str),
    opt("site_line", Kind::I32),
    opt("site_function", Kind::Str),
];

/// An ITT span: task, domain and kind as symbols; `site`: the Python line that made it.
#[inline]
pub(super) fn span(
    row: &mut Row<'_>,
    span: &IttSpan,
    (task, domain, kind): (u32, u32, u32),
    site: Option<SiteColumns>,
) {
    row.str(task)
        .str(domain)
        .str(kind)
        .i32(span.pid as i32)
        .i32(span.tid as i32)
        .i64(i64_of(span.start))
        .i64(i64_of(span.dur))
        .i32(span.depth)
        .i64(span.id as i64)
        .i64(span.parent as i64)
        .opt_str(site.map(|s| s.file))
        .opt_i32(site.map(|s| s.line))
        .opt_str(site.map(|s| s.function));
}

/// `gpu_calls`: CUDA runtime, driver and NCCL calls.
pub(super) const GPU_CALLS: &[Spec] = &[
    col("name", Kind::Str),
    col("pid", Kind::I32),
    col("tid", Kind::I32),
    delta("start_ns"),
    plain("dur_ns", Kind::I64),
    col("device", Kind::I32),
    col("status", Kind::I32),
    col("stream", Kind::I64),
    col("object", Kind::I64),
    col("bytes", Kind::I64),
    col("nested", Kind::Bool),
    opt("kernel", Kind::Str),
];

/// A GPU call named `name` that moved `bytes`; `kernel`: the launched kernel's name.
#[inline]
pub(super) fn gpu_call(row: &mut Row<'_>, name: u32, call: &GpuCall, bytes: u64, kernel: Option<u32>) {
    row.str(name)
        .i32(call.pid as i32)
        .i32(call.tid as i32)
        .i64(i64_of(call.start))
        .i64(i64_of(call.dur))
        .i32(call.device)
        .i32(call.status)
        .i64(call.stream as i64)
        .i64(call.object as i64)
        .i64(i64_of(bytes))
        .bool(call.flags & FLAG_NESTED != 0)
        .opt_str(kernel);
}

/// `gpu_activity`: what the GPUs did (CUPTI): kernels, copies, memsets, synchronizations and
/// CUPTI's overhead, each with the thread of the call that issued it when it was linked.
pub(super) const GPU_ACTIVITY: &[Spec] = &[
    col("pid", Kind::I32),
    col("device", Kind::I32),
    col("stream", Kind::I64),
    col("kind", Kind::Str),
    col("name", Kind::Str),
    plain("start_ns", Kind::I64),
    plain("end_ns", Kind::I64),
    col("bytes", Kind::I64),
    col("correlation", Kind::I64),
    opt("launch_tid", Kind::I32),
];

/// GPU work `a` of kind `kind` named `name` (a kernel's, or the copy's direction), issued by
/// thread `launch_tid` when linked.
#[inline]
pub(super) fn gpu_activity(
    row: &mut Row<'_>,
    a: &GpuActivity,
    (kind, name): (u32, u32),
    launch_tid: Option<u32>,
) {
    let bytes = if matches!(a.what, ACTIVITY_MEMCPY | ACTIVITY_MEMSET) { a.value } else { 0 };
    row.i32(a.pid as i32)
        .i32(i32::from(a.device))
        .i64(i64::from(a.stream))
        .str(kind)
        .str(name)
        .i64(i64_of(a.start))
        .i64(i64_of(a.start.saturating_add(a.dur)))
        .i64(i64_of(bytes))
        .i64(i64::from(a.correlation))
        .opt_i32(launch_tid.map(|tid| tid as i32));
}

/// `samples`: CPU samples (`mlprof-collect --sample`).
pub(super) const SAMPLES: &[Spec] = &[
    delta("time_ns"),
    col("pid", Kind::I32),
    col("tid", Kind::I32),
    opt("span", Kind::Str),
    opt("leaf_function", Kind::Str),
    opt("leaf_module", Kind::Str),
    opt("stack", Kind::Str),
];

/// The strings of a sample's stack: its leaf's function and module, the folded stack.
#[derive(Clone, Copy, Default)]
pub(super) struct StackColumns {
    pub(super) leaf_function: Option<u32>,
    pub(super) leaf_module: Option<u32>,
    pub(super) stack: Option<u32>,
}

/// A sample taken inside span `span` (a symbol; `None`: outside any) running `stack`.
pub(super) fn sample(row: &mut Row<'_>, s: &CpuSample, span: Option<u32>, stack: StackColumns) {
    row.i64(i64_of(s.time_ns))
        .i32(s.pid as i32)
        .i32(s.tid as i32)
        .opt_str(span)
        .opt_str(stack.leaf_function)
        .opt_str(stack.leaf_module)
        .opt_str(stack.stack);
}

/// `energy`: energy and device samples.
pub(super) const ENERGY: &[Spec] = &[
    col("device", Kind::I32),
    col("device_name", Kind::Str),
    col("device_kind", Kind::Str),
    col("in_run", Kind::Bool),
    delta("time_ns"),
    opt("energy_uj", Kind::I64),
    opt("power_mw", Kind::I32),
    opt("gpu_util", Kind::I32),
    opt("mem_util", Kind::I32),
    opt("sm_clock_mhz", Kind::I32),
    opt("mem_used_bytes", Kind::I64),
    opt("temperature_c", Kind::I32),
];

/// A sample of a device named `name` (symbols: name, kind) that is `in_run` or not.
pub(super) fn energy(row: &mut Row<'_>, s: &EnergySample, (name, kind, in_run): (u32, u32, bool)) {
    row.i32(s.device as i32)
        .str(name)
        .str(kind)
        .bool(in_run)
        .i64(i64_of(s.time_ns))
        .opt_i64(s.energy_uj.map(i64_of))
        .opt_i32(s.power_mw.map(|v| v as i32))
        .opt_i32(s.gpu_util.map(i32::from))
        .opt_i32(s.mem_util.map(i32::from))
        .opt_i32(s.sm_clock_mhz.map(|v| v as i32))
        .opt_i64(s.mem_used_bytes.map(i64_of))
        .opt_i32(s.temperature_c.map(|v| v as i32));
}

/// `processes`: one row per process image.
pub(super) const PROCESSES: &[Spec] = &[
    col("pid", Kind::I32),
    col("ppid", Kind::I32),
    col("exec_index", Kind::I32),
    opt("rank", Kind::I32),
    opt("local_rank", Kind::I32),
    opt("world_size", Kind::I32),
    opt("local_world_size", Kind::I32),
    opt("node_rank", Kind::I32),
    opt("rank_role", Kind::Str),
    opt("rank_main_pid", Kind::I32),
    col("node", Kind::I32),
    col("host", Kind::Str),
    col("cmdline", Kind::Str),
    col("forked", Kind::Bool),
    col("start_ns", Kind::I64),
    opt("exit_code", Kind::I32),
    opt("signal", Kind::I32),
];

/// What a process row names besides its image: symbols of its rank role, host and command
/// line, and its rank's main process.
pub(super) struct ProcessNames {
    pub(super) role: Option<u32>,
    pub(super) main: Option<u32>,
    pub(super) host: u32,
    pub(super) cmdline: u32,
}

/// Image `index` (exec order) of `pid`.
pub(super) fn process(row: &mut Row<'_>, pid: u32, index: usize, image: &Image, names: &ProcessNames) {
    let info = &image.info;
    let rank = info.rank.as_ref();
    row.i32(pid as i32)
        .i32(info.ppid as i32)
        .i32(index as i32)
        .opt_i32(rank.map(|r| r.rank as i32))
        .opt_i32(rank.and_then(|r| r.local_rank).map(|v| v as i32))
        .opt_i32(rank.and_then(|r| r.world_size).map(|v| v as i32))
        .opt_i32(rank.and_then(|r| r.local_world_size).map(|v| v as i32))
        .opt_i32(rank.and_then(|r| r.node_rank).map(|v| v as i32))
        .opt_str(names.role)
        .opt_i32(rank.and(names.main).map(|m| m as i32))
        .i32(info.node as i32)
        .str(names.host)
        .str(names.cmdline)
        .bool(info.forked)
        .i64(i64_of(info.start_ns))
        .opt_i32(image.exit.as_ref().and_then(|e| e.exit_code))
        .opt_i32(image.exit.as_ref().and_then(|e| e.signal));
}

/// `files`: per-path totals, as `mlprof summary` counts them.
pub(super) const FILES: &[Spec] = &[
    col("path", Kind::Str),
    col("opens", Kind::I64),
    col("calls", Kind::I64),
    col("bytes_read", Kind::I64),
    col("bytes_written", Kind::I64),
    col("total_ns", Kind::I64),
];

/// The totals of the path `path` (a symbol).
pub(super) fn file(row: &mut Row<'_>, path: u32, t: &FileTotals) {
    row.str(path)
        .i64(i64_of(t.opens))
        .i64(i64_of(t.calls))
        .i64(i64_of(t.bytes_read))
        .i64(i64_of(t.bytes_written))
        .i64(i64_of(t.total_ns));
}

/// `runs`: one row, the run itself.
pub(super) const RUNS: &[Spec] = &[
    col("source", Kind::Str),
    col("host", Kind::Str),
    col("command", Kind::Str),
    col("session", Kind::Str),
    col("start_mono_ns", Kind::I64),
    col("start_realtime_ns", Kind::I64),
    col("duration_ns", Kind::I64),
    col("events", Kind::I64),
    col("dropped", Kind::I64),
    col("nodes", Kind::I32),
    col("truncated", Kind::Bool),
];

/// The run of `meta`; `texts`: symbols of its source file, host, command and session.
pub(super) fn run(row: &mut Row<'_>, meta: &RunMeta, [source, host, command, session]: [u32; 4]) {
    let end_ns = meta.end.as_ref().map_or(meta.info.start_mono_ns, |e| e.end_ns);
    row.str(source)
        .str(host)
        .str(command)
        .str(session)
        .i64(i64_of(meta.info.start_mono_ns))
        .i64(i64_of(meta.info.start_realtime_ns))
        .i64(i64_of(end_ns.saturating_sub(meta.info.start_mono_ns)))
        .i64(i64_of(meta.end.as_ref().map_or(0, |e| e.events)))
        .i64(i64_of(meta.dropped()))
        .i32(meta.nodes.len().max(1) as i32)
        .bool(meta.truncated);
}

/// `ranges`: the capture ranges, times on the run's axis.
pub(super) const RANGES: &[Spec] = &[
    col("number", Kind::I32),
    col("source", Kind::Str),
    col("start_ns", Kind::I64),
    col("end_ns", Kind::I64),
    col("duration_ns", Kind::I64),
    col("opened_by", Kind::Str),
    col("closed_by", Kind::Str),
    col("opened_pid", Kind::I32),
    col("closed_pid", Kind::I32),
];

/// Range `r` of a run that started at `start` (its times are relative to it); `texts`:
/// symbols of the capture source and of what opened and closed it.
pub(super) fn range(
    row: &mut Row<'_>,
    start: u64,
    r: &crate::run::ranges::Range,
    [source, opened, closed]: [u32; 3],
) {
    row.i32(r.number as i32)
        .str(source)
        .i64(i64_of(start + r.start_ns))
        .i64(i64_of(start + r.end_ns))
        .i64(i64_of(r.duration_ns))
        .str(opened)
        .str(closed)
        .i32(r.opened_pid as i32)
        .i32(r.closed_pid as i32);
}
