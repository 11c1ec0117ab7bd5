//! Call sites (`mlprof-collect --sites`): the Python line of every recorded call, read from
//! the calling thread's own frames by the real library under the real CPython of the test
//! environment (tests/scripts/sites.py: known numbers of calls at marked lines, from a
//! function, a method, a generator, a comprehension, a thread, and fork and spawn workers).

use mlprof_tests::*;
use serde_json::Value;
use std::process::Output;

/// The line of each `# site: NAME` mark in `script`.
fn marks(script: &std::path::Path) -> std::collections::HashMap<String, u64> {
    let text = std::fs::read_to_string(script).unwrap();
    text.lines()
        .enumerate()
        .filter_map(|(at, line)| {
            line.split("# site: ").nth(1).map(|name| (name.trim().to_string(), at as u64 + 1))
        })
        .collect()
}

/// Runs `script ARGS` under `mlprof-collect FLAGS` into `out`; its output (it must succeed), its
/// clean summary and the summary's sites.
fn run_script(
    out: &std::path::Path,
    flags: &[&str],
    script: &std::path::Path,
    args: &[String],
) -> (Output, Summary, Vec<Value>) {
    let cmd = [&[python().display().to_string(), script.display().to_string()][..], args].concat();
    let o = run_collect(out, flags, &cmd);
    assert!(o.status.success(), "mlprof-collect {} failed\n{}", flags.join(" "), describe(&o));
    let summary = clean_summary(out);
    let sites = summary.json["sites"].as_array().cloned().unwrap_or_default();
    (o, summary, sites)
}

/// Every call made at `line` of the script, from `function`, all functions together.
fn calls_at(sites: &[Value], file: &str, line: u64, function: &str) -> Option<u64> {
    let site = sites.iter().find(|s| s["file"] == file && s["line"] == line && s["function"] == function)?;
    Some(site["calls"].as_object()?.values().map(|c| c["count"].as_u64().unwrap_or(0)).sum())
}

#[test]
fn every_call_names_the_python_line_that_made_it() {
    const N: u64 = 7;
    let dir = TempDir::new("sites");
    let script = script("sites.py");
    let out = dir.join("run.bin");
    let (o, summary, sites) = run_script(&out, &["--sites"], &script, &[dir.str(), N.to_string()]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let comprehension = stdout.split("comprehension_function=").nth(1).and_then(|s| s.split(' ').next());
    let comprehension = comprehension.expect("the script's report line").to_string();
    let method = stdout.split("method_function=").nth(1).and_then(|s| s.split(' ').next());
    let method = method.expect("the script's report line").to_string();
    let file = script.display().to_string();
    let mark = marks(&script);
    let mut e = summary.expect();
    // (mark, function, calls): each line's stat or read calls, exactly; the worker line ran in a
    // fork child and in a spawned interpreter, one site for both.
    let want = [
        ("function", "stat_loop", N + 1),
        ("method", method.as_str(), N + 2),
        ("generator", "sizes", N),
        ("comprehension", comprehension.as_str(), N),
        ("thread", "in_thread", N + 4),
        ("missing", "missing", N + 5),
        ("worker", "worker", 2 * (N + 3)),
    ];
    for (name, function, count) in want {
        let line = mark[name];
        let got = calls_at(&sites, &file, line, function);
        e.that(
            format_args!("{name}: {file}:{line} {function}: {got:?} calls, want {count}"),
            got == Some(count),
        );
    }
    // Interpreter start-up is Python too (frozen importlib), and it ran before the script.
    e.that(
        format_args!("start-up sites {}", sites.len()),
        sites.iter().any(|s| s["file"].as_str().is_some_and(|f| f.starts_with("<frozen importlib"))),
    );
    e.finish();

    // The text view names the lines; the Parquet export carries them per call.
    let run = out.display().to_string();
    let o = mlprof_ok(&["summary", "--sites", "--top", "200", &run]);
    let text = String::from_utf8_lossy(&o.stdout);
    let stat_line = format!("{file}:{} stat_loop — ", mark["function"]);
    assert!(text.contains(&stat_line), "no {stat_line:?} in\n{text}");
    // The file table names the lines that spent most time on each file: f3.txt only saw the
    // worker's stats (and its creation in main).
    let f3 = dir.file("f3.txt");
    let row =
        summary.json["files"].as_array().and_then(|files| files.iter().find(|f| f["path"] == f3.as_str()));
    let named: Vec<(String, u64)> = row
        .and_then(|f| f["sites"].as_array())
        .map(|sites| {
            sites
                .iter()
                .map(|s| (s["function"].as_str().unwrap_or("").to_string(), s["calls"].as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    assert!(named.contains(&("worker".to_string(), 2 * (N + 3))), "f3.txt's sites: {named:?}");
    // The report's Calls section lists the sites.
    let page = dir.join("report.html");
    mlprof_ok(&["report", &run, "-o", &page.display().to_string()]);
    let html = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(html.contains("By call site (--sites)"), "no call sites in the report");
    // Each call's slice in the trace carries its site as arguments.
    let trace = convert_trace(&out);
    let events = trace["traceEvents"].as_array().cloned().unwrap_or_default();
    let at_stat_loop = events
        .iter()
        .filter(|e| e["args"]["site_function"] == "stat_loop" && e["args"]["site_line"] == mark["function"])
        .filter(|e| e["args"]["site_file"] == file.as_str())
        .count() as u64;
    assert_eq!(at_stat_loop, N + 1, "slices carrying stat_loop's site");
    if !require_python_modules(&["duckdb"]) {
        return;
    }
    let parquet = dir.join("parquet");
    mlprof_ok(&["export", "--parquet", &parquet.display().to_string(), &run]);
    let query = format!(
        "import duckdb, json\n\
         rows = duckdb.sql(\"select site_function, site_line, count(*) \
         from read_parquet('{}/events/**/*.parquet', hive_partitioning=true) \
         where site_file = '{file}' and site_function in ('stat_loop', 'worker') \
         group by all order by 1\").fetchall()\n\
         print(json.dumps(rows))",
        parquet.display()
    );
    let mut c = std::process::Command::new(python());
    c.args(["-c", &query]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "duckdb query failed\n{}", describe(&o));
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    let want =
        serde_json::json!([["stat_loop", mark["function"], N + 1], ["worker", mark["worker"], 2 * (N + 3)]]);
    assert_eq!(rows, want);
}

/// `mlprof diff` compares two runs site by site: the same line with more calls in B.
#[test]
fn diff_compares_runs_by_call_site() {
    let dir = TempDir::new("sites-diff");
    let script = script("sites.py");
    let run_with = |n: u64| {
        let out = dir.join(format!("run{n}.bin"));
        let folder = dir.join(format!("files{n}"));
        std::fs::create_dir_all(&folder).unwrap();
        run_script(&out, &["--sites"], &script, &[folder.display().to_string(), n.to_string()]);
        out
    };
    let (a, b) = (run_with(5), run_with(7));
    let o = mlprof_ok(&["diff", "--json", &a.display().to_string(), &b.display().to_string()]);
    let diff: Value = serde_json::from_slice(&o.stdout).unwrap();
    let key = format!("{}:{} stat_loop", script.display(), marks(&script)["function"]);
    let row = &diff["sites"][&key];
    assert_eq!((row["a"]["count"].as_u64(), row["b"]["count"].as_u64()), (Some(6), Some(8)), "{key}: {row}");
}

/// The count of `call` at `line` of `file`, over every function there (a comprehension's calls
/// are its own code object's before 3.12).
fn call_count_at(sites: &[Value], file: &str, line: u64, call: &str) -> u64 {
    sites
        .iter()
        .filter(|s| s["file"] == file && s["line"] == line)
        .filter_map(|s| s["calls"][call]["count"].as_u64())
        .sum()
}

/// A directory scan, an `open().read()` loop and PIL image opens in DataLoader workers started
/// with fork and with spawn (tests/scripts/sites_data.py, real PyTorch and PIL): exact calls at
/// each line, the workers' opens at PIL's own line (the innermost Python frame).
#[test]
fn a_scan_a_read_loop_and_dataloader_workers_name_their_lines() {
    if !require_torch() || !require_python_modules(&["PIL"]) {
        return;
    }
    const N: u64 = 6;
    let dir = TempDir::new("sites-data");
    let script = script("sites_data.py");
    let out = dir.join("run.bin");
    let data = dir.join("data").display().to_string();
    let (_, summary, sites) = run_script(&out, &["--sites"], &script, &[data, N.to_string()]);
    let (file, mark) = (script.display().to_string(), marks(&script));
    let mut e = summary.expect();
    // One opendir; a readdir per entry, for `.` and `..`, and the last one that finds none.
    e.eq("opendir at the scan", call_count_at(&sites, &file, mark["scandir"], "opendir"), 1);
    e.eq("readdir64 at the scan", call_count_at(&sites, &file, mark["scandir"], "readdir64"), N + 3);
    e.eq("open64 at the read loop", call_count_at(&sites, &file, mark["read"], "open64"), N);
    // Each image opened once by a worker of each loader, at PIL's `open`.
    let pil: u64 = sites
        .iter()
        .filter(|s| {
            s["file"].as_str().is_some_and(|f| f.ends_with("PIL/Image.py")) && s["function"] == "open"
        })
        .filter_map(|s| s["calls"]["open64"]["count"].as_u64())
        .sum();
    e.eq("open64 in PIL's Image.open, fork and spawn workers", pil, 2 * N);
    e.finish();
}

/// The line of `script` that holds `text` (1-based).
fn line_of(script: &std::path::Path, text: &str) -> u64 {
    let source = std::fs::read_to_string(script).unwrap();
    source.lines().position(|l| l.contains(text)).expect("the line") as u64 + 1
}

/// Under `--torch`, each op's span names the Python line that made it, apart from the calls
/// (tests/scripts/torch_hook_train.py: `torch.zeros` once per sample in the DataLoader
/// workers, 64 samples twice; `torch.from_file` once, which opens its file from that line).
#[test]
fn op_spans_name_the_python_line_that_made_them() {
    if !require_torch() || !require_python_modules(&["torchvision"]) {
        return;
    }
    let dir = TempDir::new("sites-torch");
    let script = script("torch_hook_train.py");
    let out = dir.join("run.bin");
    let (_, summary, sites) = run_script(&out, &["--sites", "--torch"], &script, &[dir.str()]);
    let file = script.display().to_string();
    let at = |line: u64| sites.iter().find(|s| s["file"] == file.as_str() && s["line"] == line).cloned();
    let zeros = at(line_of(&script, "x = torch.zeros(3, 16, 16)")).unwrap_or_default();
    let mut e = summary.expect();
    e.that(format_args!("zeros line: {zeros}"), zeros["function"] == "Squares.__getitem__");
    e.eq(
        "aten::zeros spans at their line",
        zeros["spans"]["aten::zeros"]["count"].as_u64().unwrap_or(0),
        128,
    );
    let from_file = at(line_of(&script, "torch.from_file(raw")).unwrap_or_default();
    // Where the script's calls went, should the line be missing (a failure in CI once).
    let script_rows: Vec<String> = sites
        .iter()
        .filter(|s| s["file"] == file.as_str())
        .map(|s| format!("{} {} {} {}", s["line"], s["function"], s["calls"], s["spans"]))
        .collect();
    let missing = &summary.json["sites_missing"];
    e.eq(
        format_args!(
            "aten::from_file at its line (script's sites: {script_rows:#?}; {missing} without a site)"
        ),
        from_file["spans"]["aten::from_file"]["count"].as_u64().unwrap_or(0),
        1,
    );
    e.that(
        format_args!("the file from_file opens, from its line: {from_file}"),
        from_file["calls"]["open64"]["count"].as_u64().unwrap_or(0) >= 1,
    );
    e.finish();
    // The trace's op slices carry it too (read without looking ahead, as a second pass does,
    // each batch must still find its sites).
    let trace = convert_trace(&out);
    let zeros_line = line_of(&script, "x = torch.zeros(3, 16, 16)");
    let slices = trace["traceEvents"].as_array().map_or(0, |events| {
        events.iter().filter(|e| e["name"] == "aten::zeros" && e["args"]["site_line"] == zeros_line).count()
    });
    assert_eq!(slices, 128, "aten::zeros slices carrying their line");
}

/// `--sites=3`: a site also names the lines that called its function, innermost first; the
/// innermost line's counts are those of `--sites` (one row per chain of callers).
#[test]
fn sites_with_three_frames_name_the_callers() {
    const N: u64 = 7;
    let dir = TempDir::new("sites-frames");
    let script = script("sites.py");
    let out = dir.join("run.bin");
    let (_, _, sites) = run_script(&out, &["--sites=3"], &script, &[dir.str(), N.to_string()]);
    let file = script.display().to_string();
    let mark = marks(&script);
    let row = sites
        .iter()
        .find(|s| s["file"] == file.as_str() && s["line"] == mark["function"] && s["function"] == "stat_loop")
        .cloned()
        .unwrap_or_default();
    let callers: Vec<(String, u64, String)> = row["callers"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| {
                    let name = |k: &str| c[k].as_str().unwrap_or("").to_string();
                    (name("file"), c["line"].as_u64().unwrap_or(0), name("function"))
                })
                .collect()
        })
        .unwrap_or_default();
    let want = vec![
        (file.clone(), line_of(&script, "stat_loop(files[0], n + 1)"), "main".to_string()),
        (file.clone(), line_of(&script, "    main()"), "<module>".to_string()),
    ];
    assert_eq!(callers, want, "stat_loop's callers: {row}");
    let calls: u64 =
        row["calls"].as_object().map_or(0, |c| c.values().map(|v| v["count"].as_u64().unwrap_or(0)).sum());
    assert_eq!(calls, N + 1, "stat_loop's calls: {row}");
}
