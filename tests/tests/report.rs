//! `mlprof report` (the HTML page, rendered by a real headless Chromium) and `mlprof diff`.
//!
//! The page's numbers must be those of `mlprof summary --json`: each numeric cell carries the
//! exact value in `data-v`, read back from the DOM Chromium dumps. The page must load with the
//! network cut and reference nothing outside itself, and its screenshot must show something.
//! The energy run's page (NVML test double) is tested in energy.rs.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use mlprof_tests::browser::{self, Rendered};
use mlprof_tests::*;
use serde_json::Value;

fn mlprof(args: &[&str]) -> String {
    let mut c = Command::new(&bins().mlprof);
    clean_env(&mut c).args(args);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "mlprof {args:?} failed\n{}", describe(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Nothing in the page can make the browser fetch: no script, link, image, frame, style import
/// or URL, and links only to the page's own sections.
fn assert_self_contained(dom: &str) {
    for needle in ["<script", "<link", "<img", "<iframe", "<object", "<embed", " src=", "url(", "@import"] {
        assert!(!dom.contains(needle), "the page references something outside itself: {needle}");
    }
    for href in dom.split(" href=\"").skip(1) {
        assert!(href.starts_with('#'), "a link out of the page: {}", &href[..href.len().min(60)]);
    }
}

fn as_u64(v: &str) -> u64 {
    v.parse().unwrap_or_else(|_| panic!("not an integer: {v}"))
}

/// Each row of `table` (data-name → data-k → data-v) equals `want(name)` on `keys`; returns
/// the row count.
fn rows_equal(dom: &str, table: &str, keys: &[&str], want: impl Fn(&str) -> Option<Value>) -> usize {
    let rows = browser::table(dom, table);
    for (name, cells) in &rows {
        let want = want(name).unwrap_or_else(|| panic!("{table}: row {name} is not in the JSON"));
        for key in keys {
            let got = cells.get(*key).unwrap_or_else(|| panic!("{table}: {name} has no {key}: {cells:?}"));
            let expected = &want[*key];
            match expected.as_u64() {
                Some(n) => assert_eq!(as_u64(got), n, "{table}: {name} {key}"),
                None => assert_eq!(
                    got.parse::<f64>().ok(),
                    expected.as_f64(),
                    "{table}: {name} {key}: {got} against {expected}"
                ),
            }
        }
    }
    rows.len()
}

fn report(dir: &TempDir, bin: &Path, name: &str, extra: &[&str]) -> std::path::PathBuf {
    let html = dir.join(name);
    let mut args =
        vec!["report".to_string(), bin.display().to_string(), "-o".into(), html.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    mlprof(&args.iter().map(String::as_str).collect::<Vec<_>>());
    html
}

/// The screenshot is a 1280-px-wide picture with text, bars and lines in many colors.
fn assert_not_blank(rendered: &Rendered) {
    let png = browser::png_stats(&rendered.png);
    assert_eq!(png.width, 1280, "{png:?}");
    assert!(
        png.colors >= 32 && png.ink >= 0.03,
        "the screenshot looks blank: {png:?} ({})",
        rendered.png.display()
    );
}

/// A `--torch` DataLoader run (2 workers, transforms, 2 epochs): the page has every section;
/// its facts, calls, files, spans, data-pipeline and transform numbers are those of
/// `summary --json`; one wait dot per batch; it loads with no network; the screenshot shows it.
#[test]
fn report_of_a_torch_dataloader_run_in_chromium() {
    if !require_torch() {
        return;
    }
    let Some(chromium) = browser::chromium() else { return };
    let dir = TempDir::new("report-torch");
    let bin = dir.join("run.bin");
    let (py, train) = (python().display().to_string(), script("torch_hook_train.py").display().to_string());
    let out_dir = dir.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out_dir = out_dir.display().to_string();
    let o = run_collect_env(
        &bin,
        &["--torch", "--no-energy"],
        &[py.as_str(), &train, &out_dir],
        &[],
        default_timeout(),
    );
    assert!(o.status.success(), "{}", describe(&o));
    let summary = summary_json(&bin);
    let html = report(&dir, &bin, "report.html", &[]);
    let rendered = browser::render(&chromium, &html, dir.path(), 2400);
    let dom = &rendered.dom;
    assert!(dom.len() < 1 << 20, "the page is {} bytes", dom.len());
    assert_self_contained(dom);
    for id in [
        "summary",
        "breakdown",
        "timelines",
        "timeline-io",
        "timeline-waits",
        "timeline-steps",
        "timeline-gpu",
        "timeline-power",
        "pipeline",
        "files",
        "ops",
        "calls",
        "gpu",
        "gpu-timeline",
        "energy",
        "end",
    ] {
        assert!(dom.contains(&format!(" id=\"{id}\"")), "no section {id}");
    }

    let facts = browser::figures(dom, "summary", "header");
    for key in ["events", "dropped", "duration_ns"] {
        assert_eq!(as_u64(&facts[key]), summary[key].as_u64().unwrap(), "{key}");
    }
    assert_eq!(facts["mains"], "1");

    let calls = &summary["calls"];
    let n = rows_equal(dom, "calls-table", &["count", "errors", "total_ns", "bytes"], |name| {
        calls.get(name).cloned()
    });
    let itt = calls.as_object().unwrap().keys().filter(|k| k.starts_with("itt_")).count();
    assert_eq!(n, (calls.as_object().unwrap().len() - itt).min(20), "calls rows");
    assert!(browser::table(dom, "calls-table").contains_key("read"));
    assert!(
        !browser::table(dom, "calls-table").keys().any(|k| k.starts_with("itt_")),
        "ITT spans are not calls"
    );

    let files = summary["files"].as_array().unwrap();
    let file = |path: &str| files.iter().find(|f| f["path"] == path).cloned();
    let n =
        rows_equal(dom, "files-table", &["opens", "calls", "bytes_read", "bytes_written", "total_ns"], file);
    assert_eq!(n, files.len().min(15));

    let spans = summary["spans"].as_array().unwrap();
    let span = |name: &str| spans.iter().find(|s| s["name"] == name).cloned();
    let n = rows_equal(dom, "spans-table", &["count", "total_ns", "mean_ns"], span);
    assert!(n > 0 && browser::table(dom, "spans-table").contains_key("aten::conv2d"));

    let data = &summary["data_pipeline"];
    let pipeline = browser::figures(dom, "pipeline", "p");
    assert_eq!(as_u64(&pipeline["wait_total_ns"]), data["wait_total_ns"].as_u64().unwrap());
    assert_eq!(pipeline["wait_share"].parse::<f64>().ok(), data["wait_share"].as_f64());
    let transforms = data["transforms"].as_array().unwrap();
    let transform = |name: &str| transforms.iter().find(|t| t["name"] == name).cloned();
    let keys = ["count", "median_ns", "p90_ns", "p99_ns", "max_ns", "total_ns"];
    assert_eq!(rows_equal(dom, "transforms-table", &keys, transform), 2);
    let workers = data["workers"].as_array().unwrap();
    let worker = |pid: &str| workers.iter().find(|w| w["pid"].as_u64() == pid.parse().ok()).cloned();
    assert_eq!(rows_equal(dom, "workers-table", &["pid", "main_pid", "batches", "busy_ns"], worker), 4);

    // The answer: one main process; its parts and the rest make its wall time; it waited
    // for data. One dot per batch wait (16), one per step after the first (15).
    let breakdown = browser::table(dom, "breakdown-table");
    assert_eq!(breakdown.len(), 1, "{breakdown:?}");
    let main = breakdown.values().next().unwrap();
    let parts: u64 = ["data_wait_ns", "gpu_sync_ns", "file_io_ns", "ops_phases_ns", "rest_ns"]
        .iter()
        .map(|k| as_u64(&main[*k]))
        .sum();
    assert_eq!(parts, as_u64(&main["wall_ns"]));
    assert!(as_u64(&main["data_wait_ns"]) > 0 && as_u64(&main["ops_phases_ns"]) > 0, "{main:?}");
    let waits = data["wait"]["count"].as_u64().unwrap();
    assert_eq!(waits, 16);
    let dots = |id: &str| browser::element(dom, id, "div").unwrap().matches("<circle").count() as u64;
    assert_eq!(dots("timeline-waits"), waits);
    assert_eq!(dots("timeline-steps"), 15);
    assert!(browser::element(dom, "timeline-io", "div").unwrap().contains("<polyline"));
    assert!(dom.contains("No energy was sampled"));

    assert_not_blank(&rendered);
    // For a look by a person: MLPROF_KEEP_TMP=1 keeps it.
    println!("screenshot: {}", rendered.png.display());
}

/// `writer PATH N 0` under the collector: open 1, write N (64 bytes each), close 1.
fn writer_run(dir: &TempDir, prog: &str, name: &str, writes: u64) -> std::path::PathBuf {
    let bin = dir.join(name);
    let target = dir.join("out.dat").display().to_string();
    let o = run_collect(&bin, &["--no-energy"], &[prog, &target, &writes.to_string(), "0"]);
    assert!(o.status.success(), "{}", describe(&o));
    bin
}

/// Two runs with 3 and 7 writes: `diff --json` gives exactly those counts and bytes, with
/// the unchanged open and close equal; a run against itself changes nothing; the text and
/// the `--baseline` page say the same.
#[test]
fn diff_gives_known_counts_and_nothing_against_itself() {
    let dir = TempDir::new("diff");
    let prog = compile("writer", &dir);
    let (a, b) = (writer_run(&dir, &prog, "a.bin", 3), writer_run(&dir, &prog, "b.bin", 7));
    let (a_s, b_s) = (a.display().to_string(), b.display().to_string());
    let json: Value = serde_json::from_str(&mlprof(&["diff", "--json", &a_s, &b_s])).expect("diff JSON");
    let side = |count: u64, bytes: u64| (count, bytes);
    let get = |table: &str, name: &str, run: &str| {
        let s = &json[table][name][run];
        (
            s["count"].as_u64().unwrap_or_else(|| panic!("{table} {name} {run}: {json}")),
            s["bytes"].as_u64().unwrap(),
        )
    };
    assert_eq!(get("calls", "write", "a"), side(3, 192));
    assert_eq!(get("calls", "write", "b"), side(7, 448));
    for name in ["open", "close"] {
        let (ca, cb) = (get("calls", name, "a").0, get("calls", name, "b").0);
        assert_eq!(ca, cb, "{name}");
    }
    let out = dir.join("out.dat").display().to_string();
    // The file: open, N writes, close.
    assert_eq!(get("files", &out, "a"), side(5, 192));
    assert_eq!(get("files", &out, "b"), side(9, 448));
    // One main process per run, keyed by its index.
    let ranks = json["ranks"].as_object().unwrap();
    assert_eq!(ranks.keys().collect::<Vec<_>>(), ["0"]);
    // Keys as the issue gives them, and every table with both sides.
    for table in ["calls", "spans", "files", "ranks"] {
        for (name, row) in json[table].as_object().unwrap() {
            for run in ["a", "b"] {
                for key in ["count", "total_ns"] {
                    assert!(row[run][key].is_u64(), "{table} {name} {run} {key}: {row}");
                }
                if table != "spans" {
                    assert!(row[run]["bytes"].is_u64(), "{table} {name} {run} bytes");
                }
            }
        }
    }
    let text = mlprof(&["diff", &a_s, &b_s]);
    assert!(text.contains("Files: 1 in A or B, 1 changed"), "{text}");

    // A run against itself.
    let json: Value = serde_json::from_str(&mlprof(&["diff", "--json", &a_s, &a_s])).expect("self-diff JSON");
    let mut compared = 0;
    for table in ["calls", "spans", "files", "ranks"] {
        for (name, row) in json[table].as_object().unwrap() {
            assert_eq!(row["a"], row["b"], "{table} {name} changed against itself");
            compared += 1;
        }
    }
    assert!(compared >= 4, "{json}");
    let text = mlprof(&["diff", &a_s, &a_s]);
    let calls = json["calls"].as_object().unwrap().len();
    assert!(text.contains(&format!("Calls: {calls} in A or B, 0 changed")), "{text}");
    assert!(text.contains("Files: 1 in A or B, 0 changed"), "{text}");

    // The comparison page: the diff's rows, both bars.
    let html = report(&dir, &b, "compare.html", &["--baseline", &a_s]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert_self_contained(&page);
    let rows: BTreeMap<String, BTreeMap<String, String>> = browser::table(&page, "diff-calls-table");
    let write = &rows["write"];
    assert_eq!((write["count_a"].as_str(), write["count_b"].as_str()), ("3", "7"));
    // Open and close ran once in both (their times differ, so they are listed).
    for name in ["open", "close"] {
        assert_eq!((rows[name]["count_a"].as_str(), rows[name]["count_b"].as_str()), ("1", "1"), "{name}");
    }
    assert!(page.contains("A: pid ") && page.contains("B: pid "));
}
