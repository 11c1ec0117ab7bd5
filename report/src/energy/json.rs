//! `mlprof energy --json`: the shape documented in the README ("Energy attribution"). Figures
//! are rounded to µJ (times to ns, powers to 0.1 mW): the measurement is not better than that.

use serde_json::{Value, json};

use super::attribution::{DeviceEnergy, EnergyReport, ProcessEnergy};

/// `x` rounded to `digits` decimals.
pub(super) fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

pub fn render(report: &EnergyReport) -> Value {
    let duration_s = report.duration_s();
    let spans: Vec<Value> = report
        .spans
        .iter()
        .map(|op| {
            json!({
                "name": op.name,
                "class": op.class,
                "shapes": op.shapes.shapes,
                "dtypes": op.shapes.dtypes,
                "calls": op.calls,
                "time_s": round(op.time_s, 9),
                "energy_j": round(op.energy_j, 6),
                "uncertainty_j": round(op.uncertainty_j, 6),
                "gpu_j": round(op.gpu_j, 6),
                "cpu_j": round(op.cpu_j, 6),
                "share": round(report.share_of(op.energy_j), 6),
            })
        })
        .collect();
    let classes: Vec<Value> = report
        .classes
        .iter()
        .map(|c| {
            json!({
                "class": c.class,
                "energy_j": round(c.energy_j, 6),
                "uncertainty_j": round(c.uncertainty_j, 6),
                "share": round(report.share_of(c.energy_j), 6),
            })
        })
        .collect();
    let layers: Vec<Value> = report
        .layers
        .iter()
        .map(|(layer, attributed)| {
            json!({
                "layer": layer,
                "attributed_j": round(*attributed, 6),
                "fraction": round(report.share_of(*attributed), 6),
            })
        })
        .collect();
    json!({
        "duration_s": round(duration_s, 9),
        "start_ns": report.start_ns,
        "end_ns": report.end_ns,
        "devices": report.devices.iter().map(device).collect::<Vec<_>>(),
        "total": {
            "energy_j": round(report.measured_j, 6),
            "uncertainty_j": round(report.measured_uncertainty_j, 6),
            "mean_power_w": round(report.measured_j / duration_s.max(1e-9), 4),
        },
        "processes": report.processes.iter().map(process).collect::<Vec<_>>(),
        "spans": spans,
        "classes": classes,
        "coverage": {
            "attributed_j": round(report.attributed_j, 6),
            "measured_j": round(report.measured_j, 6),
            "fraction": round(report.share_of(report.attributed_j), 6),
        },
        "coverage_by_layer": layers,
        "notes": report.notes,
        "ranges": report.ranges.as_ref().map_or(Value::Null, |r| json!({
            "source": r.source,
            "time_s": round(r.time_s, 9),
            "energy_j": round(r.energy_j, 6),
            "uncertainty_j": round(r.uncertainty_j, 6),
            "share": round(report.share_of(r.energy_j), 6),
            "ranges": r.ranges.iter().map(|range| json!({
                "range": range.number,
                "start_ns": range.start_ns,
                "end_ns": range.end_ns,
                "energy_j": round(range.energy_j, 6),
                "uncertainty_j": round(range.uncertainty_j, 6),
            })).collect::<Vec<_>>(),
        })),
        "gpu_side": report.gpu_side.map_or(Value::Null, |g| json!({
            "ops_j": round(g.ops_j, 6),
            "idle_j": round(g.idle_j, 6),
            "idle_uncertainty_j": round(g.idle_uncertainty_j, 6),
            "outside_j": round(g.outside_j, 6),
            "measured_j": round(g.measured_j, 6),
            "unmatched_work": g.unmatched_work,
        })),
    })
}

fn device(d: &DeviceEnergy) -> Value {
    json!({
        "id": d.id,
        "kind": d.kind,
        "index": d.index,
        "uuid": d.uuid,
        "name": d.name,
        "in_run": d.in_run,
        "source": d.source,
        "energy_j": d.energy_j.map(|e| round(e, 6)),
        "uncertainty_j": d.uncertainty_j.map(|u| round(u, 6)),
        "mean_power_w": d.mean_power_w.map(|p| round(p, 4)),
        "samples": d.samples,
        "last_sample_s": d.last_sample_s.map(|s| round(s, 6)),
        "errors": d.errors,
    })
}

fn process(p: &ProcessEnergy) -> Value {
    json!({
        "pid": p.pid,
        "cmdline": p.cmdline,
        "start_s": round(p.start_s, 6),
        "end_s": round(p.end_s, 6),
        "energy_j": round(p.energy_j, 6),
        "uncertainty_j": round(p.uncertainty_j, 6),
        "spans_energy_j": round(p.spans_energy_j, 6),
        "spans_uncertainty_j": round(p.spans_uncertainty_j, 6),
    })
}
