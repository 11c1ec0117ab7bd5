//! The top-N tables: files, ops (time, energy, shapes), calls, GPU and energy.

use super::*;

impl Page {
    pub(super) fn files(&mut self, s: &Value) {
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
        let mut headers = vec![
            ("path", false),
            ("opens", true),
            ("calls", true),
            ("read", true),
            ("written", true),
            ("time", true),
        ];
        // With call sites (`--sites`): the Python line that spent most time on each file.
        let mut rows = rows;
        if files.iter().take(TOP).any(|f| f["sites"].as_array().is_some_and(|s| !s.is_empty())) {
            headers.push(("made most by", false));
            for ((_, cells), f) in rows.iter_mut().zip(files) {
                cells.push(text_cell(&site_label(&f["sites"][0])));
            }
        }
        self.table("files-table", &headers, &rows);
        self.end_section();
    }

    pub(super) fn ops(&mut self, run: &RunFigures, s: &Value, e: &Value) {
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

    pub(super) fn calls(&mut self, s: &Value) {
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
        self.call_sites(s);
        self.end_section();
    }

    /// The top call sites (`mlprof-collect --sites`), if the run has them.
    fn call_sites(&mut self, s: &Value) {
        let empty = Vec::new();
        let sites = s["sites"].as_array().unwrap_or(&empty);
        if sites.is_empty() {
            return;
        }
        let _ = write!(
            self.out,
            r#"<h3>By call site (--sites)</h3><p class="note">{} Python lines made calls; most time first, each with its mix of calls.</p>"#,
            sites.len()
        );
        let rows: Vec<(String, Vec<String>)> = sites
            .iter()
            .take(TOP)
            .map(|site| {
                let calls = site["calls"].as_object();
                let total = |key: &str| calls.map_or(0, |c| c.values().map(|v| u(&v[key])).sum::<u64>());
                let mut mix: Vec<(&String, u64)> =
                    calls.map(|c| c.iter().map(|(n, v)| (n, u(&v["count"]))).collect()).unwrap_or_default();
                mix.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
                let mix: Vec<String> = mix.iter().map(|(n, count)| format!("{count} {n}")).collect();
                let label = site_label(site);
                let cells = vec![
                    text_cell(&label),
                    text_cell(&mix.join(", ")),
                    num("count", total("count"), &total("count").to_string()),
                    num("total_ns", total("total_ns"), &format_ns(total("total_ns"))),
                    num("bytes", total("bytes"), &format_bytes(total("bytes"))),
                ];
                (label, cells)
            })
            .collect();
        let headers =
            [("site", false), ("calls made", false), ("calls", true), ("time", true), ("bytes", true)];
        self.table("sites-table", &headers, &rows);
    }

    pub(super) fn gpu(&mut self, s: &Value) {
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

    pub(super) fn energy(&mut self, e: &Value) {
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

/// The columns of [`energy_row`].
pub(super) fn energy_headers(with_shapes: bool, with_energy: bool) -> &'static [(&'static str, bool)] {
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
pub(super) fn compact_list(list: &str) -> String {
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
pub(super) fn energy_row(r: &Value, with_shapes: bool, with_energy: bool) -> (String, Vec<String>) {
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
pub(super) fn truncate_left(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        text.to_string()
    } else {
        format!("…{}", text.chars().skip(count - max + 1).collect::<String>())
    }
}

/// `file:line function` of a site object of the summary JSON, `module function` for a native
/// caller (empty for null).
fn site_label(site: &Value) -> String {
    let function = site["function"].as_str().unwrap_or("");
    match site["file"].as_str() {
        Some(module) if site["native"] == true => format!("{module} {function}"),
        Some(file) => format!("{file}:{} {function}", u(&site["line"])),
        None => String::new(),
    }
}
