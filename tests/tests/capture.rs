//! Capture ranges (issue 38): the hooks record only inside the ranges the program marks, in
//! every process of the tree, and count nothing outside them (neither recorded nor dropped).
//! Each program makes known numbers of calls before, inside, between and after two ranges;
//! `mlprof summary --json` must count exactly those inside, and list the ranges.

use std::collections::BTreeMap;
use std::process::Command;

use mlprof_tests::*;
use serde_json::Value;

/// Parent and child pwrite counts per phase of tests/programs/capture_ranges.c.
const PARENT: [u64; 5] = [3, 5, 7, 11, 13];
const CHILD: [u64; 5] = [2, 20, 2, 40, 2];

/// `(opened_by, closed_by)` of each range of the summary.
fn ranges(summary: &Summary) -> Vec<(String, String)> {
    summary.json["ranges"]
        .as_array()
        .unwrap_or_else(|| panic!("no ranges in the summary {}", summary.dump().display()))
        .iter()
        .map(|r| (r["opened_by"].as_str().unwrap().to_string(), r["closed_by"].as_str().unwrap().to_string()))
        .collect()
}

/// pwrite counts of the parent and its forked child.
fn pwrites(summary: &Summary, program: &str) -> (u64, u64) {
    let procs = summary.procs_with_cmdline(program);
    let parent = procs.iter().find(|p| !p.describe().contains("fork")).map(|p| p.pid());
    let count = |forked: bool| {
        summary
            .processes()
            .iter()
            .filter(|p| p.cmdline().contains(program) && (Some(p.pid()) == parent) != forked)
            .map(|p| p.calls().count("pwrite"))
            .sum::<u64>()
    };
    (count(false), count(true))
}

/// Builds capture_ranges.c against the wheel's libcudart; `None` (skipped, said) without one.
fn capture_program(dir: &TempDir) -> Option<String> {
    let (cudart_dir, cudart) = nvidia_library(&["libcudart.so.13", "libcudart.so.12"])?;
    let exe = dir.join("capture_ranges").display().to_string();
    let source = tests_dir().join("programs").join("capture_ranges.c").display().to_string();
    let (libdir, link, rpath) = (
        format!("-L{}", cudart_dir.display()),
        format!("-l:{cudart}"),
        format!("-Wl,-rpath,{}", cudart_dir.display()),
    );
    gcc(&["-O1", "-pthread", "-U_FORTIFY_SOURCE", "-o", &exe, &source, &libdir, &link, &rpath]);
    Some(exe)
}

/// Runs the program under `mlprof-collect OPTIONS`; returns the summary and the statuses the
/// profiler calls returned.
fn run_ranges(dir: &TempDir, exe: &str, name: &str, options: &[&str]) -> (Summary, BTreeMap<String, i64>) {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    let out = sub.join("run.bin");
    let o = run_collect(&out, options, &[exe, sub.to_str().unwrap()]);
    assert!(o.status.success(), "mlprof-collect {options:?} failed\n{}", describe(&o));
    let summary = Summary::load(&out);
    summary.assert_clean();
    (summary, statuses(&sub.join("status.txt")))
}

/// `mlprof convert`'s track of ranges and `mlprof export`'s `ranges` table hold the summary's
/// ranges (the Parquet table read with duckdb, when the test Python has it).
fn traced_and_exported_ranges(summary: &Summary, dir: &TempDir) {
    let want: Vec<Value> = summary.json["ranges"].as_array().unwrap().clone();
    let trace = convert_trace(&summary.run_bin);
    let slices: Vec<&Value> =
        trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "mlprof.capture").collect();
    assert_eq!(slices.len(), want.len(), "range slices in the trace");
    for (slice, range) in slices.iter().zip(&want) {
        assert_eq!(slice["name"], format!("range {}", range["number"]));
        assert_eq!(slice["args"]["opened_by"], range["opened_by"]);
        assert_eq!(slice["args"]["closed_by"], range["closed_by"]);
    }
    // The HTML report says how much of the job the ranges hold.
    let html = dir.join("report.html");
    mlprof_ok(&["report", summary.run_bin.to_str().unwrap(), "-o", html.to_str().unwrap()]);
    let page = std::fs::read_to_string(&html).unwrap();
    let recorded = summary.json["capture"]["recorded_ns"].as_u64().unwrap();
    assert!(page.contains(&format!(
        r#"data-k="capture_recorded_ns" data-v="{recorded}">Capture ranges (cudaProfilerApi)"#
    )));
    if !require_python_modules(&["duckdb"]) {
        return;
    }
    let out = dir.join("parquet");
    let mut c = Command::new(&bins().mlprof);
    c.args(["export", "--parquet", out.to_str().unwrap(), summary.run_bin.to_str().unwrap()]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "mlprof export failed\n{}", describe(&o));
    let query = format!(
        "import duckdb, json\n\
         rows = duckdb.sql(\"select number, source, duration_ns, opened_by, closed_by \
         from read_parquet('{}/ranges/**/*.parquet', hive_partitioning=true) order by number\").fetchall()\n\
         print(json.dumps(rows))",
        out.display()
    );
    let mut c = Command::new(python());
    c.args(["-c", &query]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "duckdb query failed\n{}", describe(&o));
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    let expected: Vec<Value> = want
        .iter()
        .map(|r| {
            serde_json::json!([
                r["number"],
                "cudaProfilerApi",
                r["duration_ns"],
                r["opened_by"],
                r["closed_by"]
            ])
        })
        .collect();
    assert_eq!(rows, Value::Array(expected));
}

#[test]
fn cuda_profiler_api_ranges_count_exactly_in_parent_and_forked_child() {
    let dir = TempDir::new("capture-cuda");
    let Some(exe) = capture_program(&dir) else { return };
    // Without mlprof: what the real runtime returns (an error without a driver).
    let bare = dir.join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    let mut cmd = Command::new(&exe);
    clean_env(&mut cmd).arg(&bare);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    let real = statuses(&bare.join("status.txt"));

    // No capture option: everything, one range (the whole run), profiler calls change nothing.
    let (whole, got) = run_ranges(&dir, &exe, "whole", &[]);
    assert_eq!(got, real, "the profiler calls must return what the runtime returns");
    assert_eq!(pwrites(&whole, "capture_ranges"), (PARENT.iter().sum(), CHILD.iter().sum()));
    assert_eq!(ranges(&whole), [("start of run".to_string(), "end of run".to_string())]);
    assert!(whole.json["capture"].is_null());

    // stop (the default): the first range only.
    for (name, options) in [
        ("stop", &["--capture-range=cudaProfilerApi"][..]),
        ("stop-explicit", &["--capture-range=cudaProfilerApi", "--capture-range-end=stop"][..]),
        ("repeat1", &["--capture-range=cudaProfilerApi", "--capture-range-end=repeat:1"][..]),
    ] {
        let (summary, got) = run_ranges(&dir, &exe, name, options);
        assert_eq!(got, real, "{name}: the profiler calls must return what the runtime returns");
        assert_eq!(pwrites(&summary, "capture_ranges"), (PARENT[1], CHILD[1]), "{name}");
        let pair = ("cudaProfilerStart".to_string(), "cudaProfilerStop".to_string());
        assert_eq!(ranges(&summary), [pair], "{name}");
        assert_eq!(summary.json["capture"]["source"], "cudaProfilerApi");
        let (recorded, outside) = (
            summary.json["capture"]["recorded_ns"].as_u64().unwrap(),
            summary.json["capture"]["outside_ns"].as_u64().unwrap(),
        );
        assert!(recorded > 0 && outside > 0);
        assert_eq!(recorded + outside, summary.json["duration_ns"].as_u64().unwrap());
    }

    // repeat and repeat:2: both ranges.
    for (name, end) in [("repeat", "--capture-range-end=repeat"), ("repeat2", "--capture-range-end=repeat:2")]
    {
        let (summary, got) = run_ranges(&dir, &exe, name, &["--capture-range=cudaProfilerApi", end]);
        assert_eq!(got, real);
        assert_eq!(
            pwrites(&summary, "capture_ranges"),
            (PARENT[1] + PARENT[3], CHILD[1] + CHILD[3]),
            "{name}"
        );
        assert_eq!(ranges(&summary).len(), 2, "{name}");
        if name == "repeat" {
            traced_and_exported_ranges(&summary, &dir);
        }
    }

    // ITT markers do not open a cudaProfilerApi run's ranges, nor the reverse: with
    // --capture-range=itt this program (no ITT calls) records nothing of its calls.
    let (itt, _) = run_ranges(&dir, &exe, "itt", &["--capture-range=itt"]);
    assert_eq!(pwrites(&itt, "capture_ranges"), (0, 0));
    assert_eq!(ranges(&itt), Vec::<(String, String)>::new());
}

#[test]
fn itt_resume_pause_detach_ranges_count_exactly() {
    if !require_python_modules(&["ittapi"]) {
        return;
    }
    let dir = TempDir::new("capture-itt");
    let python = python().display().to_string();
    let script = script("capture_itt.py").display().to_string();
    let writes = |summary: &Summary| summary.calls_by("capture_itt.py", "write");
    for (name, options, expected, opened) in [
        ("stop", &["--capture-range=itt"][..], 5, vec![("__itt_resume", "__itt_pause")]),
        (
            "repeat",
            &["--capture-range=itt", "--capture-range-end=repeat"][..],
            5 + 11,
            vec![("__itt_resume", "__itt_pause"), ("__itt_resume", "__itt_detach")],
        ),
    ] {
        let out = dir.join(format!("{name}.bin"));
        let o = run_collect(&out, options, &[python.as_str(), script.as_str()]);
        assert!(o.status.success(), "{}", describe(&o));
        let summary = Summary::load(&out);
        summary.assert_clean();
        assert_eq!(writes(&summary), expected, "{name}: summary in {}", summary.dump().display());
        let want: Vec<(String, String)> =
            opened.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        assert_eq!(ranges(&summary), want, "{name}");
        // The pause instant lies inside the range it closes, the resume inside the one it opens.
        assert_eq!(summary.calls().count("itt_resume"), want.len() as u64, "{name}");
    }
}

#[test]
fn bad_capture_options_are_refused_with_a_reason() {
    let dir = TempDir::new("capture-bad");
    let out = dir.join("run.bin");
    for (options, says) in [
        (&["--capture-range=nvtx"][..], "expected cudaProfilerApi or itt"),
        (&["--capture-range=itt", "--capture-range-end=repeat:0"][..], "repeat:N with N"),
        (&["--capture-range-end=stop"][..], "needs --capture-range"),
        (&["--capture-range=itt", "--delay=2"][..], "use one"),
        (&["--delay=-1"][..], "seconds"),
        (&["--duration=0"][..], "more than 0"),
        (&["--steps=3-1", "--torch"][..], "1 ≤ A ≤ B"),
        (&["--steps=1-3"][..], "--torch"),
    ] {
        let o = run_collect(&out, options, &["true"]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{options:?} must be refused\n{}", describe(&o));
        assert!(stderr.contains(says), "{options:?}: {stderr}");
    }
}

#[test]
fn delay_and_duration_record_one_window_of_a_paced_writer() {
    // 25 ms between writes for 2.5 s; the window is 0.6 s long, from 0.5 s: 24 writes, give
    // or take one (where the window's edges fall between two writes).
    const PACE_MS: u64 = 25;
    let dir = TempDir::new("capture-time");
    let exe = compile("paced_writer", &dir);
    let out = dir.join("run.bin");
    let o =
        run_collect(&out, &["--delay=0.5", "--duration=0.6"], &[exe.as_str(), &PACE_MS.to_string(), "100"]);
    assert!(o.status.success(), "{}", describe(&o));
    let summary = Summary::load(&out);
    summary.assert_clean();
    let writes = summary.calls().count("pwrite");
    let expected = 600 / PACE_MS;
    assert!(
        (expected - 1..=expected + 1).contains(&writes),
        "{writes} writes in the window, expected {expected} ± 1; summary in {}",
        summary.dump().display()
    );
    assert_eq!(ranges(&summary), [("delay".to_string(), "duration".to_string())]);
    let range = &summary.json["ranges"][0];
    let (start, length) = (range["start_ns"].as_u64().unwrap(), range["duration_ns"].as_u64().unwrap());
    assert!((500_000_000..560_000_000).contains(&start), "range starts at {start} ns");
    assert!((590_000_000..660_000_000).contains(&length), "range lasts {length} ns");
    assert_eq!(summary.json["capture"]["source"], "time");
}

#[test]
fn wheel_start_stop_and_capture_mark_ranges_and_do_nothing_without_a_collector() {
    let dir = TempDir::new("capture-api");
    let python = python().display().to_string();
    let script = script("capture_api.py").display().to_string();
    // The wheel's package from the source tree (tests/tests/wheel.rs installs the built wheel).
    let package = workspace_root().join("wheel").join("python").display().to_string();
    let env = [("PYTHONPATH", package.as_str())];
    let writes = |summary: &Summary| summary.calls_by("capture_api.py", "write");

    let out = dir.join("repeat.bin");
    let options = ["--capture-range=itt", "--capture-range-end=repeat"];
    let o = run_collect_env(&out, &options, &[python.as_str(), script.as_str()], &env, default_timeout());
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "True True False");
    let summary = Summary::load(&out);
    summary.assert_clean();
    assert_eq!(writes(&summary), 5 + 11, "summary in {}", summary.dump().display());
    let pair = ("mlprof.start".to_string(), "mlprof.stop".to_string());
    assert_eq!(ranges(&summary), [pair.clone(), pair]);

    // Another source: the calls change nothing and nothing of the job is recorded.
    let out = dir.join("cuda.bin");
    let options = ["--capture-range=cudaProfilerApi"];
    let o = run_collect_env(&out, &options, &[python.as_str(), script.as_str()], &env, default_timeout());
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "False False False");
    assert_eq!(writes(&Summary::load(&out)), 0);

    // No collector: no-ops.
    let mut cmd = Command::new(&python);
    clean_env(&mut cmd).arg(&script).env("PYTHONPATH", &package);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "False False False");
}

#[test]
fn torch_steps_record_exactly_the_steps_asked_for() {
    if !require_torch() {
        return;
    }
    let dir = TempDir::new("capture-steps");
    let python = python().display().to_string();
    let script = script("capture_steps.py").display().to_string();
    let writes = |summary: &Summary| summary.calls_by("capture_steps.py", "write");
    // Step 1 runs from the job's start: its writes are the whole run's less those of steps 3
    // to 8 and the 7 after the loop (the interpreter may write before the script runs).
    let whole_out = dir.join("whole.bin");
    let whole = [python.as_str(), script.as_str(), "8"];
    let o = run_collect_env(&whole_out, &["--torch"], &whole, &[], default_timeout());
    assert!(o.status.success(), "{}", describe(&o));
    let first_two = writes(&Summary::load(&whole_out)) - (3..=8).sum::<u64>() - 7;
    assert!(first_two >= 5 + 1 + 2);
    // Step k makes k writes before its optimizer.step().
    for (steps, expected) in [("3-5", 3 + 4 + 5), ("1-2", first_two), ("8-8", 8)] {
        let out = dir.join(format!("steps-{steps}.bin"));
        let options = ["--torch", "--steps", steps];
        let o =
            run_collect_env(&out, &options, &[python.as_str(), script.as_str(), "8"], &[], default_timeout());
        assert!(o.status.success(), "{}", describe(&o));
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("--torch hook"),
            "the hook warned\n{}",
            describe(&o)
        );
        let summary = Summary::load(&out);
        summary.assert_clean();
        assert_eq!(writes(&summary), expected, "--steps {steps}: summary in {}", summary.dump().display());
        assert_eq!(ranges(&summary), [("steps".to_string(), "steps".to_string())], "--steps {steps}");
        // The optimizer.step spans of the steps inside the range, and only those.
        let (first, last) = steps.split_once('-').unwrap();
        let count = last.parse::<u64>().unwrap() - first.parse::<u64>().unwrap() + 1;
        let spans = summary.json["spans"].as_array().unwrap();
        let optimizer_steps =
            spans.iter().find(|s| s["name"] == "optimizer.step").map_or(0, |s| s["count"].as_u64().unwrap());
        assert_eq!(optimizer_steps, count, "--steps {steps}");
    }
}

#[test]
fn cpu_samples_follow_the_ranges() {
    // A Python loop spinning 1.5 s on one thread, sampled at 499 Hz: the whole run holds ~750
    // samples; a 0.4 s window from 0.5 s ~200. The sampler runs throughout; the reports keep
    // the samples inside the ranges.
    let dir = TempDir::new("capture-samples");
    let out = dir.join("run.bin");
    let python = python().display().to_string();
    let spin = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5:\n    pass\n";
    let options = ["--sample=499", "--delay=0.5", "--duration=0.4"];
    let o = run_collect(&out, &options, &[python.as_str(), "-c", spin]);
    assert!(o.status.success(), "{}", describe(&o));
    if String::from_utf8_lossy(&o.stderr).contains("no CPU samples") {
        skip("the kernel refused perf_event_open here");
        return;
    }
    let o = mlprof_ok(&["hotspots", "--json", out.to_str().unwrap()]);
    let hotspots: Value = serde_json::from_slice(&o.stdout).unwrap();
    let samples = hotspots["samples"].as_u64().unwrap();
    assert!((100..=300).contains(&samples), "{samples} samples in a 0.4 s window at 499 Hz");
    let by_span: u64 =
        hotspots["spans"].as_array().unwrap().iter().map(|s| s["samples"].as_u64().unwrap()).sum();
    assert_eq!(by_span, samples, "the spans hold the samples of the ranges only");
}

#[test]
fn attach_mode_serves_the_capture_ranges() {
    let dir = TempDir::new("capture-attach");
    let Some(exe) = capture_program(&dir) else { return };
    let session = unique_session("capture");
    let out = dir.join("run.bin");
    let options = ["--capture-range=cudaProfilerApi", "--capture-range-end=repeat:2"];
    let mut collector = AttachCollector::start_with_args(&out, &session, &options);
    let run_dir = dir.join("attached");
    std::fs::create_dir_all(&run_dir).unwrap();
    let mut c = preloaded_command(&exe, &session);
    c.arg(&run_dir);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "{}", describe(&o));
    collector.stop_ok();
    let summary = Summary::load(&out);
    summary.assert_clean();
    assert_eq!(pwrites(&summary, "capture_ranges"), (PARENT[1] + PARENT[3], CHILD[1] + CHILD[3]));
    assert_eq!(ranges(&summary).len(), 2);
}

/// Sends `command` to the script and waits for its "ok".
fn ask(child: &mut std::process::Child, out: &mut impl std::io::BufRead, command: &str) {
    use std::io::Write;
    writeln!(child.stdin.as_mut().unwrap(), "{command}").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ok", "answer to {command:?}");
}

#[test]
fn a_process_paused_when_its_collector_ends_joins_the_sessions_next_collector() {
    if !require_python_modules(&["ittapi"]) {
        return;
    }
    let dir = TempDir::new("capture-next");
    let session = unique_session("next");
    let (first, second) = (dir.join("first.bin"), dir.join("second.bin"));
    let mut collector = AttachCollector::start_with_args(&first, &session, &["--capture-range=itt"]);
    let script = script("capture_attach.py").display().to_string();
    let mut c = preloaded_command(python(), &session);
    c.env("INTEL_LIBITTNOTIFY64", &bins().preload).args([script.as_str(), dir.file("w.dat").as_str()]);
    c.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut answers = std::io::BufReader::new(child.stdout.take().unwrap());
    for command in ["write 3", "resume", "write 5", "pause", "write 7"] {
        ask(&mut child, &mut answers, command);
    }
    collector.stop_ok();
    // Its writes inside the range: the 5, and the answers to `resume` and `write 5`.
    let summary = Summary::load(&first);
    let writes = |s: &Summary| s.calls_by("capture_attach.py", "write");
    assert_eq!(writes(&summary), 5 + 2);
    assert_eq!(ranges(&summary), [("__itt_resume".to_string(), "__itt_pause".to_string())]);
    // The next collector of the session (no capture option) gets the process back: paused on
    // a ring whose collector had gone, it would pass every call through for good.
    let mut next = AttachCollector::start(&second, &session);
    ask(&mut child, &mut answers, "pace 40");
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    next.stop_ok();
    let joined = writes(&Summary::load(&second));
    assert!(joined >= 20, "{joined} of the 40 paced writes recorded by the next collector");
}

/// `mlprof merge` of two runs (as two nodes) that each captured a `--delay/--duration` window
/// keeps both ranges, each with its own edges (each node numbers its ranges from 1; the merge
/// numbers them anew), and every write inside them.
#[test]
fn merged_nodes_keep_each_nodes_ranges() {
    const PACE_MS: u64 = 25;
    let dir = TempDir::new("capture-merge");
    let exe = compile("paced_writer", &dir);
    let runs = [dir.join("a.bin"), dir.join("b.bin")];
    let mut writes = 0;
    for out in &runs {
        let o =
            run_collect(out, &["--delay=0.2", "--duration=0.3"], &[exe.as_str(), &PACE_MS.to_string(), "40"]);
        assert!(o.status.success(), "{}", describe(&o));
        writes += Summary::load(out).calls().count("pwrite");
    }
    let merged = dir.join("merged.bin");
    let paths: Vec<String> = runs.iter().map(|p| p.display().to_string()).collect();
    mlprof_ok(&["merge", &paths[0], &paths[1], "-o", &merged.display().to_string()]);
    let summary = Summary::load(&merged);
    summary.assert_clean();
    assert_eq!(summary.calls().count("pwrite"), writes, "summary in {}", summary.dump().display());
    let pairs = vec![("delay".to_string(), "duration".to_string()); 2];
    assert_eq!(ranges(&summary), pairs, "summary in {}", summary.dump().display());
    for range in summary.json["ranges"].as_array().unwrap() {
        let length = range["duration_ns"].as_u64().unwrap();
        assert!(
            (290_000_000..360_000_000).contains(&length),
            "a range of {length} ns in {}",
            summary.dump().display()
        );
    }
    // A trace split in parts has the ranges' track in every part (each is a complete trace).
    let trace = dir.join("merged.json");
    mlprof_ok(&[
        "convert",
        &merged.display().to_string(),
        "-o",
        &trace.display().to_string(),
        "--split-every",
        "10",
    ]);
    let parts: Vec<_> =
        (1..).map(|i| dir.join(format!("merged.{i:03}.json"))).take_while(|p| p.exists()).collect();
    assert!(parts.len() >= 2, "{} parts", parts.len());
    for part in &parts {
        let json: Value = serde_json::from_slice(&std::fs::read(part).unwrap()).unwrap();
        let ranges =
            json["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "mlprof.capture").count();
        assert_eq!(ranges, 2, "range slices in {}", part.display());
    }
}
