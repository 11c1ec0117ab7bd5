//! `mlprof summary`: strace -c style tables for the whole tree and per process, the top files,
//! drops; or the same as JSON.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::{Event, FLAG_NESTED, GpuCall, copy_direction_name};
use mlprof_format::runfile::Frame;
use serde::Serialize;
use serde_json::{Value, json};

use crate::run::{self, RunMeta, bytes_moved};

#[derive(Default, Clone, Copy, Serialize)]
pub struct CallStats {
    pub count: u64,
    pub errors: u64,
    pub total_ns: u64,
    pub bytes: u64,
}

impl CallStats {
    fn add(&mut self, other: &CallStats) {
        self.count += other.count;
        self.errors += other.errors;
        self.total_ns += other.total_ns;
        self.bytes += other.bytes;
    }
}

#[derive(Default)]
struct FileStats {
    opens: u64,
    calls: u64,
    bytes_read: u64,
    bytes_written: u64,
    total_ns: u64,
    by_call: BTreeMap<&'static str, u64>,
}

type CallTable = BTreeMap<&'static str, CallStats>;

pub struct Summary {
    meta: RunMeta,
    events: u64,
    unknown_events: u64,
    calls: CallTable,
    per_image: HashMap<(u32, usize), CallTable>,
    files: HashMap<u64, FileStats>,
    first_ns: u64,
    last_ns: u64,
    gpu: GpuStats,
    pipeline: crate::pipeline::Pipeline,
}

/// The GPU section: outer calls only (a driver call made inside a runtime call is counted in
/// its own API row but not again in copies, blocked time or kernels).
#[derive(Default)]
struct GpuStats {
    apis: CallTable,
    /// direction → (calls, bytes).
    copies: BTreeMap<&'static str, (u64, u64)>,
    /// (pid, tid) → ns inside synchronizing calls and blocking copies.
    blocked: BTreeMap<(u32, u32), u64>,
    /// (pid, function handle) → (launches, host ns).
    kernels: HashMap<(u32, u64), (u64, u64)>,
}

impl GpuStats {
    fn add(&mut self, func: Func, event: &Event, stats: &CallStats) {
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
                entry.0 += 1;
                entry.1 += call.arg;
            }
            Class::Launch => {
                let entry = self.kernels.entry((event.pid, call.object)).or_default();
                entry.0 += 1;
                entry.1 += event.dur;
            }
            _ => {}
        }
    }

    fn is_empty(&self) -> bool {
        self.apis.is_empty()
    }

    /// Kernels by name (several handles and processes can share a name), most launched first.
    fn kernels_by_name(&self, meta: &RunMeta) -> Vec<(String, u64, u64)> {
        let mut by_name: HashMap<String, (u64, u64)> = HashMap::new();
        for (&(pid, handle), &(launches, ns)) in &self.kernels {
            let entry = by_name.entry(meta.kernel_name(pid, handle)).or_default();
            entry.0 += launches;
            entry.1 += ns;
        }
        let mut list: Vec<_> = by_name.into_iter().map(|(name, (n, ns))| (name, n, ns)).collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        list
    }

    fn to_json(&self, meta: &RunMeta) -> Value {
        let copies: serde_json::Map<String, Value> = self
            .copies
            .iter()
            .map(|(dir, (calls, bytes))| (dir.to_string(), json!({"calls": calls, "bytes": bytes})))
            .collect();
        let blocked: Vec<Value> =
            self.blocked.iter().map(|(&(pid, tid), &ns)| json!({"pid": pid, "tid": tid, "ns": ns})).collect();
        let kernels: Vec<Value> = self
            .kernels_by_name(meta)
            .into_iter()
            .map(|(name, launches, ns)| json!({"name": name, "launches": launches, "host_ns": ns}))
            .collect();
        json!({
            "apis": self.apis,
            "copies": copies,
            "host_blocked_ns": self.blocked.values().sum::<u64>(),
            "host_blocked": blocked,
            "kernels": kernels,
        })
    }

    fn print_text(&self, meta: &RunMeta, top: usize) {
        println!();
        println!("GPU (CUDA runtime, driver, NCCL):");
        print_call_table(&self.apis);
        if !self.copies.is_empty() {
            println!();
            println!("  Copies:");
            for (dir, (calls, bytes)) in &self.copies {
                println!("    {dir:>7}: {calls} calls, {}", format_bytes(*bytes));
            }
        }
        let total: u64 = self.blocked.values().sum();
        println!();
        println!("  Host blocked on GPU (synchronizations and blocking copies): {}", format_ns(total));
        for (&(pid, tid), &ns) in &self.blocked {
            println!("    pid {pid} tid {tid}: {}", format_ns(ns));
        }
        let kernels = self.kernels_by_name(meta);
        if !kernels.is_empty() {
            println!();
            println!("  Top kernels by launches:");
            for (name, launches, ns) in kernels.iter().take(top) {
                println!("    {launches:>10} launches {:>10} host  {}", format_ns(*ns), truncate(name, 100));
            }
        }
    }
}

impl Summary {
    pub fn compute(path: &Path) -> Result<Summary, String> {
        let meta = RunMeta::load(path)?;
        let mut summary = Summary {
            events: 0,
            unknown_events: 0,
            calls: BTreeMap::new(),
            per_image: HashMap::new(),
            files: HashMap::new(),
            first_ns: u64::MAX,
            last_ns: 0,
            gpu: GpuStats::default(),
            pipeline: Default::default(),
            meta,
        };
        // Per (pid, image, function) while streaming, folded into the tables at the end: one
        // fast hash lookup per event instead of two ordered-map walks by name.
        let mut by_image_and_func: rustc_hash::FxHashMap<(u32, usize, u16), CallStats> = Default::default();
        let mut reader = run::open(path)?;
        while let Some(frame) = reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))? {
            let Frame::Events(events) = frame else {
                continue;
            };
            for event in events {
                let Some(func) = Func::from_id(event.kind) else {
                    summary.unknown_events += 1;
                    continue;
                };
                summary.events += 1;
                summary.first_ns = summary.first_ns.min(event.start);
                summary.last_ns = summary.last_ns.max(event.start + event.dur);
                let stats = CallStats {
                    count: 1,
                    errors: event.is_error() as u64,
                    total_ns: event.dur,
                    bytes: bytes_moved(func, event),
                };
                if matches!(func.api(), Api::CudaRuntime | Api::CudaDriver | Api::Nccl) {
                    summary.gpu.add(func, event, &stats);
                } else if func.api() == Api::Itt {
                    summary.pipeline.add(func, event);
                }
                let image = summary.meta.image_at(event.pid, event.start).unwrap_or(0);
                by_image_and_func.entry((event.pid, image, event.kind)).or_default().add(&stats);
                if let Some(path_id) = summary.meta.fds.path_of(&summary.meta, event) {
                    let file = summary.files.entry(path_id).or_default();
                    file.calls += 1;
                    file.total_ns += event.dur;
                    *file.by_call.entry(func.name()).or_default() += 1;
                    match func.class() {
                        Class::Open if !event.is_error() => file.opens += 1,
                        Class::Read => file.bytes_read += stats.bytes,
                        Class::Write => file.bytes_written += stats.bytes,
                        _ => {}
                    }
                }
            }
        }
        for ((pid, image, kind), stats) in by_image_and_func {
            let Some(func) = Func::from_id(kind) else { continue };
            summary.calls.entry(func.name()).or_default().add(&stats);
            summary.per_image.entry((pid, image)).or_default().entry(func.name()).or_default().add(&stats);
        }
        summary.add_aggregates();
        Ok(summary)
    }

    /// Aggregated calls (clock reads) join the tables with their exact counts. When only some
    /// calls were timed, the total time is scaled from the timed ones.
    fn add_aggregates(&mut self) {
        let samples: Vec<_> = self.meta.aggregates.values().cloned().collect();
        for sample in samples {
            let Some(func) = Func::from_id(sample.func) else {
                continue;
            };
            let total_ns = if sample.timed > 0 && sample.timed < sample.count {
                (sample.timed_ns as u128 * sample.count as u128 / sample.timed as u128) as u64
            } else {
                sample.timed_ns
            };
            let stats = CallStats { count: sample.count, errors: 0, total_ns, bytes: 0 };
            self.events += sample.count;
            self.calls.entry(func.name()).or_default().add(&stats);
            let image = self.meta.image_at(sample.pid, sample.time_ns).unwrap_or(0);
            self.per_image
                .entry((sample.pid, image))
                .or_default()
                .entry(func.name())
                .or_default()
                .add(&stats);
        }
    }

    fn duration_ns(&self) -> u64 {
        let start = self.meta.info.start_mono_ns;
        let end = self.meta.end.as_ref().map(|e| e.end_ns).unwrap_or(self.last_ns);
        end.max(self.last_ns).saturating_sub(start.min(self.first_ns))
    }

    /// Process images in (start time, pid) order, with their call tables.
    fn images(&self) -> Vec<(u32, usize, &run::Image)> {
        let mut list: Vec<_> = self
            .meta
            .images
            .iter()
            .flat_map(|(&pid, images)| images.iter().enumerate().map(move |(i, image)| (pid, i, image)))
            .collect();
        list.sort_by_key(|(pid, i, image)| (image.info.start_ns, *pid, *i));
        list
    }

    fn file_list(&self) -> Vec<(String, &FileStats)> {
        let mut files: Vec<_> = self.files.iter().map(|(&id, stats)| (self.meta.string(id), stats)).collect();
        files.sort_by(|a, b| {
            (b.1.bytes_read + b.1.bytes_written)
                .cmp(&(a.1.bytes_read + a.1.bytes_written))
                .then(a.0.cmp(&b.0))
        });
        files
    }

    pub fn to_json(&self) -> Value {
        let processes: Vec<Value> = self
            .images()
            .into_iter()
            .map(|(pid, index, image)| {
                let calls = self.per_image.get(&(pid, index)).cloned().unwrap_or_default();
                json!({
                    "pid": pid,
                    "ppid": image.info.ppid,
                    "cmdline": image.info.argv.join(" "),
                    "exec_index": index,
                    "forked": image.info.forked,
                    "start_ns": image.info.start_ns.saturating_sub(self.meta.info.start_mono_ns),
                    "exit_code": image.exit.as_ref().and_then(|e| e.exit_code),
                    "signal": image.exit.as_ref().and_then(|e| e.signal),
                    "calls": calls,
                })
            })
            .collect();
        let files: Vec<Value> = self
            .file_list()
            .into_iter()
            .map(|(path, f)| {
                json!({
                    "path": path,
                    "opens": f.opens,
                    "calls": f.calls,
                    "bytes_read": f.bytes_read,
                    "bytes_written": f.bytes_written,
                    "total_ns": f.total_ns,
                    "by_call": f.by_call,
                })
            })
            .collect();
        json!({
            "events": self.events,
            "dropped": self.meta.dropped(),
            "truncated": self.meta.truncated,
            "duration_ns": self.duration_ns(),
            "command": self.meta.info.command,
            "host": self.meta.info.host,
            "clock_source": self.meta.info.clock_source,
            "unknown_events": self.unknown_events,
            "processes": processes,
            "calls": self.calls,
            "files": files,
            "gpu": if self.gpu.is_empty() { Value::Null } else { self.gpu.to_json(&self.meta) },
            "spans": self.pipeline.spans_json(&self.meta),
            "data_pipeline": self.pipeline.data_json(&self.meta),
        })
    }

    pub fn print_text(&self, top: usize) {
        let meta = &self.meta;
        let images = self.images();
        let pids: std::collections::HashSet<u32> = images.iter().map(|i| i.0).collect();
        println!(
            "mlprof summary: {} on {} — {:.3} s, {} process(es), {} image(s), {} thread(s)",
            meta.command_line(),
            meta.info.host,
            self.duration_ns() as f64 / 1e9,
            pids.len(),
            images.len(),
            meta.threads.len()
        );
        for warning in &meta.warnings {
            println!("warning: {warning}");
        }
        println!();
        println!("Whole process tree:");
        print_call_table(&self.calls);
        println!();
        println!("Per process:");
        for (pid, index, image) in &images {
            let exit = match image.exit.as_ref() {
                Some(e) => match (e.exit_code, e.signal) {
                    (Some(code), _) => format!("exit {code}"),
                    (None, Some(sig)) => format!("killed by signal {sig}"),
                    _ => "exit ?".into(),
                },
                None => "exit not seen".into(),
            };
            let calls = self.per_image.get(&(*pid, *index));
            let total: u64 = calls.map(|c| c.values().map(|s| s.count).sum()).unwrap_or(0);
            println!(
                "  pid {pid} (ppid {}){} {} — {total} calls, {exit}",
                image.info.ppid,
                if *index > 0 {
                    " [exec]"
                } else if image.info.forked {
                    " [fork]"
                } else {
                    ""
                },
                truncate(&image.info.argv.join(" "), 80)
            );
            if let Some(calls) = calls {
                let mut top_calls: Vec<_> = calls.iter().collect();
                top_calls.sort_by_key(|(_, s)| std::cmp::Reverse(s.total_ns));
                let line: Vec<String> = top_calls
                    .iter()
                    .take(6)
                    .map(|(name, s)| format!("{name} {}×/{}", s.count, format_ns(s.total_ns)))
                    .collect();
                if !line.is_empty() {
                    println!("      {}", line.join(", "));
                }
            }
        }
        if !self.gpu.is_empty() {
            self.gpu.print_text(meta, top);
        }
        self.pipeline.print_text(meta, top);
        let files = self.file_list();
        if !files.is_empty() {
            println!();
            println!("Top files by bytes:");
            println!("  {:>12} {:>12} {:>8} {:>10}  path", "read", "written", "calls", "time");
            for (path, f) in files.iter().take(top) {
                println!(
                    "  {:>12} {:>12} {:>8} {:>10}  {}",
                    format_bytes(f.bytes_read),
                    format_bytes(f.bytes_written),
                    f.calls,
                    format_ns(f.total_ns),
                    path
                );
            }
            let mut by_time: Vec<_> = files.iter().collect();
            by_time.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then(a.0.cmp(&b.0)));
            println!();
            println!("Top files by time:");
            println!("  {:>10} {:>8} {:>12}  path", "time", "calls", "bytes");
            for (path, f) in by_time.iter().take(top) {
                println!(
                    "  {:>10} {:>8} {:>12}  {}",
                    format_ns(f.total_ns),
                    f.calls,
                    format_bytes(f.bytes_read + f.bytes_written),
                    path
                );
            }
        }
        println!();
        let dropped = meta.dropped();
        if dropped == 0 {
            println!("Dropped records: 0");
        } else {
            println!(
                "Dropped records: {dropped} — the counts above are missing these calls (ring full or no free lane)"
            );
        }
        if self.unknown_events > 0 {
            println!(
                "Skipped {} events of kinds this mlprof does not know (newer recorder?)",
                self.unknown_events
            );
        }
    }
}

fn print_call_table(calls: &CallTable) {
    let total_ns: u64 = calls.values().map(|s| s.total_ns).sum();
    println!(
        "{:>6} {:>11} {:>11} {:>10} {:>8} {:>12}  function",
        "% time", "seconds", "usecs/call", "calls", "errors", "bytes"
    );
    println!("------ ----------- ----------- ---------- -------- ------------  ----------------");
    let mut rows: Vec<_> = calls.iter().collect();
    rows.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then(a.0.cmp(b.0)));
    let mut sum = CallStats::default();
    for (name, s) in rows {
        sum.add(s);
        println!(
            "{:>6.2} {:>11.6} {:>11.3} {:>10} {:>8} {:>12}  {}",
            if total_ns > 0 { s.total_ns as f64 * 100.0 / total_ns as f64 } else { 0.0 },
            s.total_ns as f64 / 1e9,
            if s.count > 0 { s.total_ns as f64 / 1e3 / s.count as f64 } else { 0.0 },
            s.count,
            s.errors,
            s.bytes,
            name
        );
    }
    println!("------ ----------- ----------- ---------- -------- ------------  ----------------");
    println!(
        "{:>6} {:>11.6} {:>11} {:>10} {:>8} {:>12}  total",
        "100.00",
        sum.total_ns as f64 / 1e9,
        "",
        sum.count,
        sum.errors,
        sum.bytes
    );
}

pub fn format_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

pub fn format_bytes(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
        _ => format!("{:.2} GiB", bytes as f64 / 1_073_741_824.0),
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max - 1).collect();
        format!("{cut}…")
    }
}
