//! `mlprof diff --json`: `{"runs": {"a", "b"}, "calls": {"<function>": {"a": {"count",
//! "total_ns", "bytes"}, "b": {…}}}, "spans": {"<name>": {"a": {"count", "total_ns"}, "b"}},
//! "files": {"<path>": …}, "sites": {"<file>:<line> <function>": …}, "ranks": {"<rank or main index>": …}, "data_pipeline": {"a", "b"},
//! "energy": {"a", "b"}}`; a side missing from one run has zeros (`null` for the pipeline and
//! energy of a run without them).

use serde_json::{Map, Value, json};

use super::{Diff, EnergySide, PipelineSide, RankRow, Row, RunSide, Side};
use crate::activity::{Category, MainActivity};

pub fn render(diff: &Diff) -> Value {
    let table = |rows: &[Row], bytes: bool| -> Value {
        let side = |s: &Side| {
            if bytes {
                json!({"count": s.count, "total_ns": s.total_ns, "bytes": s.bytes})
            } else {
                json!({"count": s.count, "total_ns": s.total_ns})
            }
        };
        let map: Map<String, Value> =
            rows.iter().map(|r| (r.name.clone(), json!({"a": side(&r.a), "b": side(&r.b)}))).collect();
        Value::Object(map)
    };
    let ranks: Map<String, Value> = diff.ranks.iter().map(|r| (r.row.name.clone(), rank(r))).collect();
    let pipeline = |p: &Option<PipelineSide>| {
        p.map_or(Value::Null, |p| {
            json!({"batches": p.batches, "wait_total_ns": p.wait_total_ns, "wall_ns": p.wall_ns,
                   "wait_share": p.wait_share})
        })
    };
    let energy = |e: &Option<EnergySide>| {
        e.as_ref().map_or(Value::Null, |e| {
            let devices: Vec<Value> =
                e.devices.iter().map(|(name, j)| json!({"name": name, "energy_j": round6(*j)})).collect();
            json!({"energy_j": round6(e.energy_j), "uncertainty_j": round6(e.uncertainty_j),
                   "duration_s": round6(e.duration_s), "devices": devices})
        })
    };
    json!({
        "runs": {"a": run(&diff.a), "b": run(&diff.b)},
        "calls": table(&diff.calls, true),
        "spans": table(&diff.spans, false),
        "files": table(&diff.files, true),
        "sites": table(&diff.sites, true),
        "ranks": ranks,
        "data_pipeline": {"a": pipeline(&diff.a.pipeline), "b": pipeline(&diff.b.pipeline)},
        "energy": {"a": energy(&diff.a.energy), "b": energy(&diff.b.energy)},
    })
}

/// As `mlprof energy --json` rounds joules.
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn run(side: &RunSide) -> Value {
    json!({"run": side.run, "command": side.command, "duration_ns": side.duration_ns,
           "events": side.events, "dropped": side.dropped})
}

/// A rank's calls (count, time, bytes of its process tree) and its wall-time breakdown.
fn rank(r: &RankRow) -> Value {
    let side = |s: &Side, m: &Option<MainActivity>| {
        let mut v = json!({"count": s.count, "total_ns": s.total_ns, "bytes": s.bytes,
                           "pid": m.as_ref().map(|m| m.pid), "wall_ns": m.as_ref().map_or(0, |m| m.wall_ns),
                           "rest_ns": m.as_ref().map_or(0, |m| m.rest_ns())});
        for category in Category::ALL {
            v[format!("{}_ns", category.key())] =
                json!(m.as_ref().map_or(0, |m| m.by_category[category as usize]));
        }
        v
    };
    json!({"a": side(&r.row.a, &r.a), "b": side(&r.row.b, &r.b)})
}
