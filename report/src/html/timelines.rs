//! Timelines on one time axis: I/O throughput per process, DataLoader wait per batch, step
//! times, power per device.

use super::*;

impl Page {
    pub(super) fn timelines(&mut self, run: &RunFigures) {
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

        self.out
            .push_str(r#"<div id="timeline-gpu"><h3>GPU busy per CUDA device (share of each slice)</h3>"#);
        let devices = run.summary.gpu.as_ref().map_or(&[][..], |g| g.timeline.devices.as_slice());
        if devices.is_empty() {
            self.empty("No GPU timeline (see What the GPU did).");
        } else {
            let series: Vec<Series> = devices
                .iter()
                .enumerate()
                .map(|(i, d)| Series {
                    name: format!("CUDA device {}", d.index),
                    color: PALETTE[i % PALETTE.len()],
                    style: Style::Line,
                    points: d
                        .busy_by_bin(t.start_ns, t.bin_ns, BINS)
                        .into_iter()
                        .enumerate()
                        .map(|(b, share)| (center(b), share * 100.0))
                        .collect(),
                })
                .collect();
            self.series_legend(&series);
            self.out.push_str(&svg::time_panel("GPU busy per device", duration_s, "%", &series));
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

    pub(super) fn series_legend(&mut self, series: &[Series]) {
        let items: Vec<(&str, &str)> = series.iter().map(|s| (s.name.as_str(), s.color)).collect();
        self.legend(&items);
    }
}

/// Each main's points, or — beyond [`MAX_POINTS`] — the longest per slice of the time axis.
pub(super) fn scatter(per_main: &[(u32, Vec<(u64, u64)>)], bin_s: f64, what: &str) -> Vec<Series> {
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
