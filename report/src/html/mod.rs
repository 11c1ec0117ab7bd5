//! `mlprof report RUN.bin -o report.html`: one self-contained HTML page with plots — no
//! script, no network, no web font (the system's sans-serif); styles inline, plots inline SVG
//! (the [`svg`] module). It opens from `file://` and can be attached to a ticket.
//!
//! From the top: the answer (per main process or rank, a stacked bar of its wall time in data
//! wait, GPU sync, file I/O, ops and phases, and the rest; the run's duration, drops and
//! command), timelines on one time axis (I/O throughput per process, DataLoader wait per
//! batch, step times, power per device), the data pipeline (transform time distributions,
//! worker busy time, longest waits), then top files, ops (time, energy, shapes), calls, GPU
//! and energy tables. With a baseline (`--baseline A.bin`), a comparison section follows the
//! answer. The numbers in the tables are those of `summary --json` and `energy --json`
//! (taken from their renderings): each numeric cell carries the exact value in `data-v` and
//! a readable one as text. Plots are drawn from aggregates (per slice of the time axis, top
//! N), so the page's size does not grow with the run.

pub mod svg;

use std::fmt::Write as _;

use serde_json::Value;

use crate::activity::{BINS, Category, MainActivity};
use crate::diff::{Diff, Row, RunFigures};
use crate::human::{format_bytes, format_ns, truncate};
use crate::{energy, summary};
use svg::{Segment, Series, Style, escape};

/// Rows in each top-N table.
const TOP: usize = 15;
/// Points a scatter plots before it plots the longest per slice of the time axis instead.
const MAX_POINTS: usize = 2_000;

const CATEGORY_COLORS: [&str; 4] = ["#e6550d", "#756bb1", "#3182bd", "#31a354"];
const REST_COLOR: &str = "#d4d8dd";
const PALETTE: [&str; 8] =
    ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

/// The page for `run`, compared with `baseline` when given.
pub fn render(run: &RunFigures, baseline: Option<&RunFigures>) -> String {
    let summary_json = summary::json::render(&run.summary);
    let energy_json = energy::json::render(&run.energy);
    let mut page = Page { out: String::with_capacity(256 << 10) };
    let command = &run.summary.command_line;
    let _ = write!(
        page.out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>mlprof report: {}</title><style>{}</style></head><body><main>",
        escape(&truncate(command, 80)),
        include_str!("style.css")
    );
    page.header(run, &summary_json);
    page.breakdown(run, baseline);
    if let Some(a) = baseline {
        page.comparison(a, run);
    }
    page.timelines(run);
    page.pipeline(run, &summary_json);
    page.files(&summary_json);
    page.ops(run, &summary_json, &energy_json);
    page.calls(&summary_json);
    page.gpu(&summary_json);
    page.energy(&energy_json);
    let _ = writeln!(
        page.out,
        "<footer id=\"end\">mlprof {} — report of {}</footer></main></body></html>",
        env!("CARGO_PKG_VERSION"),
        escape(&run.run)
    );
    page.out
}

struct Page {
    out: String,
}

/// A numeric cell: the exact value in `data-v`, `shown` as text.
fn num(key: &str, exact: impl std::fmt::Display, shown: &str) -> String {
    format!(r#"<td class="num" data-k="{key}" data-v="{exact}">{}</td>"#, escape(shown))
}

fn text_cell(text: &str) -> String {
    format!(r#"<td class="name">{}</td>"#, escape(text))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn seconds(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 { "-".into() } else { format!("{:.1}%", part as f64 * 100.0 / whole as f64) }
}

impl Page {
    fn section(&mut self, id: &str, title: &str) {
        let _ = write!(self.out, r#"<section id="{id}"><h2>{}</h2>"#, escape(title));
    }

    fn end_section(&mut self) {
        self.out.push_str("</section>");
    }

    fn note(&mut self, text: &str) {
        let _ = write!(self.out, r#"<p class="note">{}</p>"#, escape(text));
    }

    fn empty(&mut self, text: &str) {
        let _ = write!(self.out, r#"<p class="empty">{}</p>"#, escape(text));
    }

    /// A table: `headers` (label, numeric), `rows` of (name, cells).
    fn table(&mut self, id: &str, headers: &[(&str, bool)], rows: &[(String, Vec<String>)]) {
        let _ = write!(self.out, r#"<table id="{id}"><thead><tr>"#);
        for (label, numeric) in headers {
            let class = if *numeric { r#" class="num""# } else { "" };
            let _ = write!(self.out, "<th{class}>{}</th>", escape(label));
        }
        self.out.push_str("</tr></thead><tbody>");
        for (name, cells) in rows {
            let _ = write!(self.out, r#"<tr data-name="{}">{}</tr>"#, escape(name), cells.concat());
        }
        self.out.push_str("</tbody></table>");
    }

    fn legend(&mut self, items: &[(&str, &str)]) {
        self.out.push_str(r#"<div class="legend">"#);
        for (label, color) in items {
            let _ = write!(self.out, r#"<span style="--c:{color}">{}</span>"#, escape(label));
        }
        self.out.push_str("</div>");
    }

    fn header(&mut self, run: &RunFigures, s: &Value) {
        let summary = &run.summary;
        let _ = write!(
            self.out,
            r#"<header id="summary"><h1>mlprof report</h1><p class="cmd"><code>{}</code></p><dl class="facts">"#,
            escape(&summary.command_line)
        );
        let pids: std::collections::BTreeSet<u32> = summary.processes.iter().map(|p| p.pid).collect();
        let facts: [(&str, &str, String, String); 6] = [
            ("duration", "duration_ns", u(&s["duration_ns"]).to_string(), seconds(u(&s["duration_ns"]))),
            ("events", "events", u(&s["events"]).to_string(), u(&s["events"]).to_string()),
            ("dropped", "dropped", u(&s["dropped"]).to_string(), u(&s["dropped"]).to_string()),
            ("processes", "processes", pids.len().to_string(), pids.len().to_string()),
            (
                "main processes",
                "mains",
                run.activity.mains.len().to_string(),
                run.activity.mains.len().to_string(),
            ),
            ("host", "host", escape(&summary.host), summary.host.clone()),
        ];
        for (label, key, exact, shown) in facts {
            let _ = write!(
                self.out,
                r#"<div><dt>{label}</dt><dd data-k="{key}" data-v="{exact}">{}</dd></div>"#,
                escape(&shown)
            );
        }
        self.out.push_str("</dl>");
        if summary.dropped > 0 {
            let d = &summary.drops;
            let _ = write!(
                self.out,
                r#"<p class="warn">{} records were dropped ({} lane full, {} no free lane, {} interrupted): the figures below miss these calls.</p>"#,
                summary.dropped, d.lane_full, d.no_lane, d.interrupted
            );
        }
        for warning in &summary.warnings {
            let _ = write!(self.out, r#"<p class="warn">warning: {}</p>"#, escape(warning));
        }
        self.out.push_str(
            "<nav><a href=\"#breakdown\">Wall time</a><a href=\"#timelines\">Timelines</a>\
             <a href=\"#pipeline\">Data pipeline</a><a href=\"#files\">Files</a><a href=\"#ops\">Ops</a>\
             <a href=\"#calls\">Calls</a><a href=\"#gpu\">GPU</a><a href=\"#energy\">Energy</a></nav></header>",
        );
    }

    /// The answer: one stacked bar per main process (rank), and its table.
    fn breakdown(&mut self, run: &RunFigures, baseline: Option<&RunFigures>) {
        self.section("breakdown", "Where the wall time went");
        let mains = &run.activity.mains;
        if mains.is_empty() {
            self.empty("No process was recorded.");
            self.end_section();
            return;
        }
        if let Some(answer) = answer(mains) {
            let _ = write!(self.out, r#"<p class="answer">{}</p>"#, escape(&answer));
        }
        self.note(
            "Per main process (the processes that waited for DataLoader batches, ran training phases or \
             called the GPU; DataLoader workers belong to theirs): its lifetime, each instant counted once \
             in the first of data wait, GPU sync, file I/O, ops & phases that any of its threads was in.",
        );
        let mut legend: Vec<(&str, &str)> =
            Category::ALL.iter().map(|c| (c.label(), CATEGORY_COLORS[*c as usize])).collect();
        legend.push(("rest", REST_COLOR));
        self.legend(&legend);
        let mut bars = Vec::new();
        if let Some(a) = baseline {
            for (i, m) in a.activity.mains.iter().enumerate() {
                bars.push((format!("A: {}", m.label()), segments(m)));
                if let Some(b) = run.activity.mains.get(i) {
                    bars.push((format!("B: {}", b.label()), segments(b)));
                }
            }
            for b in run.activity.mains.iter().skip(a.activity.mains.len()) {
                bars.push((format!("B: {}", b.label()), segments(b)));
            }
        } else {
            bars = mains.iter().map(|m| (m.label(), segments(m))).collect();
        }
        self.out.push_str(&svg::stacked_bars("wall time per main process", &bars, "s"));
        let mut headers = vec![("main", false), ("wall", true)];
        headers.extend(Category::ALL.iter().map(|c| (c.label(), true)));
        headers.extend([("rest", true), ("command", false)]);
        let rows: Vec<(String, Vec<String>)> = mains
            .iter()
            .map(|m| {
                let mut cells = vec![text_cell(&m.label()), num("wall_ns", m.wall_ns, &seconds(m.wall_ns))];
                for c in Category::ALL {
                    let ns = m.by_category[c as usize];
                    let shown = format!("{} ({})", seconds(ns), percent(ns, m.wall_ns));
                    cells.push(num(&format!("{}_ns", c.key()), ns, &shown));
                }
                let rest = m.rest_ns();
                cells.push(num(
                    "rest_ns",
                    rest,
                    &format!("{} ({})", seconds(rest), percent(rest, m.wall_ns)),
                ));
                cells.push(format!(r#"<td class="mono">{}</td>"#, escape(&truncate(&m.cmdline, 120))));
                (m.label(), cells)
            })
            .collect();
        self.table("breakdown-table", &headers, &rows);
        self.end_section();
    }

    fn comparison(&mut self, a: &RunFigures, b: &RunFigures) {
        let diff = Diff::compute(a, b);
        self.section("comparison", "Compared with the baseline");
        let _ = write!(
            self.out,
            r#"<p class="note">A (baseline) = <code>{}</code>, B = <code>{}</code> (this run). Bars above: A then B per main process.</p>"#,
            escape(&diff.a.run),
            escape(&diff.b.run)
        );
        let share = |p: &Option<crate::diff::PipelineSide>| {
            p.map_or(("-".to_string(), String::new()), |p| {
                (format!("{:.1}%", p.wait_share * 100.0), format!("{}", p.wait_share))
            })
        };
        let energy = |e: &Option<crate::diff::EnergySide>| {
            e.as_ref().map_or(("not measured".to_string(), String::new()), |e| {
                (format!("{:.3} ± {:.3} J", e.energy_j, e.uncertainty_j), format!("{}", e.energy_j))
            })
        };
        let rows = vec![
            ("duration".to_string(), {
                let (x, y) = (diff.a.duration_ns, diff.b.duration_ns);
                vec![text_cell("duration"), num("a", x, &seconds(x)), num("b", y, &seconds(y))]
            }),
            ("data wait share".to_string(), {
                let ((xa, va), (xb, vb)) = (share(&diff.a.pipeline), share(&diff.b.pipeline));
                vec![text_cell("data wait share"), num("a", va, &xa), num("b", vb, &xb)]
            }),
            ("energy".to_string(), {
                let ((xa, va), (xb, vb)) = (energy(&diff.a.energy), energy(&diff.b.energy));
                vec![text_cell("energy"), num("a", va, &xa), num("b", vb, &xb)]
            }),
        ];
        self.table("comparison-table", &[("", false), ("A", true), ("B", true)], &rows);
        for (id, title, rows) in [
            ("diff-spans-table", "Spans (ops, phases, DataLoader): biggest time changes", &diff.spans),
            ("diff-calls-table", "Calls: biggest time changes", &diff.calls),
            ("diff-files-table", "Files: biggest time changes", &diff.files),
        ] {
            let _ = write!(self.out, "<h3>{}</h3>", escape(title));
            self.diff_rows(id, rows);
        }
        self.end_section();
    }

    fn diff_rows(&mut self, id: &str, rows: &[Row]) {
        let changed: Vec<&Row> = rows.iter().filter(|r| r.changed()).take(TOP).collect();
        if changed.is_empty() {
            self.empty("No change.");
            return;
        }
        let headers = [
            ("name", false),
            ("count A", true),
            ("count B", true),
            ("time A", true),
            ("time B", true),
            ("Δ time", true),
            ("B/A", true),
        ];
        let rows: Vec<(String, Vec<String>)> = changed
            .iter()
            .map(|r| {
                let delta = r.delta_ns();
                let class = if delta > 0 { "up" } else { "down" };
                let sign = if delta > 0 { "+" } else { "-" };
                let magnitude = format_ns(delta.unsigned_abs().min(u64::MAX as u128) as u64);
                let cells = vec![
                    text_cell(&r.name),
                    num("count_a", r.a.count, &r.a.count.to_string()),
                    num("count_b", r.b.count, &r.b.count.to_string()),
                    num("total_ns_a", r.a.total_ns, &format_ns(r.a.total_ns)),
                    num("total_ns_b", r.b.total_ns, &format_ns(r.b.total_ns)),
                    format!(
                        r#"<td class="num {class}" data-k="delta_ns" data-v="{delta}">{sign}{magnitude}</td>"#
                    ),
                    num(
                        "ratio",
                        r.ratio().unwrap_or(0.0),
                        &r.ratio().map_or("-".into(), |x| format!("{x:.2}×")),
                    ),
                ];
                (r.name.clone(), cells)
            })
            .collect();
        self.table(id, &headers, &rows);
    }

    fn timelines(&mut self, run: &RunFigures) {
        self.section("timelines", "Over time");
        let t = &run.activity.timelines;
        let duration_s = run.activity.duration_ns as f64 / 1e9;
        let bin_s = t.bin_ns as f64 / 1e9;
        let center = |i: usize| (i as f64 + 0.5) * bin_s;
        self.note("All panels share the run's time axis (seconds from the collector's start).");

        self.out.push_str(r#"<div id="timeline-io"><h3>I/O throughput per process (read + written)</h3>"#);
        if t.io.is_empty() {
            self.empty("No bytes were read or written.");
        } else {
            let mut series: Vec<Series> = Vec::new();
            let mut other = vec![0u64; BINS];
            for (i, (pid, bins)) in t.io.iter().enumerate() {
                if i < PALETTE.len() - 1 {
                    let points =
                        bins.iter().enumerate().map(|(b, &v)| (center(b), v as f64 / bin_s / 1e6)).collect();
                    series.push(Series {
                        name: format!("pid {pid}"),
                        color: PALETTE[i],
                        style: Style::Line,
                        points,
                    });
                } else {
                    for (o, v) in other.iter_mut().zip(bins) {
                        *o += v;
                    }
                }
            }
            if t.io.len() >= PALETTE.len() {
                let points =
                    other.iter().enumerate().map(|(b, &v)| (center(b), v as f64 / bin_s / 1e6)).collect();
                series.push(Series {
                    name: format!("{} other processes", t.io.len() + 1 - PALETTE.len()),
                    color: PALETTE[PALETTE.len() - 1],
                    style: Style::Line,
                    points,
                });
            }
            self.series_legend(&series);
            self.out.push_str(&svg::time_panel("I/O throughput", duration_s, "MB/s", &series));
        }
        self.out.push_str("</div>");

        self.out.push_str(r#"<div id="timeline-waits"><h3>DataLoader wait per batch</h3>"#);
        if t.waits.is_empty() {
            self.empty("No DataLoader spans (record them with mlprof-collect --torch).");
        } else {
            let series = scatter(&t.waits, bin_s, "waits");
            self.series_legend(&series);
            self.out.push_str(&svg::time_panel("DataLoader wait per batch", duration_s, "ms", &series));
        }
        self.out.push_str("</div>");

        self.out
            .push_str(r#"<div id="timeline-steps"><h3>Training step time (between optimizer steps)</h3>"#);
        if t.steps.iter().all(|(_, s)| s.is_empty()) {
            self.empty("No optimizer steps (recorded with mlprof-collect --torch).");
        } else {
            let series = scatter(&t.steps, bin_s, "steps");
            self.series_legend(&series);
            self.out.push_str(&svg::time_panel("training step time", duration_s, "ms", &series));
        }
        self.out.push_str("</div>");

        self.out.push_str(r#"<div id="timeline-power"><h3>Power per device</h3>"#);
        if run.power.is_empty() {
            self.empty("No energy was sampled (no NVML and no RAPL, or --no-energy).");
        } else {
            let series: Vec<Series> = run
                .power
                .iter()
                .enumerate()
                .map(|(i, p)| Series {
                    name: p.device.clone(),
                    color: PALETTE[i % PALETTE.len()],
                    style: Style::Line,
                    points: p
                        .watts
                        .iter()
                        .enumerate()
                        .map(|(b, &w)| ((b as f64 + 0.5) * p.bin_s, w))
                        .collect(),
                })
                .collect();
            self.series_legend(&series);
            self.out.push_str(&svg::time_panel("power per device", duration_s, "W", &series));
        }
        self.out.push_str("</div>");
        self.end_section();
    }

    fn series_legend(&mut self, series: &[Series]) {
        let items: Vec<(&str, &str)> = series.iter().map(|s| (s.name.as_str(), s.color)).collect();
        self.legend(&items);
    }

    fn pipeline(&mut self, run: &RunFigures, s: &Value) {
        self.section("pipeline", "Data pipeline");
        let data = &s["data_pipeline"];
        if data.is_null() {
            self.empty("No DataLoader spans in this run (record them with mlprof-collect --torch).");
            self.end_section();
            return;
        }
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
        self.end_section();
    }

    fn files(&mut self, s: &Value) {
        self.section("files", "Top files");
        let empty = Vec::new();
        let files = s["files"].as_array().unwrap_or(&empty);
        if files.is_empty() {
            self.empty("No call was attributed to a file.");
            self.end_section();
            return;
        }
        let _ = write!(
            self.out,
            r#"<p class="note">{} files; most bytes first (as in mlprof summary).</p>"#,
            files.len()
        );
        let bars: Vec<(String, f64, String, &str)> = files
            .iter()
            .take(TOP)
            .map(|f| {
                let bytes = u(&f["bytes_read"]) + u(&f["bytes_written"]);
                let path = f["path"].as_str().unwrap_or("");
                (truncate_left(path, 28), bytes as f64 / 1e6, format_bytes(bytes), PALETTE[0])
            })
            .collect();
        self.out.push_str(&svg::bars("bytes per file", &bars, "MB"));
        let rows: Vec<(String, Vec<String>)> = files
            .iter()
            .take(TOP)
            .map(|f| {
                let path = f["path"].as_str().unwrap_or("").to_string();
                let cells = vec![
                    text_cell(&path),
                    num("opens", u(&f["opens"]), &u(&f["opens"]).to_string()),
                    num("calls", u(&f["calls"]), &u(&f["calls"]).to_string()),
                    num("bytes_read", u(&f["bytes_read"]), &format_bytes(u(&f["bytes_read"]))),
                    num("bytes_written", u(&f["bytes_written"]), &format_bytes(u(&f["bytes_written"]))),
                    num("total_ns", u(&f["total_ns"]), &format_ns(u(&f["total_ns"]))),
                ];
                (path, cells)
            })
            .collect();
        let headers = [
            ("path", false),
            ("opens", true),
            ("calls", true),
            ("read", true),
            ("written", true),
            ("time", true),
        ];
        self.table("files-table", &headers, &rows);
        self.end_section();
    }

    fn ops(&mut self, run: &RunFigures, s: &Value, e: &Value) {
        self.section("ops", "Top ops");
        let empty = Vec::new();
        let spans = s["spans"].as_array().unwrap_or(&empty);
        let ops: Vec<&Value> = spans.iter().filter(|r| r["domain"] == "PyTorch").collect();
        let (rows_of, what): (Vec<&Value>, &str) =
            if ops.is_empty() { (spans.iter().collect(), "ITT spans") } else { (ops, "PyTorch ops") };
        self.out.push_str("<h3>By time</h3>");
        if rows_of.is_empty() {
            self.empty("No ITT spans (PyTorch ops are recorded with mlprof-collect --torch).");
        } else {
            let _ = write!(
                self.out,
                r#"<p class="note">{} {what}, most total time first (as in mlprof summary; ops nest, so their times overlap).</p>"#,
                rows_of.len()
            );
            let bars: Vec<(String, f64, String, &str)> = rows_of
                .iter()
                .take(TOP)
                .map(|r| {
                    let ns = u(&r["total_ns"]);
                    (
                        truncate(r["name"].as_str().unwrap_or(""), 28),
                        ns as f64 / 1e9,
                        format_ns(ns),
                        CATEGORY_COLORS[3],
                    )
                })
                .collect();
            self.out.push_str(&svg::bars("op time", &bars, "s"));
            let rows: Vec<(String, Vec<String>)> = rows_of
                .iter()
                .take(TOP)
                .map(|r| {
                    let name = r["name"].as_str().unwrap_or("").to_string();
                    let cells = vec![
                        text_cell(&name),
                        text_cell(r["domain"].as_str().unwrap_or("")),
                        num("count", u(&r["count"]), &u(&r["count"]).to_string()),
                        num("total_ns", u(&r["total_ns"]), &format_ns(u(&r["total_ns"]))),
                        num("mean_ns", u(&r["mean_ns"]), &format_ns(u(&r["mean_ns"]))),
                    ];
                    (name, cells)
                })
                .collect();
            let headers =
                [("name", false), ("domain", false), ("count", true), ("total", true), ("mean", true)];
            self.table("spans-table", &headers, &rows);
        }
        // Op configurations (shapes) and energy come from the energy report's spans.
        let espans = e["spans"].as_array().unwrap_or(&empty);
        let shaped: Vec<&Value> =
            espans.iter().filter(|r| r["shapes"].as_str().is_some_and(|x| !x.is_empty())).collect();
        let measured = f(&e["total"]["energy_j"]) > 0.0;
        if !shaped.is_empty() {
            let mut shaped = shaped;
            shaped.sort_by(|a, b| f(&b["time_s"]).total_cmp(&f(&a["time_s"])));
            let _ = write!(
                self.out,
                r#"<h3>By input shapes (--torch-shapes)</h3><p class="note">{} op configurations; most time first. Repeated shapes are shown once with ×N (the exact list is the cell's tooltip and in mlprof energy --json).</p>"#,
                shaped.len()
            );
            let rows: Vec<(String, Vec<String>)> =
                shaped.iter().take(TOP).map(|r| energy_row(r, true, measured)).collect();
            self.table("shapes-table", energy_headers(true, measured), &rows);
        }
        self.out.push_str("<h3>By energy</h3>");
        let ops: Vec<&Value> = espans.iter().filter(|r| r["class"] == "itt:PyTorch").collect();
        if !measured {
            self.empty("No energy was measured in this run.");
        } else {
            let list = if ops.is_empty() { espans.iter().collect() } else { ops };
            let _ = write!(
                self.out,
                r#"<p class="note">{} as mlprof energy attributes them (each layer shares the measured energy among its spans; most energy first).</p>"#,
                if list.len() == espans.len() { "Spans" } else { "PyTorch ops" }
            );
            let with_shapes = list.iter().any(|r| r["shapes"].as_str().is_some_and(|x| !x.is_empty()));
            let rows: Vec<(String, Vec<String>)> =
                list.iter().take(TOP).map(|r| energy_row(r, with_shapes, true)).collect();
            self.table("energy-spans-table", energy_headers(with_shapes, true), &rows);
        }
        let _ = run;
        self.end_section();
    }

    fn calls(&mut self, s: &Value) {
        self.section("calls", "Calls");
        let mut calls: Vec<(&String, &Value)> = s["calls"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(name, _)| {
                        mlprof_format::func::Func::from_name(name)
                            .is_none_or(|f| f.api() != mlprof_format::func::Api::Itt)
                    })
                    .collect()
            })
            .unwrap_or_default();
        if calls.is_empty() {
            self.empty("No call was recorded.");
            self.end_section();
            return;
        }
        calls.sort_by(|a, b| u(&b.1["total_ns"]).cmp(&u(&a.1["total_ns"])).then(a.0.cmp(b.0)));
        self.note("Every process, most time first (ITT spans are in the ops table: they nest).");
        let rows: Vec<(String, Vec<String>)> = calls
            .iter()
            .take(TOP + 5)
            .map(|(name, c)| {
                let cells = vec![
                    text_cell(name),
                    num("count", u(&c["count"]), &u(&c["count"]).to_string()),
                    num("errors", u(&c["errors"]), &u(&c["errors"]).to_string()),
                    num("total_ns", u(&c["total_ns"]), &format_ns(u(&c["total_ns"]))),
                    num("bytes", u(&c["bytes"]), &format_bytes(u(&c["bytes"]))),
                ];
                (name.to_string(), cells)
            })
            .collect();
        let headers =
            [("function", false), ("calls", true), ("errors", true), ("time", true), ("bytes", true)];
        self.table("calls-table", &headers, &rows);
        self.end_section();
    }

    fn gpu(&mut self, s: &Value) {
        self.section("gpu", "GPU API time and kernels");
        let gpu = &s["gpu"];
        if gpu.is_null() {
            self.empty("No CUDA or NCCL call was recorded.");
            self.end_section();
            return;
        }
        let _ = write!(
            self.out,
            r#"<p class="answer">Host threads were blocked on the GPU (synchronizations, blocking copies) for <b data-k="host_blocked_ns" data-v="{}">{}</b>.</p>"#,
            u(&gpu["host_blocked_ns"]),
            format_ns(u(&gpu["host_blocked_ns"]))
        );
        let mut apis: Vec<(&String, &Value)> =
            gpu["apis"].as_object().map(|m| m.iter().collect()).unwrap_or_default();
        apis.sort_by(|a, b| u(&b.1["total_ns"]).cmp(&u(&a.1["total_ns"])).then(a.0.cmp(b.0)));
        let rows: Vec<(String, Vec<String>)> = apis
            .iter()
            .take(TOP)
            .map(|(name, c)| {
                (
                    name.to_string(),
                    vec![
                        text_cell(name),
                        num("count", u(&c["count"]), &u(&c["count"]).to_string()),
                        num("errors", u(&c["errors"]), &u(&c["errors"]).to_string()),
                        num("total_ns", u(&c["total_ns"]), &format_ns(u(&c["total_ns"]))),
                        num("bytes", u(&c["bytes"]), &format_bytes(u(&c["bytes"]))),
                    ],
                )
            })
            .collect();
        self.out.push_str("<h3>API calls (host time)</h3>");
        self.table(
            "gpu-apis-table",
            &[("function", false), ("calls", true), ("errors", true), ("host time", true), ("bytes", true)],
            &rows,
        );
        let empty = Vec::new();
        let kernels = gpu["kernels"].as_array().unwrap_or(&empty);
        self.out.push_str("<h3>Kernels by launches</h3>");
        if kernels.is_empty() {
            self.empty("No kernel launch was recorded.");
        } else {
            let rows: Vec<(String, Vec<String>)> = kernels
                .iter()
                .take(TOP)
                .map(|k| {
                    let name = k["name"].as_str().unwrap_or("").to_string();
                    let cells = vec![
                        text_cell(&truncate(&name, 140)),
                        num("launches", u(&k["launches"]), &u(&k["launches"]).to_string()),
                        num("host_ns", u(&k["host_ns"]), &format_ns(u(&k["host_ns"]))),
                    ];
                    (name, cells)
                })
                .collect();
            self.table(
                "kernels-table",
                &[("kernel", false), ("launches", true), ("launch host time", true)],
                &rows,
            );
        }
        self.end_section();
    }

    fn energy(&mut self, e: &Value) {
        self.section("energy", "Energy");
        let empty = Vec::new();
        let devices = e["devices"].as_array().unwrap_or(&empty);
        if devices.is_empty() {
            self.empty("No energy was sampled (no NVML and no RAPL, or --no-energy).");
            self.end_section();
            return;
        }
        let total = &e["total"];
        let coverage = &e["coverage"];
        let _ = write!(
            self.out,
            r#"<p class="answer">The run's devices used <b data-k="energy_j" data-v="{}">{:.3} J</b> ± {:.3} J ({:.2} W mean); the recorded calls explain {:.1}% of it.</p>"#,
            f(&total["energy_j"]),
            f(&total["energy_j"]),
            f(&total["uncertainty_j"]),
            f(&total["mean_power_w"]),
            f(&coverage["fraction"]) * 100.0
        );
        let rows: Vec<(String, Vec<String>)> = devices
            .iter()
            .map(|d| {
                let name = d["name"].as_str().unwrap_or("").to_string();
                let figure = |k: &str, unit: &str| {
                    if d[k].is_null() {
                        num(k, "", "-")
                    } else {
                        num(k, f(&d[k]), &format!("{:.3} {unit}", f(&d[k])))
                    }
                };
                let cells = vec![
                    text_cell(&name),
                    text_cell(d["kind"].as_str().unwrap_or("")),
                    text_cell(if d["in_run"] == true { "yes" } else { "no" }),
                    text_cell(d["source"].as_str().unwrap_or("")),
                    figure("energy_j", "J"),
                    figure("uncertainty_j", "J"),
                    figure("mean_power_w", "W"),
                    num("samples", u(&d["samples"]), &u(&d["samples"]).to_string()),
                ];
                (format!("{}", u(&d["id"])), cells)
            })
            .collect();
        let headers = [
            ("device", false),
            ("kind", false),
            ("in run", false),
            ("source", false),
            ("energy", true),
            ("±", true),
            ("mean power", true),
            ("samples", true),
        ];
        self.table("devices-table", &headers, &rows);
        self.end_section();
    }
}

const DISTRIBUTION_HEADERS: [(&str, bool); 7] = [
    ("name", false),
    ("count", true),
    ("median", true),
    ("p90", true),
    ("p99", true),
    ("max", true),
    ("total", true),
];

fn distribution_rows(rows: &[Value], key: &str) -> Vec<(String, Vec<String>)> {
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

/// The columns of [`energy_row`].
fn energy_headers(with_shapes: bool, with_energy: bool) -> &'static [(&'static str, bool)] {
    const ALL: [(&str, bool); 8] = [
        ("name", false),
        ("shapes", false),
        ("dtypes", false),
        ("calls", true),
        ("time", true),
        ("energy", true),
        ("±", true),
        ("share", true),
    ];
    const NO_SHAPES: [(&str, bool); 6] =
        [("name", false), ("calls", true), ("time", true), ("energy", true), ("±", true), ("share", true)];
    match (with_shapes, with_energy) {
        (true, true) => &ALL,
        (true, false) => &ALL[..5],
        (false, true) => &NO_SHAPES,
        (false, false) => &NO_SHAPES[..3],
    }
}

/// `a;a;a;b` as `a ×3; b`: a list of shapes or dtypes, readable (`stack` of 64 tensors).
fn compact_list(list: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut items = list.split(';').peekable();
    while let Some(item) = items.next() {
        let mut n = 1;
        while items.peek() == Some(&item) {
            items.next();
            n += 1;
        }
        out.push(if n > 1 { format!("{item} ×{n}") } else { item.to_string() });
    }
    out.join("; ")
}

/// A span of `energy --json` as a table row: with the shapes and dtypes columns, and with the
/// energy columns (not for a run that measured none).
fn energy_row(r: &Value, with_shapes: bool, with_energy: bool) -> (String, Vec<String>) {
    let name = r["name"].as_str().unwrap_or("").to_string();
    let shapes = r["shapes"].as_str().unwrap_or("");
    let mut cells = vec![text_cell(&name)];
    if with_shapes {
        for (key, list) in [("shapes", shapes), ("dtypes", r["dtypes"].as_str().unwrap_or(""))] {
            cells.push(format!(
                r#"<td class="mono" data-k="{key}" data-v="{}" title="{}">{}</td>"#,
                escape(list),
                escape(list),
                escape(&compact_list(list))
            ));
        }
    }
    cells.extend([
        num("calls", u(&r["calls"]), &u(&r["calls"]).to_string()),
        num("time_s", f(&r["time_s"]), &format!("{:.6} s", f(&r["time_s"]))),
    ]);
    if with_energy {
        cells.extend([
            num("energy_j", f(&r["energy_j"]), &format!("{:.4} J", f(&r["energy_j"]))),
            num("uncertainty_j", f(&r["uncertainty_j"]), &format!("{:.4} J", f(&r["uncertainty_j"]))),
            num("share", f(&r["share"]), &format!("{:.2}%", f(&r["share"]) * 100.0)),
        ]);
    }
    let key = if shapes.is_empty() { name } else { format!("{name} {shapes}") };
    (key, cells)
}

/// A path cut at the front: the file name is what tells files apart.
fn truncate_left(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        text.to_string()
    } else {
        format!("…{}", text.chars().skip(count - max + 1).collect::<String>())
    }
}

fn segments(m: &MainActivity) -> Vec<Segment> {
    let mut out: Vec<Segment> = Category::ALL
        .iter()
        .map(|&c| {
            let ns = m.by_category[c as usize];
            Segment {
                value: ns as f64 / 1e9,
                color: CATEGORY_COLORS[c as usize],
                title: format!(
                    "{}: {} ({} of {})",
                    c.label(),
                    seconds(ns),
                    percent(ns, m.wall_ns),
                    seconds(m.wall_ns)
                ),
            }
        })
        .collect();
    let rest = m.rest_ns();
    out.push(Segment {
        value: rest as f64 / 1e9,
        color: REST_COLOR,
        title: format!("rest: {} ({} of {})", seconds(rest), percent(rest, m.wall_ns), seconds(m.wall_ns)),
    });
    out
}

/// One sentence: the biggest category over all mains.
fn answer(mains: &[MainActivity]) -> Option<String> {
    let wall: u64 = mains.iter().map(|m| m.wall_ns).sum();
    if wall == 0 {
        return None;
    }
    let mut parts: Vec<(String, u64)> = Category::ALL
        .iter()
        .map(|&c| (c.label().to_string(), mains.iter().map(|m| m.by_category[c as usize]).sum()))
        .collect();
    parts.sort_by_key(|(_, ns)| std::cmp::Reverse(*ns));
    let listed: Vec<String> = parts
        .iter()
        .filter(|(_, ns)| *ns > 0)
        .map(|(label, ns)| format!("{label} {}", percent(*ns, wall)))
        .collect();
    let who = if mains.len() == 1 {
        "The main process".to_string()
    } else {
        format!("The {} main processes", mains.len())
    };
    Some(if listed.is_empty() {
        format!(
            "{who} ran {} without waiting for data, the GPU or files, and without recorded ops.",
            seconds(wall)
        )
    } else {
        format!("{who} ran {}: {}; the rest outside them.", seconds(wall), listed.join(", "))
    })
}

/// Each main's points, or — beyond [`MAX_POINTS`] — the longest per slice of the time axis.
fn scatter(per_main: &[(u32, Vec<(u64, u64)>)], bin_s: f64, what: &str) -> Vec<Series> {
    per_main
        .iter()
        .enumerate()
        .filter(|(_, (_, points))| !points.is_empty())
        .map(|(i, (pid, points))| {
            let plotted: Vec<(f64, f64)> = if points.len() <= MAX_POINTS {
                points.iter().map(|&(t, v)| (t as f64 / 1e9, v as f64 / 1e6)).collect()
            } else {
                let mut longest = vec![0u64; BINS];
                for &(t, v) in points {
                    let bin = ((t as f64 / 1e9 / bin_s) as usize).min(BINS - 1);
                    longest[bin] = longest[bin].max(v);
                }
                longest
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| **v > 0)
                    .map(|(b, &v)| ((b as f64 + 0.5) * bin_s, v as f64 / 1e6))
                    .collect()
            };
            let suffix = if points.len() > MAX_POINTS { ", longest per slice" } else { "" };
            Series {
                name: format!("pid {pid}: {} {what}{suffix}", points.len()),
                color: PALETTE[i % PALETTE.len()],
                style: Style::Dots,
                points: plotted,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
