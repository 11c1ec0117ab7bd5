//! The page's GPU timeline section: per device its busy share and why it was idle (a bar of
//! what its main process did meanwhile), the kernels by GPU time and the copies, or why the run
//! has no GPU timeline. Rendered from `gpu.timeline` of the summary's JSON.

use std::fmt::Write;

use serde_json::Value;

use super::svg::{Segment, stacked_bars};
use super::{CATEGORY_COLORS, Page, REST_COLOR, TOP, num, percent, text_cell, u};
use crate::gpu_timeline::IDLE_PARTS;
use crate::human::{format_bytes, format_ns, truncate};

impl Page {
    pub(super) fn gpu_timeline(&mut self, s: &Value) {
        self.section("gpu-timeline", "What the GPU did");
        let timeline = &s["gpu"]["timeline"];
        if timeline["source"].is_null() {
            let why = timeline["unavailable"].as_str().unwrap_or("no CUDA call was recorded");
            self.empty(&format!("No GPU timeline: {why}."));
            self.end_section();
            return;
        }
        for note in timeline["notes"].as_array().into_iter().flatten() {
            self.note(note.as_str().unwrap_or(""));
        }
        let empty = Vec::new();
        let devices = timeline["devices"].as_array().unwrap_or(&empty);
        let mut bars = Vec::new();
        for d in devices {
            let (busy, idle) = (u(&d["busy_ns"]), u(&d["idle_ns"]));
            let _ = write!(
                self.out,
                r#"<p class="answer">CUDA device {} was busy <b data-k="busy_ns" data-v="{busy}">{}</b> ({} of the run) and idle <b data-k="idle_ns" data-v="{idle}">{}</b>.</p>"#,
                u(&d["index"]),
                format_ns(busy),
                percent(busy, busy + idle),
                format_ns(idle)
            );
            let segments = IDLE_PARTS
                .iter()
                .enumerate()
                .map(|(i, (key, label))| {
                    let ns = u(&d["idle_by"][key]);
                    Segment {
                        value: ns as f64 / 1e9,
                        color: CATEGORY_COLORS.get(i).copied().unwrap_or(REST_COLOR),
                        title: format!("{label}: {} ({} of the idle time)", format_ns(ns), percent(ns, idle)),
                    }
                })
                .collect();
            bars.push((format!("device {} (pid {})", u(&d["index"]), u(&d["main_pid"])), segments));
        }
        if !bars.is_empty() {
            self.out.push_str("<h3>Why the GPU was idle: what its main process did meanwhile</h3>");
            let colors: Vec<(&str, &str)> = IDLE_PARTS
                .iter()
                .enumerate()
                .map(|(i, (_, label))| (*label, CATEGORY_COLORS.get(i).copied().unwrap_or(REST_COLOR)))
                .collect();
            self.legend(&colors);
            self.out.push_str(&stacked_bars("GPU idle time by what the host did", &bars, "s"));
        }
        self.kernels_by_gpu_time(timeline);
        self.end_section();
    }

    fn kernels_by_gpu_time(&mut self, timeline: &Value) {
        let empty = Vec::new();
        let kernels = timeline["kernels"].as_array().unwrap_or(&empty);
        let total: u64 = kernels.iter().map(|k| u(&k["gpu_ns"])).sum();
        let mut rows: Vec<(String, Vec<String>)> = kernels
            .iter()
            .take(TOP)
            .map(|k| {
                let name = k["name"].as_str().unwrap_or("").to_string();
                let (count, ns) = (u(&k["count"]), u(&k["gpu_ns"]));
                let cells = vec![
                    text_cell(&truncate(&name, 140)),
                    num("count", count, &count.to_string()),
                    num("gpu_ns", ns, &format_ns(ns)),
                    num("mean_ns", ns / count.max(1), &format_ns(ns / count.max(1))),
                    num("share", ns, &percent(ns, total)),
                ];
                (name, cells)
            })
            .collect();
        for (kind, c) in timeline["copies"].as_object().into_iter().flatten() {
            let (count, ns, bytes) = (u(&c["count"]), u(&c["gpu_ns"]), u(&c["bytes"]));
            let name = format!("copies {kind} ({})", format_bytes(bytes));
            let cells = vec![
                text_cell(&name),
                num("count", count, &count.to_string()),
                num("gpu_ns", ns, &format_ns(ns)),
                num("mean_ns", ns / count.max(1), &format_ns(ns / count.max(1))),
                num("share", 0, "–"),
            ];
            rows.push((name, cells));
        }
        self.out.push_str("<h3>Kernels and copies by GPU time</h3>");
        if rows.is_empty() {
            self.empty("No kernel or copy ran on a GPU.");
            return;
        }
        self.table(
            "gpu-kernels-table",
            &[
                ("kernel", false),
                ("runs", true),
                ("GPU time", true),
                ("mean", true),
                ("share of kernels", true),
            ],
            &rows,
        );
    }
}
