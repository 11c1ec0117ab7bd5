//! `mlprof summary --json`: the shape documented in the README and docs/interfaces.md. Objects
//! are built as `serde_json::Value`s, whose keys print in sorted order.

use serde_json::{Value, json};

use mlprof_format::runfile::NodeInfo;

use super::{FileRow, GpuSummary, ProcessRow, Ranks, StartupRow, Summary};
use crate::pipeline::{DataPipeline, Distribution, SpanRow};

pub fn render(summary: &Summary) -> Value {
    json!({
        "events": summary.events,
        "dropped": summary.dropped,
        "drops": summary.drops,
        "truncated": summary.truncated,
        "duration_ns": summary.duration_ns,
        "command": summary.command,
        "host": summary.host,
        "clock_source": summary.clock_source,
        "unknown_events": summary.unknown_events,
        "processes": summary.processes.iter().map(process).collect::<Vec<_>>(),
        "calls": summary.calls,
        "files": summary.files.iter().map(file).collect::<Vec<_>>(),
        "gpu": summary.gpu.as_ref().map_or(Value::Null, gpu),
        "spans": summary.spans.iter().map(span).collect::<Vec<_>>(),
        "data_pipeline": summary.data_pipeline.as_ref().map_or(Value::Null, data_pipeline),
        "ranks": summary.ranks.as_ref().map_or(Value::Null, ranks),
        "nodes": summary.nodes.iter().map(node).collect::<Vec<_>>(),
        "startup": summary.startup.iter().map(startup).collect::<Vec<_>>(),
        "sites": summary.sites,
        "sites_missing": summary.sites_missing,
        "ranges": summary.capture.ranges,
        "capture": summary.capture.source.map_or(Value::Null, |source| json!({
            "source": source,
            "limit": summary.capture.limit,
            "recorded_ns": summary.capture.recorded_ns,
            "outside_ns": summary.capture.outside_ns,
        })),
    })
}

/// `mlprof summary --syscalls --json`.
pub fn render_syscalls(summary: &Summary) -> Value {
    let view = &summary.syscalls;
    json!({
        "syscalls": view.syscalls,
        "trapped_pids": view.trapped_pids,
        "folded_pids": view.folded_pids,
        "not_folded": view.not_folded,
        "per_process": view.per_pid.iter().map(|(pid, calls)| (pid.to_string(), json!(calls))).collect::<serde_json::Map<_, _>>(),
    })
}

fn startup(row: &StartupRow) -> Value {
    json!({
        "pid": row.pid,
        "cmdline": row.cmdline,
        "start_ns": row.start_ns,
        "duration_ns": row.duration_ns,
        "until": row.until,
        "library_loads": row.library_loads,
        "metadata": row.metadata,
        "opens": row.opens,
        "reads": row.reads,
        "gpu": row.gpu,
        "other": row.other,
        "libraries": row.libraries,
        "truncated": row.truncated,
    })
}

fn ranks(ranks: &Ranks) -> Value {
    let rows: Vec<Value> = ranks
        .rows
        .iter()
        .map(|r| {
            json!({"rank": r.rank, "processes": r.processes, "main_pids": r.main_pids, "hosts": r.hosts,
                   "collectives": r.collectives, "collectives_ns": r.collectives_ns,
                   "data_wait_ns": r.data_wait_ns, "io_ns": r.io_ns, "gpu_sync_ns": r.gpu_sync_ns,
                   "steps": r.steps, "step_median_ns": r.step_median_ns})
        })
        .collect();
    let steps: Vec<Value> = ranks
        .stragglers
        .iter()
        .map(|s| {
            json!({"step": s.step, "slowest_rank": s.slowest_rank, "duration_ns": s.duration_ns,
                   "median_ns": s.median_ns, "by_ns": s.by_ns})
        })
        .collect();
    json!({"ranks": rows, "stragglers": steps})
}

fn node(n: &NodeInfo) -> Value {
    json!({"node": n.node, "host": n.host, "source": n.source, "offset_ns": n.offset_ns,
           "realtime_offset_ns": n.realtime_offset_ns, "pid_offset": n.pid_offset,
           "alignment": n.alignment, "aligned_to": n.aligned_to, "matched": n.matched,
           "residual_ns": n.residual_ns})
}

fn process(p: &ProcessRow) -> Value {
    json!({
        "pid": p.pid,
        "ppid": p.ppid,
        "cmdline": p.cmdline,
        "exec_index": p.exec_index,
        "forked": p.forked,
        "start_ns": p.start_ns,
        "exit_code": p.exit.as_ref().and_then(|e| e.exit_code),
        "signal": p.exit.as_ref().and_then(|e| e.signal),
        "calls": p.calls,
        "rank": p.rank.as_ref().map(|r| r.rank),
        "local_rank": p.rank.as_ref().and_then(|r| r.local_rank),
        "world_size": p.rank.as_ref().and_then(|r| r.world_size),
        "local_world_size": p.rank.as_ref().and_then(|r| r.local_world_size),
        "node_rank": p.rank.as_ref().and_then(|r| r.node_rank),
        "rank_source": p.rank.as_ref().map(|r| r.source.clone()),
        "rank_role": match (p.rank_main, p.rank.is_some()) {
            (Some(main), true) if main == p.pid => json!("main"),
            (Some(_), true) => json!("child"),
            _ => Value::Null,
        },
        "rank_main_pid": p.rank_main,
        "node": p.node,
        "host": p.host,
    })
}

fn file(f: &FileRow) -> Value {
    json!({
        "path": f.path,
        "opens": f.opens,
        "calls": f.calls,
        "bytes_read": f.bytes_read,
        "bytes_written": f.bytes_written,
        "total_ns": f.total_ns,
        "by_call": f.by_call,
        "sites": f.sites,
    })
}

fn gpu(gpu: &GpuSummary) -> Value {
    let copies: serde_json::Map<String, Value> = gpu
        .copies
        .iter()
        .map(|(direction, c)| (direction.to_string(), json!({"calls": c.calls, "bytes": c.bytes})))
        .collect();
    let blocked: Vec<Value> =
        gpu.host_blocked.iter().map(|b| json!({"pid": b.pid, "tid": b.tid, "ns": b.ns})).collect();
    let kernels: Vec<Value> = gpu
        .kernels
        .iter()
        .map(|k| json!({"name": k.name, "launches": k.launches, "host_ns": k.host_ns}))
        .collect();
    json!({
        "apis": gpu.apis,
        "copies": copies,
        "host_blocked_ns": gpu.host_blocked_ns(),
        "host_blocked": blocked,
        "kernels": kernels,
        "timeline": super::timeline::json(&gpu.timeline),
    })
}

fn span(s: &SpanRow) -> Value {
    json!({"domain": s.domain, "name": s.name, "count": s.count, "total_ns": s.total_ns,
           "mean_ns": s.mean_ns()})
}

fn distribution(d: &Distribution) -> Value {
    json!({
        "count": d.count,
        "total_ns": d.total_ns,
        "median_ns": d.median_ns,
        "p90_ns": d.p90_ns,
        "p99_ns": d.p99_ns,
        "max_ns": d.max_ns,
    })
}

fn data_pipeline(data: &DataPipeline) -> Value {
    let transforms: Vec<Value> = data
        .transforms
        .iter()
        .map(|t| {
            let mut row = distribution(&t.durations);
            row["name"] = json!(t.name);
            row["span"] = json!(format!("transform:{}", t.name));
            row
        })
        .collect();
    let workers: Vec<Value> = data
        .workers
        .iter()
        .map(|w| {
            json!({"pid": w.pid, "ppid": w.ppid, "main_pid": w.main_pid, "batches": w.batches,
                   "busy_ns": w.busy_ns})
        })
        .collect();
    let mains: Vec<Value> = data
        .mains
        .iter()
        .map(|m| {
            json!({"pid": m.pid, "batches": m.batches, "wait_ns": m.wait_ns, "wall_ns": m.wall_ns,
                   "wait_share": m.wait_share()})
        })
        .collect();
    let per_batch: Vec<Value> = data
        .per_batch
        .iter()
        .map(|b| {
            json!({"main_pid": b.main_pid, "id": b.id, "loader": b.loader(), "epoch": b.epoch(),
                   "batch": b.batch(), "wait_ns": b.wait_ns, "consume_ns": b.consume_ns,
                   "fetch_ns": b.fetch_ns, "collate_ns": b.collate_ns, "worker_pid": b.worker_pid})
        })
        .collect();
    json!({
        "batches": data.batches,
        "wait_total_ns": data.wait_total_ns,
        "wall_ns": data.wall_ns,
        "wait_share": data.wait_share(),
        "out_of_order": data.out_of_order,
        "wait": distribution(&data.wait),
        "consume": distribution(&data.consume),
        "fetch": distribution(&data.fetch),
        "collate": distribution(&data.collate),
        "transforms": transforms,
        "workers": workers,
        "mains": mains,
        "per_batch": per_batch,
    })
}
