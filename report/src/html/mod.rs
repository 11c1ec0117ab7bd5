//! `mlprof report RUN.bin -o report.html`: one self-contained HTML page with plots — no
//! script, no network, no web font (the system's sans-serif); styles inline, plots inline SVG
//! (the [`svg`] module). It opens from `file://` and can be attached to a ticket.
//!
//! From the top: the answer (per main process or rank, a stacked bar of its wall time in data
//! wait, GPU sync, file I/O, ops and phases, and the rest; the run's duration, drops and
//! command), timelines on one time axis (I/O throughput per process, DataLoader wait per
//! batch, step times, power per device), the data pipeline (transform time distributions,
//! worker busy time, longest waits), then top files, ops (time, energy, shapes), calls, flame
//! graphs of the spans with most CPU samples (`--sample`), GPU and energy tables. With a baseline (`--baseline A.bin`), a comparison section follows the
//! answer. The numbers in the tables are those of `summary --json` and `energy --json`
//! (taken from their renderings): each numeric cell carries the exact value in `data-v` and
//! a readable one as text. Plots are drawn from aggregates (per slice of the time axis, top
//! N), so the page's size does not grow with the run.

mod answer;
mod flame;
mod gpu_timeline;
mod pipeline;
pub(crate) mod svg;
mod tables;
mod timelines;

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
    page.hotspots(run);
    page.gpu(&summary_json);
    page.gpu_timeline(&summary_json);
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
    /// Where the CPU went in the spans with most samples: a flame graph each (none without
    /// `--sample`).
    fn hotspots(&mut self, run: &RunFigures) {
        let spans = flame::top_spans(&run.hotspots.folded, 3);
        if spans.is_empty() {
            return;
        }
        self.section("hotspots", "Where the CPU went (sampled stacks)");
        self.note(&format!(
            "{} samples at {} Hz, {} lost. A span holds the samples of the spans inside it; \
             `mlprof hotspots` has every span and the function tables.",
            run.hotspots.samples, run.hotspots.hz, run.hotspots.lost
        ));
        for (span, samples) in spans {
            let _ = write!(self.out, "<h3>{} — {samples} samples</h3>", escape(&span));
            self.out.push_str(&flame::icicle(&run.hotspots.folded, &span));
        }
        self.end_section();
    }

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
}

#[cfg(test)]
mod tests;
