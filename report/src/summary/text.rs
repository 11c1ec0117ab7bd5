//! `mlprof summary` as text: strace -c style call tables for the whole tree, one line per
//! process image, the GPU, ITT span and data-pipeline sections, the top files, drops.

use std::collections::HashSet;
use std::io::{self, Write};

use mlprof_format::func::{Api, Func};
use mlprof_format::runfile::NodeInfo;

use super::{CallStats, CallTable, GpuSummary, Part, Ranks, StartupRow, Summary, SyscallView};
use crate::human::{format_bytes, format_ns, truncate};
use crate::pipeline::{DataPipeline, Distribution, SpanRow};

/// Writes the tables; `top` rows in each top-N table.
pub fn write(summary: &Summary, top: usize, out: &mut dyn Write) -> io::Result<()> {
    let pids: HashSet<u32> = summary.processes.iter().map(|p| p.pid).collect();
    writeln!(
        out,
        "mlprof summary: {} on {} — {:.3} s, {} process(es), {} image(s), {} thread(s)",
        summary.command_line,
        summary.host,
        summary.duration_ns as f64 / 1e9,
        pids.len(),
        summary.processes.len(),
        summary.threads
    )?;
    for warning in &summary.warnings {
        writeln!(out, "warning: {warning}")?;
    }
    capture(&summary.capture, summary.duration_ns, out)?;
    writeln!(out)?;
    writeln!(out, "Whole process tree:")?;
    call_table(&calls_only(&summary.calls), out)?;
    if let Some(trapped) = summary.calls.get(Func::TrappedSyscall.name()).filter(|s| s.count > 0) {
        writeln!(
            out,
            "Complete mode: {} system calls trapped ({} failed), inside the calls above and not added \
             to them: `mlprof summary --syscalls` lists them.",
            trapped.count, trapped.errors
        )?;
    }
    writeln!(out)?;
    writeln!(out, "Per process:")?;
    for p in &summary.processes {
        let exit = match p.exit.as_ref() {
            Some(e) => match (e.exit_code, e.signal) {
                (Some(code), _) => format!("exit {code}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => "exit ?".into(),
            },
            None => "exit not seen".into(),
        };
        let calls = calls_only(&p.calls);
        let total: u64 = calls.values().map(|s| s.count).sum();
        let origin = if p.exec_index > 0 {
            " [exec]"
        } else if p.forked {
            " [fork]"
        } else {
            ""
        };
        let rank = match (&p.rank, p.rank_main) {
            (Some(r), Some(main)) if main == p.pid => format!(" [rank {}]", r.rank),
            (Some(r), _) => format!(" [rank {} child]", r.rank),
            _ => String::new(),
        };
        let host = if summary.nodes.is_empty() { String::new() } else { format!(" on {}", p.host) };
        writeln!(
            out,
            "  pid {} (ppid {}){origin}{rank}{host} {} — {total} calls, {exit}",
            p.pid,
            p.ppid,
            truncate(&p.cmdline, 80)
        )?;
        let mut top_calls: Vec<_> = calls.iter().collect();
        top_calls.sort_by_key(|(_, s)| std::cmp::Reverse(s.total_ns));
        let line: Vec<String> = top_calls
            .iter()
            .take(6)
            .map(|(name, s)| format!("{name} {}×/{}", s.count, format_ns(s.total_ns)))
            .collect();
        if !line.is_empty() {
            writeln!(out, "      {}", line.join(", "))?;
        }
    }
    if !summary.nodes.is_empty() {
        nodes_section(&summary.nodes, out)?;
    }
    if let Some(ranks) = &summary.ranks {
        ranks_section(ranks, out)?;
    }
    for row in &summary.startup {
        startup_section(row, top, out)?;
    }
    if let Some(gpu) = &summary.gpu {
        gpu_section(gpu, top, out)?;
    }
    // The data pipeline comes with the span table: a run with only out-of-order markers and
    // no span has neither (its JSON still has the pipeline).
    if !summary.spans.is_empty() {
        spans_section(&summary.spans, top, out)?;
        if let Some(data) = &summary.data_pipeline {
            data_pipeline_section(data, top, out)?;
        }
    }
    files_section(summary, top, out)?;
    writeln!(out)?;
    if summary.dropped == 0 {
        writeln!(out, "Dropped records: 0")?;
    } else {
        let d = &summary.drops;
        writeln!(
            out,
            "Dropped records: {} — the counts above are missing these calls ({} lane full, {} no free lane, \
             {} interrupted by a signal handler or a cancellation)",
            summary.dropped, d.lane_full, d.no_lane, d.interrupted
        )?;
    }
    if summary.unknown_events > 0 {
        writeln!(
            out,
            "Skipped {} events of kinds this mlprof does not know (newer recorder?)",
            summary.unknown_events
        )?;
    }
    Ok(())
}

fn nodes_section(nodes: &[NodeInfo], out: &mut dyn Write) -> io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "Nodes (merged run; times on node {}'s clock):",
        nodes.iter().find(|n| n.alignment == "reference").map_or(0, |n| n.node)
    )?;
    for n in nodes {
        let residual = n.residual_ns.map_or("unknown".to_string(), format_ns);
        writeln!(
            out,
            "  node {} {:<20} offset {:>+.6} s ({}, {} collectives matched with node {}, residual skew {}; realtime guess {:+.6} s)",
            n.node,
            n.host,
            n.offset_ns as f64 / 1e9,
            n.alignment,
            n.matched,
            n.aligned_to,
            residual,
            n.realtime_offset_ns as f64 / 1e9,
        )?;
    }
    Ok(())
}

fn ranks_section(ranks: &Ranks, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out)?;
    writeln!(out, "Per rank (its process and its workers):")?;
    writeln!(
        out,
        "  {:>5} {:>5} {:>12} {:>12} {:>12} {:>12} {:>6} {:>11}  host",
        "rank", "procs", "collectives", "data wait", "I/O", "GPU sync", "steps", "step median"
    )?;
    for r in &ranks.rows {
        writeln!(
            out,
            "  {:>5} {:>5} {:>12} {:>12} {:>12} {:>12} {:>6} {:>11}  {}",
            r.rank,
            r.processes,
            format_ns(r.collectives_ns),
            format_ns(r.data_wait_ns),
            format_ns(r.io_ns),
            format_ns(r.gpu_sync_ns),
            r.steps,
            if r.steps > 1 { format_ns(r.step_median_ns) } else { "-".into() },
            r.hosts.join(", ")
        )?;
    }
    match (ranks.most_often_slowest(), ranks.stragglers.iter().max_by_key(|s| s.by_ns)) {
        (Some((rank, times)), Some(worst)) => {
            let mut by: Vec<u64> =
                ranks.stragglers.iter().filter(|s| s.slowest_rank == rank).map(|s| s.by_ns).collect();
            by.sort_unstable();
            writeln!(
                out,
                "  Straggler: rank {rank} was the slowest in {times} of {} steps (most time outside collectives), by {} over the median rank (median of those steps); worst: step {} on rank {}, {} over the median",
                ranks.stragglers.len(),
                format_ns(by[(by.len() - 1) / 2]),
                worst.step,
                worst.slowest_rank,
                format_ns(worst.by_ns)
            )
        }
        _ => writeln!(
            out,
            "  Straggler: no steps to compare (optimizer.step phases come with mlprof-collect --torch)"
        ),
    }
}

/// The table without ITT tasks, frames and markers: they are spans that nest (a phase holds
/// its ops, an op its calls), so summing them with calls made shares like "itt_task 89.5 % of
/// the time". They have their own table (`spans_section`); `summary --json` keeps them in
/// `calls` with their counts, as documented. Complete mode's trapped system calls are left
/// out too: they lie inside the libc calls above them (`--syscalls` shows them).
fn calls_only(calls: &CallTable) -> CallTable {
    calls
        .iter()
        .filter(|(name, _)| {
            Func::from_name(name).is_none_or(|f| f.api() != Api::Itt && f != Func::TrappedSyscall)
        })
        .map(|(name, stats)| (*name, *stats))
        .collect()
}

fn call_table(calls: &CallTable, out: &mut dyn Write) -> io::Result<()> {
    let total_ns: u64 = calls.values().map(|s| s.total_ns).sum();
    writeln!(
        out,
        "{:>6} {:>11} {:>11} {:>10} {:>8} {:>12}  function",
        "% time", "seconds", "usecs/call", "calls", "errors", "bytes"
    )?;
    writeln!(out, "------ ----------- ----------- ---------- -------- ------------  ----------------")?;
    let mut rows: Vec<_> = calls.iter().collect();
    rows.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then(a.0.cmp(b.0)));
    let mut sum = CallStats::default();
    for (name, s) in rows {
        sum.add(s);
        writeln!(
            out,
            "{:>6.2} {:>11.6} {:>11.3} {:>10} {:>8} {:>12}  {}",
            if total_ns > 0 { s.total_ns as f64 * 100.0 / total_ns as f64 } else { 0.0 },
            s.total_ns as f64 / 1e9,
            if s.count > 0 { s.total_ns as f64 / 1e3 / s.count as f64 } else { 0.0 },
            s.count,
            s.errors,
            s.bytes,
            name
        )?;
    }
    writeln!(out, "------ ----------- ----------- ---------- -------- ------------  ----------------")?;
    writeln!(
        out,
        "{:>6} {:>11.6} {:>11} {:>10} {:>8} {:>12}  total",
        "100.00",
        sum.total_ns as f64 / 1e9,
        "",
        sum.count,
        sum.errors,
        sum.bytes
    )
}

fn gpu_section(gpu: &GpuSummary, top: usize, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out)?;
    writeln!(out, "GPU (CUDA runtime, driver, NCCL):")?;
    call_table(&gpu.apis, out)?;
    if !gpu.copies.is_empty() {
        writeln!(out)?;
        writeln!(out, "  Copies:")?;
        for (direction, c) in &gpu.copies {
            writeln!(out, "    {direction:>7}: {} calls, {}", c.calls, format_bytes(c.bytes))?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "  Host blocked on GPU (synchronizations and blocking copies): {}",
        format_ns(gpu.host_blocked_ns())
    )?;
    for b in &gpu.host_blocked {
        writeln!(out, "    pid {} tid {}: {}", b.pid, b.tid, format_ns(b.ns))?;
    }
    if !gpu.kernels.is_empty() {
        writeln!(out)?;
        writeln!(out, "  Top kernels by launches:")?;
        for k in gpu.kernels.iter().take(top) {
            writeln!(
                out,
                "    {:>10} launches {:>10} host  {}",
                k.launches,
                format_ns(k.host_ns),
                truncate(&k.name, 100)
            )?;
        }
    }
    super::timeline::text(&gpu.timeline, top, out)
}

fn spans_section(spans: &[SpanRow], top: usize, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "ITT spans (PyTorch ops, phases, user ranges), top {top} of {} by total time:",
        spans.len()
    )?;
    writeln!(out, "  {:>10} {:>12} {:>12}  {:<14} name", "count", "total", "mean", "domain")?;
    for s in spans.iter().take(top) {
        writeln!(
            out,
            "  {:>10} {:>12} {:>12}  {:<14} {}",
            s.count,
            format_ns(s.total_ns),
            format_ns(s.mean_ns()),
            s.domain,
            s.name
        )?;
    }
    Ok(())
}

fn data_pipeline_section(data: &DataPipeline, top: usize, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "Data pipeline: {} batches; main process waited {} for data = {:.1}% of its time from the first batch request to the last batch's consumption; {} out-of-order arrivals",
        data.batches,
        format_ns(data.wait_total_ns),
        data.wait_share() * 100.0,
        data.out_of_order
    )?;
    let phases = [
        ("wait", &data.wait),
        ("fetch", &data.fetch),
        ("collate", &data.collate),
        ("consume", &data.consume),
    ];
    for (label, d) in phases {
        if d.count > 0 {
            writeln!(out, "  {label:<8} {:>6}×  {}", d.count, percentiles(d))?;
        }
    }
    if !data.transforms.is_empty() {
        writeln!(out, "  Transforms (per sample):")?;
        for t in &data.transforms {
            writeln!(out, "    {:<28} {:>7}×  {}", t.name, t.durations.count, percentiles(&t.durations))?;
        }
    }
    if !data.workers.is_empty() {
        writeln!(out, "  Workers (busy = time in batch.fetch):")?;
        for w in &data.workers {
            writeln!(
                out,
                "    pid {:<8} (main {}) {:>5} batches, busy {}",
                w.pid,
                w.main_pid,
                w.batches,
                format_ns(w.busy_ns)
            )?;
        }
    }
    if !data.per_batch.is_empty() {
        let mut by_wait: Vec<_> = data.per_batch.iter().collect();
        by_wait.sort_by_key(|b| std::cmp::Reverse(b.wait_ns.unwrap_or(0)));
        writeln!(out, "  Longest waits:")?;
        for b in by_wait.iter().take(top.min(5)) {
            writeln!(
                out,
                "    epoch {} batch {:<6} wait {:>10}  fetch {:>10} (worker {})",
                b.epoch(),
                b.batch(),
                format_ns(b.wait_ns.unwrap_or(0)),
                format_ns(b.fetch_ns.unwrap_or(0)),
                b.worker_pid.unwrap_or(0)
            )?;
        }
    }
    Ok(())
}

fn percentiles(d: &Distribution) -> String {
    format!(
        "median {:>10}  p90 {:>10}  p99 {:>10}  total {:>10}",
        format_ns(d.median_ns),
        format_ns(d.p90_ns),
        format_ns(d.p99_ns),
        format_ns(d.total_ns)
    )
}

fn files_section(summary: &Summary, top: usize, out: &mut dyn Write) -> io::Result<()> {
    let files = &summary.files;
    if files.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "Top files by bytes:")?;
    writeln!(out, "  {:>12} {:>12} {:>8} {:>10}  path", "read", "written", "calls", "time")?;
    for f in files.iter().take(top) {
        writeln!(
            out,
            "  {:>12} {:>12} {:>8} {:>10}  {}",
            format_bytes(f.bytes_read),
            format_bytes(f.bytes_written),
            f.calls,
            format_ns(f.total_ns),
            f.path
        )?;
    }
    let mut by_time: Vec<_> = files.iter().collect();
    by_time.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.path.cmp(&b.path)));
    writeln!(out)?;
    writeln!(out, "Top files by time:")?;
    writeln!(out, "  {:>10} {:>8} {:>12}  path", "time", "calls", "bytes")?;
    for f in by_time.iter().take(top) {
        writeln!(
            out,
            "  {:>10} {:>8} {:>12}  {}",
            format_ns(f.total_ns),
            f.calls,
            format_bytes(f.bytes_read + f.bytes_written),
            f.path
        )?;
    }
    Ok(())
}

fn startup_section(row: &StartupRow, top: usize, out: &mut dyn Write) -> io::Result<()> {
    let until = match row.until {
        "first_step" => "to the first training step",
        "first_batch" => "to the first DataLoader batch",
        _ => "(no training step seen: its whole life; mlprof-collect --torch marks steps)",
    };
    writeln!(out)?;
    writeln!(
        out,
        "Start-up of pid {} ({}): {} {until}",
        row.pid,
        truncate(&row.cmdline, 60),
        format_ns(row.duration_ns)
    )?;
    let parts: [(&str, &Part); 6] = [
        ("library loads (dlopen)", &row.library_loads),
        ("metadata (stat, access, dirs)", &row.metadata),
        ("opens and closes", &row.opens),
        ("reads", &row.reads),
        ("GPU calls", &row.gpu),
        ("other calls", &row.other),
    ];
    for (label, part) in parts {
        if part.count > 0 {
            writeln!(out, "  {label:<31} {:>9} calls {:>10}", part.count, format_ns(part.total_ns))?;
        }
    }
    if !row.libraries.is_empty() {
        writeln!(out, "  Slowest libraries to load:")?;
        for library in row.libraries.iter().take(top) {
            writeln!(
                out,
                "    {:>10} {:>4}×  {}",
                format_ns(library.total_ns),
                library.loads,
                truncate(&library.path, 100)
            )?;
        }
    }
    if row.truncated {
        writeln!(out, "  (too many calls: the parts count the first ones only)")?;
    }
    Ok(())
}

/// `mlprof summary --syscalls`: the calls as system calls, like `strace -c -f`.
pub fn write_syscalls(summary: &Summary, out: &mut dyn Write) -> io::Result<()> {
    let view: &SyscallView = &summary.syscalls;
    let total_ns: u64 = view.syscalls.values().map(|s| s.total_ns).sum();
    writeln!(out, "% time     seconds  usecs/call     calls    errors syscall")?;
    writeln!(out, "------ ----------- ----------- --------- --------- ----------------")?;
    let mut rows: Vec<_> = view.syscalls.iter().collect();
    rows.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then(b.1.count.cmp(&a.1.count)).then(a.0.cmp(b.0)));
    let (mut calls, mut errors) = (0, 0);
    for (name, s) in rows {
        calls += s.count;
        errors += s.errors;
        let errors = if s.errors > 0 { s.errors.to_string() } else { String::new() };
        writeln!(
            out,
            "{:>6.2} {:>11.6} {:>11} {:>9} {:>9} {name}",
            if total_ns > 0 { s.total_ns as f64 * 100.0 / total_ns as f64 } else { 0.0 },
            s.total_ns as f64 / 1e9,
            (s.total_ns / 1000).checked_div(s.count).unwrap_or(0),
            s.count,
            errors
        )?;
    }
    writeln!(out, "------ ----------- ----------- --------- --------- ----------------")?;
    writeln!(out, "100.00 {:>11.6} {:>11} {calls:>9} {errors:>9} total", total_ns as f64 / 1e9, "")?;
    writeln!(out)?;
    if !view.trapped_pids.is_empty() {
        writeln!(
            out,
            "Trapped (complete mode, every system call): {} process(es).",
            view.trapped_pids.len()
        )?;
    }
    if !view.folded_pids.is_empty() {
        writeln!(
            out,
            "Folded from libc calls (default mode; glibc-internal calls, the loader's and raw syscall() \
             are not seen): {} process(es).",
            view.folded_pids.len()
        )?;
    }
    if !view.not_folded.is_empty() {
        let list: Vec<String> = view.not_folded.iter().map(|(name, n)| format!("{name} {n}")).collect();
        writeln!(out, "Recorded but not folded (no fixed system call): {}", list.join(", "))?;
    }
    Ok(())
}

/// The capture ranges (only for a run recorded with a capture option): what was recorded of
/// the job, and when.
fn capture(capture: &crate::run::ranges::Capture, run_ns: u64, out: &mut dyn Write) -> io::Result<()> {
    let Some(source) = capture.source else { return Ok(()) };
    let limit = match capture.limit {
        0 => "repeat".to_string(),
        1 => "stop".to_string(),
        n => format!("repeat:{n}"),
    };
    writeln!(
        out,
        "Capture ranges ({source}, {limit}): {} range(s), {} recorded of {} ({:.1} %); {} outside, not recorded",
        capture.ranges.len(),
        format_ns(capture.recorded_ns),
        format_ns(run_ns),
        capture.recorded_ns as f64 * 100.0 / run_ns.max(1) as f64,
        format_ns(capture.outside_ns)
    )?;
    let pid = |pid: u32| if pid == 0 { String::new() } else { format!(" (pid {pid})") };
    for r in &capture.ranges {
        writeln!(
            out,
            "  #{:<3} {} – {} ({}): opened by {}{}, closed by {}{}",
            r.number,
            format_ns(r.start_ns),
            format_ns(r.end_ns),
            format_ns(r.duration_ns),
            r.opened_by,
            pid(r.opened_pid),
            r.closed_by,
            pid(r.closed_pid)
        )?;
    }
    Ok(())
}
