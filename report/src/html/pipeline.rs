//! The data pipeline: transform time distributions, worker busy time, longest waits.

use super::*;

impl Page {
    pub(super) fn pipeline(&mut self, run: &RunFigures, s: &Value) {
        self.section("pipeline", "Data pipeline");
        let data = &s["data_pipeline"];
        if data.is_null() {
            self.empty("No DataLoader spans in this run (record them with mlprof-collect --torch).");
            self.end_section();
            return;
        }
        self.data_wait(data);
        self.transforms(data);
        self.batch_phases(data);
        self.workers(run, data);
        self.longest_waits(data);
        self.end_section();
    }

    /// The section's answer: how long the main processes waited for data, and what share of
    /// the time that is.
    fn data_wait(&mut self, data: &Value) {
        let _ = write!(
            self.out,
            r#"<p class="answer">The main process{} waited <b data-k="wait_total_ns" data-v="{}">{}</b> for data over {} batches: <b data-k="wait_share" data-v="{}">{:.1}%</b> of the time from the first batch request to the last batch's consumption ({}); {} batches arrived out of order.</p>"#,
            if data["mains"].as_array().map_or(0, Vec::len) > 1 { "es" } else { "" },
            u(&data["wait_total_ns"]),
            format_ns(u(&data["wait_total_ns"])),
            u(&data["batches"]),
            f(&data["wait_share"]),
            f(&data["wait_share"]) * 100.0,
            format_ns(u(&data["wall_ns"])),
            u(&data["out_of_order"]),
        );
    }

    /// Transform durations per sample: their percentile ranges, then their table.
    fn transforms(&mut self, data: &Value) {
        let empty = Vec::new();
        let transforms = data["transforms"].as_array().unwrap_or(&empty);
        self.out.push_str("<h3>Transforms (per sample)</h3>");
        if transforms.is_empty() {
            self.empty("No torchvision transforms were recorded.");
        } else {
            let ms = |v: &Value| u(v) as f64 / 1e6;
            let ranges: Vec<(String, [f64; 4])> = transforms
                .iter()
                .map(|t| {
                    let name = t["name"].as_str().unwrap_or("").to_string();
                    (name, [ms(&t["median_ns"]), ms(&t["p90_ns"]), ms(&t["p99_ns"]), ms(&t["max_ns"])])
                })
                .collect();
            self.legend(&[("to p99", "#9ecae1"), ("median", "#08519c"), ("p90", "#3182bd")]);
            self.out.push_str(&svg::percentile_ranges("transform durations", &ranges));
            let rows = distribution_rows(transforms, "name");
            self.table("transforms-table", &DISTRIBUTION_HEADERS, &rows);
        }
    }

    /// The phases of a batch (wait, fetch, collate, consume), a distribution each.
    fn batch_phases(&mut self, data: &Value) {
        let phases: Vec<Value> = ["wait", "fetch", "collate", "consume"]
            .iter()
            .filter(|p| u(&data[**p]["count"]) > 0)
            .map(|p| {
                let mut v = data[*p].clone();
                v["name"] = Value::from(format!("batch.{p}").replace("batch.collate", "collate"));
                v
            })
            .collect();
        if !phases.is_empty() {
            self.out.push_str("<h3>Per batch</h3>");
            let rows = distribution_rows(&phases, "name");
            self.table("batch-phases-table", &DISTRIBUTION_HEADERS, &rows);
        }
    }

    /// Each worker's time fetching batches, against its main process's wall time.
    fn workers(&mut self, run: &RunFigures, data: &Value) {
        let empty = Vec::new();
        let workers = data["workers"].as_array().unwrap_or(&empty);
        self.out.push_str("<h3>Workers: time fetching batches</h3>");
        if workers.is_empty() {
            self.empty("No batch.fetch spans.");
        } else {
            let wall_of =
                |main: u64| run.activity.mains.iter().find(|m| m.pid as u64 == main).map_or(0, |m| m.wall_ns);
            let bars: Vec<(String, f64, String, &str)> = workers
                .iter()
                .map(|w| {
                    let busy = u(&w["busy_ns"]);
                    let text = format!("{} ({})", format_ns(busy), percent(busy, wall_of(u(&w["main_pid"]))));
                    (format!("pid {}", u(&w["pid"])), busy as f64 / 1e9, text, PALETTE[0])
                })
                .collect();
            self.out.push_str(&svg::bars("worker busy time", &bars, "s"));
            let rows: Vec<(String, Vec<String>)> = workers
                .iter()
                .map(|w| {
                    let pid = u(&w["pid"]);
                    let busy = u(&w["busy_ns"]);
                    (
                        pid.to_string(),
                        vec![
                            num("pid", pid, &pid.to_string()),
                            num("main_pid", u(&w["main_pid"]), &u(&w["main_pid"]).to_string()),
                            num("batches", u(&w["batches"]), &u(&w["batches"]).to_string()),
                            num("busy_ns", busy, &format_ns(busy)),
                            num(
                                "main_wall_ns",
                                wall_of(u(&w["main_pid"])),
                                &percent(busy, wall_of(u(&w["main_pid"]))),
                            ),
                        ],
                    )
                })
                .collect();
            self.table(
                "workers-table",
                &[
                    ("pid", true),
                    ("main", true),
                    ("batches", true),
                    ("busy", true),
                    ("of its main's wall", true),
                ],
                &rows,
            );
        }
    }

    /// The ten batches waited for longest.
    fn longest_waits(&mut self, data: &Value) {
        let mut batches: Vec<&Value> =
            data["per_batch"].as_array().map(|b| b.iter().collect()).unwrap_or_default();
        batches.sort_by_key(|b| std::cmp::Reverse(u(&b["wait_ns"])));
        self.out.push_str("<h3>Longest waits</h3>");
        if batches.is_empty() {
            self.empty("No batch was waited for.");
        } else {
            let rows: Vec<(String, Vec<String>)> = batches
                .iter()
                .take(10)
                .map(|b| {
                    let name = format!("{}:{}:{}", u(&b["main_pid"]), u(&b["epoch"]), u(&b["batch"]));
                    let ns = |k: &str| num(k, u(&b[k]), &format_ns(u(&b[k])));
                    (
                        name,
                        vec![
                            num("epoch", u(&b["epoch"]), &u(&b["epoch"]).to_string()),
                            num("batch", u(&b["batch"]), &u(&b["batch"]).to_string()),
                            ns("wait_ns"),
                            ns("fetch_ns"),
                            ns("collate_ns"),
                            num("worker_pid", u(&b["worker_pid"]), &u(&b["worker_pid"]).to_string()),
                        ],
                    )
                })
                .collect();
            let headers = [
                ("epoch", true),
                ("batch", true),
                ("wait", true),
                ("fetch", true),
                ("collate", true),
                ("worker", true),
            ];
            self.table("waits-table", &headers, &rows);
        }
    }
}

pub(super) const DISTRIBUTION_HEADERS: [(&str, bool); 7] = [
    ("name", false),
    ("count", true),
    ("median", true),
    ("p90", true),
    ("p99", true),
    ("max", true),
    ("total", true),
];

pub(super) fn distribution_rows(rows: &[Value], key: &str) -> Vec<(String, Vec<String>)> {
    rows.iter()
        .map(|t| {
            let name = t[key].as_str().unwrap_or("").to_string();
            let ns = |k: &str| num(k, u(&t[k]), &format_ns(u(&t[k])));
            let cells = vec![
                text_cell(&name),
                num("count", u(&t["count"]), &u(&t["count"]).to_string()),
                ns("median_ns"),
                ns("p90_ns"),
                ns("p99_ns"),
                ns("max_ns"),
                ns("total_ns"),
            ];
            (name, cells)
        })
        .collect()
}
