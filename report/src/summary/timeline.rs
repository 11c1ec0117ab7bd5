//! The summary's GPU timeline part (`gpu.timeline` in JSON, "GPU timeline" in text): what the
//! GPUs did, from CUPTI's records, or why the run has none.

use std::io::{self, Write};

use serde_json::{Value, json};

use crate::gpu_timeline::{GpuTimeline, IDLE_PARTS};
use crate::human::{format_bytes, format_ns, truncate};

/// `gpu.timeline`.
pub(super) fn json(timeline: &GpuTimeline) -> Value {
    let devices: Vec<Value> = timeline
        .devices
        .iter()
        .map(|d| {
            let idle_by: serde_json::Map<String, Value> = IDLE_PARTS
                .iter()
                .zip(d.idle_by.values())
                .map(|((key, _), ns)| (key.to_string(), ns.into()))
                .collect();
            json!({"index": d.index, "busy_ns": d.busy_ns, "busy_fraction": d.busy_fraction,
                   "idle_ns": d.idle_ns, "main_pid": d.main_pid, "idle_by": idle_by})
        })
        .collect();
    let kernels: Vec<Value> = timeline
        .kernels
        .iter()
        .map(|k| json!({"name": k.name, "count": k.count, "gpu_ns": k.gpu_ns}))
        .collect();
    let copies: serde_json::Map<String, Value> = timeline
        .copies
        .iter()
        .map(|(kind, c)| (kind.to_string(), json!({"count": c.count, "bytes": c.bytes, "gpu_ns": c.gpu_ns})))
        .collect();
    json!({
        "source": timeline.source,
        "unavailable": timeline.unavailable,
        "notes": timeline.notes,
        "devices": devices,
        "kernels": kernels,
        "copies": copies,
        "dropped": timeline.dropped,
        "unmatched": timeline.unmatched,
    })
}

/// The text part, after the GPU calls.
pub(super) fn text(timeline: &GpuTimeline, top: usize, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out)?;
    let Some(source) = timeline.source else {
        let why = timeline.unavailable.as_deref().unwrap_or("unknown");
        return writeln!(out, "GPU timeline: none ({why})");
    };
    writeln!(out, "GPU timeline ({source}):")?;
    for note in &timeline.notes {
        writeln!(out, "  note: {note}")?;
    }
    for d in &timeline.devices {
        writeln!(
            out,
            "  device {}: busy {} ({:.1} % of the job), idle {}",
            d.index,
            format_ns(d.busy_ns),
            100.0 * d.busy_fraction,
            format_ns(d.idle_ns)
        )?;
        let share = |ns: u64| if d.idle_ns == 0 { 0.0 } else { 100.0 * ns as f64 / d.idle_ns as f64 };
        let why: Vec<String> = IDLE_PARTS
            .iter()
            .zip(d.idle_by.values())
            .filter(|(_, ns)| *ns > 0)
            .map(|((_, what), ns)| format!("{what} {} ({:.1} %)", format_ns(ns), share(ns)))
            .collect();
        if !why.is_empty() {
            writeln!(out, "    idle while pid {} did: {}", d.main_pid, why.join(", "))?;
        }
    }
    let kernel_ns: u64 = timeline.kernels.iter().map(|k| k.gpu_ns).sum();
    if !timeline.kernels.is_empty() {
        writeln!(out, "  Top kernels by GPU time:")?;
        for k in timeline.kernels.iter().take(top) {
            let share = if kernel_ns == 0 { 0.0 } else { 100.0 * k.gpu_ns as f64 / kernel_ns as f64 };
            writeln!(
                out,
                "    {:>10} runs {:>10} GPU  mean {:>9}  {share:5.1} %  {}",
                k.count,
                format_ns(k.gpu_ns),
                format_ns(k.gpu_ns / k.count.max(1)),
                truncate(&k.name, 90)
            )?;
        }
    }
    for (kind, c) in &timeline.copies {
        let bandwidth = if c.gpu_ns == 0 { 0.0 } else { c.bytes as f64 / c.gpu_ns as f64 };
        writeln!(
            out,
            "  copies {kind:>5}: {} × {}, {} on the GPU ({bandwidth:.2} GB/s)",
            c.count,
            format_bytes(c.bytes),
            format_ns(c.gpu_ns)
        )?;
    }
    if timeline.dropped > 0 || timeline.unmatched > 0 {
        writeln!(
            out,
            "  {} GPU activities lost (CUPTI or a full ring), {} not linked to a recorded host call",
            timeline.dropped, timeline.unmatched
        )?;
    }
    Ok(())
}
