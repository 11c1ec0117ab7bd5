//! The ITT span tables of `mlprof summary`: time per (domain, span name) — PyTorch ops,
//! training phases, user ranges — and the data-pipeline section built from the
//! `mlprof.data` spans that `mlprof-collect --torch` records (README "PyTorch and the
//! DataLoader").

use std::collections::{BTreeMap, HashMap};

use mlprof_format::func::Func;
use mlprof_format::record::{Event, IttSpan};
use mlprof_format::string_id;
use serde_json::{Value, json};

use crate::run::RunMeta;
use crate::summary::format_ns;

/// The domain of the DataLoader spans.
pub const DATA_DOMAIN: &str = "mlprof.data";
pub(crate) const DATA: u64 = string_id(DATA_DOMAIN.as_bytes());
pub(crate) const WAIT: u64 = string_id(b"batch.wait");
const CONSUME: u64 = string_id(b"batch.consume");
pub(crate) const FETCH: u64 = string_id(b"batch.fetch");
const COLLATE: u64 = string_id(b"collate");
const OUT_OF_ORDER: u64 = string_id(b"batch.out_of_order");

/// One `mlprof.data` span.
#[derive(Clone, Copy)]
struct DataSpan {
    pid: u32,
    name: u64,
    start: u64,
    dur: u64,
    /// Batch id: loader serial << 48 | epoch << 32 | batch index.
    id: u64,
    /// The main process's pid (the DataLoader's owner).
    main: u64,
}

/// The Chrome-trace flow id linking a batch's fetch (in a worker) to its wait (in the main
/// process): (main pid, batch id) mixed into 53 bits, exact as a JSON number.
pub fn flow_id(main_pid: u64, batch: u64) -> u64 {
    let mut x = batch ^ main_pid.rotate_left(40) ^ 0x9e37_79b9_7f4a_7c15;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) & ((1 << 53) - 1)
}

#[derive(Default)]
pub struct Pipeline {
    /// (domain id, name id) → (count, total ns).
    spans: HashMap<(u64, u64), (u64, u64)>,
    data: Vec<DataSpan>,
    out_of_order: u64,
}

/// count, total, median, p90, p99, max of a set of durations.
fn distribution(mut values: Vec<u64>) -> Value {
    values.sort_unstable();
    let rank = |q: f64| -> u64 {
        if values.is_empty() {
            return 0;
        }
        let at = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
        values[at - 1]
    };
    json!({
        "count": values.len(),
        "total_ns": values.iter().sum::<u64>(),
        "median_ns": rank(0.5),
        "p90_ns": rank(0.9),
        "p99_ns": rank(0.99),
        "max_ns": values.last().copied().unwrap_or(0),
    })
}

fn num(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

impl Pipeline {
    /// Takes one recorded event (only ITT tasks, frames and markers are kept).
    pub fn add(&mut self, func: Func, event: &Event) {
        let span = IttSpan::from_event(event);
        match func {
            Func::IttTask | Func::IttFrame => {
                let entry = self.spans.entry((span.domain, span.name)).or_default();
                entry.0 += 1;
                entry.1 += span.dur;
                if span.domain == DATA {
                    self.data.push(DataSpan {
                        pid: span.pid,
                        name: span.name,
                        start: span.start,
                        dur: span.dur,
                        id: span.id,
                        main: span.parent,
                    });
                }
            }
            Func::IttMarker if span.domain == DATA && span.name == OUT_OF_ORDER => self.out_of_order += 1,
            _ => {}
        }
    }

    /// Per (domain, name), most total time first.
    fn span_rows(&self, meta: &RunMeta) -> Vec<(String, String, u64, u64)> {
        let name = |id: u64| if id == 0 { String::new() } else { meta.string(id) };
        let mut rows: Vec<_> =
            self.spans.iter().map(|(&(d, n), &(count, total))| (name(d), name(n), count, total)).collect();
        rows.sort_by(|a, b| b.3.cmp(&a.3).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
        rows
    }

    /// `"spans"`: every (domain, name), most total time first.
    pub fn spans_json(&self, meta: &RunMeta) -> Value {
        Value::Array(
            self.span_rows(meta)
                .into_iter()
                .map(|(domain, name, count, total)| {
                    json!({"domain": domain, "name": name, "count": count, "total_ns": total,
                           "mean_ns": total / count.max(1)})
                })
                .collect(),
        )
    }

    /// `"data_pipeline"`: null when the run has no DataLoader spans.
    pub fn data_json(&self, meta: &RunMeta) -> Value {
        if self.data.is_empty() && self.out_of_order == 0 {
            return Value::Null;
        }
        let of = |name: u64| self.data.iter().filter(move |s| s.name == name);
        // Transforms by class name.
        let mut transforms: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for span in &self.data {
            if let Some(class) = meta.string(span.name).strip_prefix("transform:") {
                transforms.entry(class.to_string()).or_default().push(span.dur);
            }
        }
        let transforms: Vec<Value> = transforms
            .into_iter()
            .map(|(class, durations)| {
                let mut row = distribution(durations);
                row["name"] = json!(class);
                row["span"] = json!(format!("transform:{class}"));
                row
            })
            .collect();
        // Workers: the processes that fetched batches.
        let mut workers: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
        for span in of(FETCH) {
            let entry = workers.entry(span.pid).or_default();
            entry.0 += 1;
            entry.1 += span.dur;
            entry.2 = span.main;
        }
        let ppid = |pid: u32| meta.images.get(&pid).and_then(|i| i.first()).map(|i| i.info.ppid).unwrap_or(0);
        let workers: Vec<Value> = workers
            .into_iter()
            .map(|(pid, (batches, busy, main))| {
                json!({"pid": pid, "ppid": ppid(pid), "main_pid": main, "batches": batches, "busy_ns": busy})
            })
            .collect();
        // Per batch, keyed by (main pid, batch id).
        #[derive(Default)]
        struct Batch {
            wait: Option<u64>,
            consume: Option<u64>,
            fetch: Option<u64>,
            collate: Option<u64>,
            worker: Option<u32>,
        }
        let mut batches: BTreeMap<(u64, u64), Batch> = BTreeMap::new();
        // Main processes: pid → (waits, wait ns, first request, last consumption end).
        let mut mains: BTreeMap<u32, (u64, u64, u64, u64)> = BTreeMap::new();
        for span in &self.data {
            let key = (span.main, span.id);
            match span.name {
                WAIT => {
                    batches.entry(key).or_default().wait = Some(span.dur);
                    let main = mains.entry(span.pid).or_insert((0, 0, u64::MAX, 0));
                    main.0 += 1;
                    main.1 += span.dur;
                    main.2 = main.2.min(span.start);
                    main.3 = main.3.max(span.start + span.dur);
                }
                CONSUME => {
                    batches.entry(key).or_default().consume = Some(span.dur);
                    let main = mains.entry(span.pid).or_insert((0, 0, u64::MAX, 0));
                    main.2 = main.2.min(span.start);
                    main.3 = main.3.max(span.start + span.dur);
                }
                FETCH => {
                    let batch = batches.entry(key).or_default();
                    batch.fetch = Some(span.dur);
                    batch.worker = Some(span.pid);
                }
                COLLATE => batches.entry(key).or_default().collate = Some(span.dur),
                _ => {}
            }
        }
        let mains_json: Vec<Value> = mains
            .iter()
            .map(|(&pid, &(waits, wait, first, last))| {
                let wall = last.saturating_sub(first);
                json!({"pid": pid, "batches": waits, "wait_ns": wait, "wall_ns": wall,
                       "wait_share": if wall > 0 { wait as f64 / wall as f64 } else { 0.0 }})
            })
            .collect();
        let wait_total: u64 = mains.values().map(|m| m.1).sum();
        let wall_total: u64 = mains.values().map(|m| m.3.saturating_sub(m.2)).sum();
        let per_batch: Vec<Value> = batches
            .iter()
            .map(|(&(main, id), b)| {
                json!({"main_pid": main, "id": id, "loader": id >> 48, "epoch": (id >> 32) & 0xffff,
                       "batch": id & 0xffff_ffff, "wait_ns": b.wait, "consume_ns": b.consume,
                       "fetch_ns": b.fetch, "collate_ns": b.collate, "worker_pid": b.worker})
            })
            .collect();
        let durations = |name: u64| of(name).map(|s| s.dur).collect::<Vec<_>>();
        json!({
            "batches": of(WAIT).count(),
            "wait_total_ns": wait_total,
            "wall_ns": wall_total,
            "wait_share": if wall_total > 0 { wait_total as f64 / wall_total as f64 } else { 0.0 },
            "out_of_order": self.out_of_order,
            "wait": distribution(durations(WAIT)),
            "consume": distribution(durations(CONSUME)),
            "fetch": distribution(durations(FETCH)),
            "collate": distribution(durations(COLLATE)),
            "transforms": transforms,
            "workers": workers,
            "mains": mains_json,
            "per_batch": per_batch,
        })
    }

    pub fn print_text(&self, meta: &RunMeta, top: usize) {
        if self.spans.is_empty() {
            return;
        }
        let rows = self.span_rows(meta);
        println!();
        println!("ITT spans (PyTorch ops, phases, user ranges), top {top} of {} by total time:", rows.len());
        println!("  {:>10} {:>12} {:>12}  {:<14} name", "count", "total", "mean", "domain");
        for (domain, name, count, total) in rows.iter().take(top) {
            println!(
                "  {count:>10} {:>12} {:>12}  {:<14} {name}",
                format_ns(*total),
                format_ns(total / count.max(&1)),
                domain
            );
        }
        let data = self.data_json(meta);
        if data.is_null() {
            return;
        }
        println!();
        println!(
            "Data pipeline: {} batches; main process waited {} for data = {:.1}% of its time from the first batch request to the last batch's consumption; {} out-of-order arrivals",
            num(&data, "batches"),
            format_ns(num(&data, "wait_total_ns")),
            data["wait_share"].as_f64().unwrap_or(0.0) * 100.0,
            num(&data, "out_of_order")
        );
        for (label, key) in
            [("wait", "wait"), ("fetch", "fetch"), ("collate", "collate"), ("consume", "consume")]
        {
            let d = &data[key];
            if num(d, "count") > 0 {
                println!(
                    "  {label:<8} {:>6}×  median {:>10}  p90 {:>10}  p99 {:>10}  total {:>10}",
                    num(d, "count"),
                    format_ns(num(d, "median_ns")),
                    format_ns(num(d, "p90_ns")),
                    format_ns(num(d, "p99_ns")),
                    format_ns(num(d, "total_ns"))
                );
            }
        }
        if let Some(transforms) = data["transforms"].as_array().filter(|t| !t.is_empty()) {
            println!("  Transforms (per sample):");
            for t in transforms {
                println!(
                    "    {:<28} {:>7}×  median {:>10}  p90 {:>10}  p99 {:>10}  total {:>10}",
                    t["name"].as_str().unwrap_or(""),
                    num(t, "count"),
                    format_ns(num(t, "median_ns")),
                    format_ns(num(t, "p90_ns")),
                    format_ns(num(t, "p99_ns")),
                    format_ns(num(t, "total_ns"))
                );
            }
        }
        if let Some(workers) = data["workers"].as_array().filter(|w| !w.is_empty()) {
            println!("  Workers (busy = time in batch.fetch):");
            for w in workers {
                println!(
                    "    pid {:<8} (main {}) {:>5} batches, busy {}",
                    num(w, "pid"),
                    num(w, "main_pid"),
                    num(w, "batches"),
                    format_ns(num(w, "busy_ns"))
                );
            }
        }
        if let Some(batches) = data["per_batch"].as_array().filter(|b| !b.is_empty()) {
            let mut by_wait: Vec<&Value> = batches.iter().collect();
            by_wait.sort_by_key(|b| std::cmp::Reverse(num(b, "wait_ns")));
            println!("  Longest waits:");
            for b in by_wait.iter().take(top.min(5)) {
                println!(
                    "    epoch {} batch {:<6} wait {:>10}  fetch {:>10} (worker {})",
                    num(b, "epoch"),
                    num(b, "batch"),
                    format_ns(num(b, "wait_ns")),
                    format_ns(num(b, "fetch_ns")),
                    num(b, "worker_pid")
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let d = distribution((1..=100).collect());
        assert_eq!((num(&d, "median_ns"), num(&d, "p90_ns"), num(&d, "p99_ns")), (50, 90, 99));
        assert_eq!(num(&distribution(vec![]), "p99_ns"), 0);
        assert_eq!(num(&distribution(vec![7]), "median_ns"), 7);
    }

    #[test]
    fn waits_and_fetches_pair_by_main_pid_and_id() {
        let mut p = Pipeline::default();
        let span = |pid, name, start, dur, id, parent| {
            IttSpan {
                kind: Func::IttTask as u16,
                pid,
                name,
                start,
                dur,
                id,
                parent,
                domain: DATA,
                ..Default::default()
            }
            .into_event()
        };
        p.add(Func::IttTask, &span(11, FETCH, 0, 50, 1 << 32, 10));
        p.add(Func::IttTask, &span(10, WAIT, 40, 20, 1 << 32, 10));
        p.add(Func::IttTask, &span(10, CONSUME, 60, 40, 1 << 32, 10));
        let meta = RunMeta::default();
        let data = p.data_json(&meta);
        assert_eq!(num(&data, "wait_total_ns"), 20);
        assert_eq!(num(&data, "wall_ns"), 60);
        let batch = &data["per_batch"][0];
        assert_eq!((num(batch, "epoch"), num(batch, "batch"), num(batch, "worker_pid")), (1, 0, 11));
        assert_eq!(num(&data["workers"][0], "busy_ns"), 50);
    }
}
