//! The page's answer: the run's header, the wall-time breakdown per main process or rank,
//! and the comparison with a baseline.

use super::*;

impl Page {
    pub(super) fn header(&mut self, run: &RunFigures, s: &Value) {
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
        self.capture_line(&summary.capture);
        self.out.push_str(
            "<nav><a href=\"#breakdown\">Wall time</a><a href=\"#timelines\">Timelines</a>\
             <a href=\"#pipeline\">Data pipeline</a><a href=\"#files\">Files</a><a href=\"#ops\">Ops</a>\
             <a href=\"#calls\">Calls</a><a href=\"#gpu\">GPU</a><a href=\"#energy\">Energy</a></nav></header>",
        );
    }

    /// A run recorded with a capture option: one line saying how much of the job its ranges
    /// hold, and which they are (the figures below are of the ranges only).
    fn capture_line(&mut self, capture: &crate::run::ranges::Capture) {
        let Some(source) = capture.source else { return };
        let total = capture.recorded_ns + capture.outside_ns;
        let ranges: Vec<String> = capture
            .ranges
            .iter()
            .map(|r| {
                format!(
                    "#{} {}–{} ({} → {})",
                    r.number,
                    seconds(r.start_ns),
                    seconds(r.end_ns),
                    escape(&r.opened_by),
                    escape(&r.closed_by)
                )
            })
            .collect();
        let _ = write!(
            self.out,
            r#"<p class="capture" data-k="capture_recorded_ns" data-v="{}">Capture ranges ({}): {} of {} recorded ({:.1} %), {} outside and not recorded; the figures below are of the ranges only. {}</p>"#,
            capture.recorded_ns,
            escape(source),
            seconds(capture.recorded_ns),
            seconds(total),
            capture.recorded_ns as f64 * 100.0 / total.max(1) as f64,
            seconds(capture.outside_ns),
            ranges.join(", ")
        );
    }

    /// The answer: one stacked bar per main process (rank), and its table.
    pub(super) fn breakdown(&mut self, run: &RunFigures, baseline: Option<&RunFigures>) {
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

    pub(super) fn comparison(&mut self, a: &RunFigures, b: &RunFigures) {
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

    pub(super) fn diff_rows(&mut self, id: &str, rows: &[Row]) {
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
}

pub(super) fn segments(m: &MainActivity) -> Vec<Segment> {
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
pub(super) fn answer(mains: &[MainActivity]) -> Option<String> {
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
