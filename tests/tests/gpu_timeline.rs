//! The GPU timeline (CUPTI activity records) without a GPU: the CUPTI and libcuda test doubles
//! (tests/doubles; named so: CUPTI's activity stream and the driver are boundaries nothing real
//! crosses here) deliver kernels and copies with known durations and correlation ids, and the
//! error paths. (The real libcupti of the CUDA wheel with no driver is tests/gpu.rs's CUDA
//! runtime test: it is never touched, the job runs unchanged, the summary says why.)

use mlprof_tests::*;
use serde_json::Value;

struct Timeline {
    summary: Summary,
    stdout: String,
    stderr: String,
}

impl Timeline {
    fn json(&self) -> &Value {
        &self.summary.json["gpu"]["timeline"]
    }
}

/// Runs `gpu_timeline KERNELS COPIES LEAVE` under the launcher with `--gpu-timeline` (ring
/// clock: CLOCK_MONOTONIC, so the doubles' durations are ns) with `env`; the program must exit 0.
fn run(dir: &TempDir, main: &str, args: &[&str], env: &[(&str, &str)]) -> Timeline {
    run_flags(dir, main, &["--gpu-timeline"], args, env)
}

/// [`run`] with the collector's timeline flags `flags`.
fn run_flags(dir: &TempDir, main: &str, flags: &[&str], args: &[&str], env: &[(&str, &str)]) -> Timeline {
    let out = dir.join(format!("run-{}-{}.bin", flags.join(""), args.join("-")));
    let o = run_collect_env(
        &out,
        &[&["--clock", "monotonic"][..], flags].concat(),
        &[&[main][..], args].concat(),
        env,
        default_timeout(),
    );
    assert!(o.status.success(), "the timeline program failed under mlprof\n{}", describe(&o));
    Timeline {
        summary: Summary::load(&out),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Host-side counts are those of the program, whatever became of the timeline.
fn host_counts_exact(e: &mut Expect<'_>, summary: &Summary, kernels: u64, copies: u64) {
    let calls = summary.calls();
    e.eq("cuLaunchKernel calls", calls.count("cuLaunchKernel"), kernels);
    e.eq("cuMemcpyHtoD_v2 calls", calls.count("cuMemcpyHtoD_v2"), copies);
}

fn number(value: &Value) -> u64 {
    value.as_u64().unwrap_or(u64::MAX)
}

#[test]
fn kernels_and_copies_are_exact_linked_and_flushed_however_the_process_leaves() {
    let dir = TempDir::new("gpu-timeline");
    let main = gpu_timeline_program(&dir, true);
    for leave in ["return", "exit", "_exit"] {
        let run = run(&dir, &main, &["300", "7", leave], &[]);
        let t = run.json();
        let mut e = run.summary.expect();
        host_counts_exact(&mut e, &run.summary, 300, 7);
        e.that(format_args!("{leave}: source {}", t["source"]), t["source"] == "cupti");
        e.that(
            format_args!("{leave}: kernels {}", t["kernels"]),
            t["kernels"].as_array().map(Vec::len) == Some(1),
        );
        let kernel = &t["kernels"][0];
        e.that(
            format_args!("{leave}: kernel name {}", kernel["name"]),
            kernel["name"] == "testKernel(float*, int)",
        );
        e.eq(format_args!("{leave}: kernel count"), number(&kernel["count"]), 300);
        // 1 µs each on the double's GPU, 2 µs a copy, one after another: busy is their sum.
        e.eq(format_args!("{leave}: kernel GPU ns"), number(&kernel["gpu_ns"]), 300_000);
        let h2d = &t["copies"]["H2D"];
        e.eq(format_args!("{leave}: H2D copies"), number(&h2d["count"]), 7);
        e.eq(format_args!("{leave}: H2D bytes"), number(&h2d["bytes"]), 7 * 4096);
        e.eq(format_args!("{leave}: H2D GPU ns"), number(&h2d["gpu_ns"]), 14_000);
        let device = &t["devices"][0];
        e.eq(format_args!("{leave}: busy ns"), number(&device["busy_ns"]), 314_000);
        // The idle time, split by what the program did meanwhile, adds up; its launches and
        // copies (ops) are part of it.
        let idle_by = &device["idle_by"];
        let parts: u64 =
            ["data_wait", "sync", "io", "ops", "other"].iter().map(|k| number(&idle_by[k])).sum();
        e.eq(format_args!("{leave}: idle split {idle_by}"), parts, number(&device["idle_ns"]));
        e.that(format_args!("{leave}: idle while launching {idle_by}"), number(&idle_by["ops"]) > 0);
        // Every kernel and copy links to its recorded launch or copy call; nothing was lost.
        e.eq(format_args!("{leave}: unmatched"), number(&t["unmatched"]), 0);
        e.eq(format_args!("{leave}: dropped"), number(&t["dropped"]), 0);
        e.finish();
    }
}

#[test]
fn small_buffers_cupti_drops_and_a_refused_timestamp_callback_keep_the_counts() {
    let dir = TempDir::new("gpu-timeline-calibrated");
    let main = gpu_timeline_program(&dir, true);
    // CUPTI hands over a buffer every 7 kernels, says it dropped 5 activities, and refuses our
    // timestamp callback: records carry its own clock (CLOCK_MONOTONIC + 10 s here), which the
    // calibration moves back onto the run's axis.
    let env = [
        ("DOUBLE_CUPTI_BUFFER_RECORDS", "7"),
        ("DOUBLE_CUPTI_DROPPED", "5"),
        ("DOUBLE_CUPTI_NO_TIMESTAMP", "1"),
    ];
    let run = run(&dir, &main, &["100", "3"], &env);
    let t = run.json();
    let mut e = run.summary.expect();
    host_counts_exact(&mut e, &run.summary, 100, 3);
    e.eq("kernels", number(&t["kernels"][0]["count"]), 100);
    e.eq("busy ns", number(&t["devices"][0]["busy_ns"]), 106_000);
    e.eq("dropped", number(&t["dropped"]), 5);
    e.eq("unmatched", number(&t["unmatched"]), 0);
    // The calibration's residual is reported.
    let notes = t["notes"].to_string();
    e.that(format_args!("notes {notes}"), notes.contains("calibrated onto the run's (residual "));
    e.finish();
}

#[test]
fn the_cupti_switches_leave_out_what_they_name_and_the_summary_says_so() {
    let dir = TempDir::new("gpu-timeline-switches");
    let main = gpu_timeline_program(&dir, true);
    // Kernels alone, no links, no timestamp callback (the double's clock is CLOCK_MONOTONIC +
    // 10 s without it, which the calibration moves back).
    let env = [
        ("MLPROF_CUPTI_KINDS", "kernel"),
        ("MLPROF_CUPTI_LINKS", "off"),
        ("MLPROF_CUPTI_CLOCK", "calibrate"),
    ];
    let run = run(&dir, &main, &["40", "3"], &env);
    let t = run.json();
    let mut e = run.summary.expect();
    host_counts_exact(&mut e, &run.summary, 40, 3);
    e.that(format_args!("source {}", t["source"]), t["source"] == "cupti");
    e.eq("kernels", number(&t["kernels"][0]["count"]), 40);
    e.eq("busy ns: the kernels' alone", number(&t["devices"][0]["busy_ns"]), 40_000);
    e.that(format_args!("no copies {}", t["copies"]), t["copies"].as_object().is_some_and(|c| c.is_empty()));
    e.eq("unmatched: every kernel, unlinked", number(&t["unmatched"]), 40);
    let notes = t["notes"].to_string();
    e.that(format_args!("notes {notes}"), notes.contains("MLPROF_CUPTI_LINKS=off asked for none"));
    e.that(format_args!("notes {notes}"), notes.contains("MLPROF_CUPTI_CLOCK=calibrate"));
    e.finish();
}

#[test]
fn without_a_timeline_the_job_runs_unchanged_and_the_summary_says_why() {
    let dir = TempDir::new("gpu-timeline-none");
    let main = gpu_timeline_program(&dir, true);
    /// The collector's timeline flag, program arguments, environment, what `unavailable` must say.
    type Case<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let on = "--gpu-timeline";
    let cases: [Case<'_>; 7] = [
        ("", &["20", "2"], &[], "not asked for: the GPU timeline is opt-in"),
        ("--no-gpu-timeline", &["20", "2"], &[], "turned off"),
        ("", &["20", "2"], &[("MLPROF_CUPTI", "off")], "turned off"),
        (
            on,
            &["20", "2"],
            &[("DOUBLE_CUPTI_FAIL_ENABLE", "15")],
            "CUPTI refused to collect (CUPTI_ERROR_NOT_INITIALIZED",
        ),
        (on, &["20", "2"], &[("DOUBLE_CUPTI_VERSION", "120000")], "is for another CUDA version"),
        (on, &["20", "2"], &[("DOUBLE_CUPTI_FAIL_SUBSCRIBE", "39")], "another tool holds CUPTI"),
        (on, &["20", "2", "noinit"], &[], "no process initialized CUDA"),
    ];
    for (flag, args, env, why) in cases {
        let flags: &[&str] = if flag.is_empty() { &[] } else { &[flag] };
        let run = run_flags(&dir, &main, flags, args, env);
        let t = run.json();
        let mut e = run.summary.expect();
        host_counts_exact(&mut e, &run.summary, 20, 2);
        let env = (flag, env);
        e.that(format_args!("{env:?}: source {}", t["source"]), t["source"].is_null());
        let unavailable = t["unavailable"].as_str().unwrap_or("");
        e.that(format_args!("{env:?}: unavailable {unavailable:?}, want {why:?}"), unavailable.contains(why));
        e.that(format_args!("{env:?}: kernels {}", t["kernels"]), t["kernels"] == Value::Array(vec![]));
        // Standing down is said once on stderr too; nothing else is.
        let said = run.stderr.matches("another tool holds CUPTI").count();
        let want = usize::from(why == "another tool holds CUPTI");
        e.that(
            format_args!("{env:?}: stderr says it {said} times, want {want}\n{}", run.stderr),
            said == want,
        );
        e.finish();
    }
}

#[test]
fn a_tool_that_takes_cupti_later_gets_it_whole_and_mlprof_keeps_what_came_before() {
    let dir = TempDir::new("gpu-timeline-takeover");
    let main = gpu_timeline_program(&dir, true);
    // After 40 of 100 kernels the program subscribes to CUPTI and registers its own activity
    // callbacks, as torch.profiler does when a profile starts.
    let run = run(&dir, &main, &["100", "0", "return", "40"], &[]);
    let t = run.json();
    let stdout_said = run.stdout.contains("tool saw 60 kernels");
    let mut e = run.summary.expect();
    host_counts_exact(&mut e, &run.summary, 100, 0);
    // Its subscription succeeded (mlprof gave the one subscriber slot back) and every kernel
    // from then on went to it.
    e.that(format_args!("the tool's output: {}", run.stdout), stdout_said);
    e.that(format_args!("source {}", t["source"]), t["source"] == "cupti");
    e.eq("kernels mlprof kept", number(&t["kernels"][0]["count"]), 40);
    e.eq("unmatched", number(&t["unmatched"]), 0);
    let notes = t["notes"].to_string();
    e.that(format_args!("notes {notes}"), notes.contains("another tool holds CUPTI"));
    let said = run.stderr.matches("another tool holds CUPTI").count();
    e.that(format_args!("said {said} times on stderr\n{}", run.stderr), said == 1);
    e.finish();
}

/// Runs the takeover program (100 kernels, `copies` copies; a tool takes CUPTI after 40
/// kernels through `tool`'s API: `v1`, `v2` sharing CUPTI, `v2-single`) with `env`.
fn run_with_a_tool(dir: &TempDir, main: &str, copies: &str, tool: &str, env: &[(&str, &str)]) -> Timeline {
    let mut env = env.to_vec();
    if tool != "v1" {
        env.push(("GPU_TIMELINE_TOOL", tool));
    }
    run(dir, main, &["100", copies, "return", "40"], &env)
}

#[test]
fn on_cuptis_multi_subscriber_api_a_tool_that_shares_cupti_traces_beside_mlprof() {
    let dir = TempDir::new("gpu-timeline-v2");
    let main = gpu_timeline_program(&dir, true);
    // CUPTI 13.3 with a driver that takes its multi-subscriber API; after 40 of 100 kernels the
    // program subscribes through that API too, asking to share CUPTI (as a tool on CUPTI 13.3's
    // `_v2` API does).
    let run = run_with_a_tool(&dir, &main, "5", "v2", &[("DOUBLE_CUPTI_V2", "1")]);
    let t = run.json();
    let tool_said = run.stdout.contains("tool saw 60 kernels");
    let mut e = run.summary.expect();
    host_counts_exact(&mut e, &run.summary, 100, 5);
    // The tool got its subscription and every kernel from then on…
    e.that(format_args!("the tool's output: {}", run.stdout), tool_said);
    // …and mlprof kept collecting all of them, linked, without standing down.
    e.that(format_args!("source {}", t["source"]), t["source"] == "cupti");
    e.eq("kernels", number(&t["kernels"][0]["count"]), 100);
    e.eq("H2D copies", number(&t["copies"]["H2D"]["count"]), 5);
    e.eq("busy ns", number(&t["devices"][0]["busy_ns"]), 100_000 + 5 * 2_000);
    e.eq("unmatched", number(&t["unmatched"]), 0);
    e.eq("dropped", number(&t["dropped"]), 0);
    let said = run.stderr.matches("another tool holds CUPTI").count();
    e.that(format_args!("stood down {said} times\n{}", run.stderr), said == 0);
    let notes = t["notes"].to_string();
    e.that(format_args!("notes {notes}"), notes.contains("CUPTI multi-subscriber API"));
    e.that(format_args!("notes {notes}"), !notes.contains("another tool holds CUPTI"));
    // No process-wide timestamp callback on this path: CUPTI's clock, calibrated.
    e.that(format_args!("notes {notes}"), notes.contains("calibrated onto the run's (residual "));
    e.finish();
}

#[test]
fn on_the_multi_subscriber_api_a_tool_that_cannot_share_cupti_still_gets_it_whole() {
    // CUPTI refuses v1 calls beside a `_v2` subscriber, and a `_v2` subscriber that asks to be
    // the only one: for either, mlprof gives its subscriber back first and keeps what came before.
    for tool in ["v1", "v2-single"] {
        let dir = TempDir::new(&format!("gpu-timeline-v2-{tool}"));
        let main = gpu_timeline_program(&dir, true);
        let run = run_with_a_tool(&dir, &main, "0", tool, &[("DOUBLE_CUPTI_V2", "1")]);
        let t = run.json();
        let tool_said = run.stdout.contains("tool saw 60 kernels");
        let mut e = run.summary.expect();
        host_counts_exact(&mut e, &run.summary, 100, 0);
        e.that(format_args!("{tool}: the tool's output: {}", run.stdout), tool_said);
        e.eq(format_args!("{tool}: kernels mlprof kept"), number(&t["kernels"][0]["count"]), 40);
        e.eq(format_args!("{tool}: unmatched"), number(&t["unmatched"]), 0);
        let said = run.stderr.matches("another tool holds CUPTI").count();
        e.that(format_args!("{tool}: said {said} times on stderr\n{}", run.stderr), said == 1);
        e.finish();
    }
}

#[test]
fn a_driver_that_refuses_the_multi_subscriber_api_leaves_the_single_subscriber_timeline() {
    let dir = TempDir::new("gpu-timeline-v2-refused");
    let main = gpu_timeline_program(&dir, true);
    // CUPTI 13.3 whose cuptiSubscribe_v2 is refused, as with a driver older than r610.
    let refused = [("DOUBLE_CUPTI_V2", "1"), ("DOUBLE_CUPTI_V2_REFUSE", "27")];
    let run = run(&dir, &main, &["300", "7"], &refused);
    let t = run.json();
    let mut e = run.summary.expect();
    host_counts_exact(&mut e, &run.summary, 300, 7);
    e.eq("kernels", number(&t["kernels"][0]["count"]), 300);
    e.eq("kernel GPU ns", number(&t["kernels"][0]["gpu_ns"]), 300_000);
    e.eq("H2D copies", number(&t["copies"]["H2D"]["count"]), 7);
    e.eq("busy ns", number(&t["devices"][0]["busy_ns"]), 314_000);
    e.eq("unmatched", number(&t["unmatched"]), 0);
    e.eq("dropped", number(&t["dropped"]), 0);
    let notes = t["notes"].to_string();
    e.that(
        format_args!("notes {notes}"),
        notes.contains("CUPTI refused its multi-subscriber API (CUPTI_ERROR_NOT_SUPPORTED, 27"),
    );
    // The v1 path's timestamp callback, as before.
    e.that(format_args!("notes {notes}"), !notes.contains("calibrated"));
    e.finish();
    // And a tool that takes CUPTI later gets it whole, as on any single-subscriber CUPTI.
    let run = run_with_a_tool(&dir, &main, "0", "v1", &refused);
    let t = run.json();
    let mut e = run.summary.expect();
    e.that(format_args!("the tool's output: {}", run.stdout), run.stdout.contains("tool saw 60 kernels"));
    e.eq("kernels mlprof kept", number(&t["kernels"][0]["count"]), 40);
    let said = run.stderr.matches("another tool holds CUPTI").count();
    e.that(format_args!("said {said} times on stderr\n{}", run.stderr), said == 1);
    e.finish();
}

#[test]
fn the_gpu_activity_table_holds_every_kernel_and_copy_with_the_thread_that_issued_it() {
    if !require_python_modules(&["duckdb"]) {
        return;
    }
    let dir = TempDir::new("gpu-timeline-parquet");
    let main = gpu_timeline_program(&dir, true);
    let run = run(&dir, &main, &["120", "5"], &[]);
    let pid = run.summary.processes()[0].pid();
    let out = dir.join("parquet");
    let o = output_with_timeout(
        {
            let mut c = std::process::Command::new(&bins().mlprof);
            c.args([
                "export",
                "--parquet",
                &out.display().to_string(),
                &run.summary.run_bin.display().to_string(),
            ]);
            c
        },
        default_timeout(),
    );
    assert!(o.status.success(), "mlprof export failed\n{}", describe(&o));
    let query = format!(
        "import duckdb, json\n\
         rows = duckdb.sql(\"select kind, name, count(*), sum(end_ns - start_ns), sum(bytes), \
         count(*) filter (where launch_tid = {pid}), count(distinct correlation) \
         from read_parquet('{}/gpu_activity/**/*.parquet', hive_partitioning=true) \
         group by kind, name order by kind\").fetchall()\n\
         print(json.dumps(rows))",
        out.display()
    );
    let mut c = std::process::Command::new(python());
    c.args(["-c", &query]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "duckdb query failed\n{}", describe(&o));
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    // Every kernel and copy, each issued by the program's one thread, each its own correlation.
    assert_eq!(
        rows,
        serde_json::json!([
            ["kernel", "testKernel(float*, int)", 120, 120_000, 0, 120, 120],
            ["memcpy", "H2D", 5, 10_000, 5 * 4096, 5, 5]
        ])
    );
}

#[test]
fn the_report_shows_what_the_gpu_did_with_the_summarys_numbers() {
    let dir = TempDir::new("gpu-timeline-report");
    let main = gpu_timeline_program(&dir, true);
    let run = run(&dir, &main, &["50", "2"], &[]);
    let page = dir.join("report.html");
    let mut c = std::process::Command::new(&bins().mlprof);
    c.args(["report", &run.summary.run_bin.display().to_string(), "-o", &page.display().to_string()]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "mlprof report failed\n{}", describe(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    let device = &run.json()["devices"][0];
    for key in ["busy_ns", "idle_ns"] {
        let want = format!(r#"data-k="{key}" data-v="{}""#, number(&device[key]));
        assert!(html.contains(&want), "no {want} in the GPU timeline section");
    }
    assert!(html.contains(r#"<tr data-name="testKernel(float*, int)">"#), "no kernel row");
    assert!(html.contains("Why the GPU was idle"), "no idle bar");
    assert!(html.contains(r#"<div id="timeline-gpu">"#) && html.contains("CUDA device 0"), "no busy panel");
}

#[test]
fn energy_splits_the_gpus_energy_by_the_gpu_side_and_the_parts_add_up() {
    let dir = TempDir::new("gpu-timeline-energy");
    let main = gpu_timeline_program(&dir, true);
    // TEST DOUBLE of NVML (tests/nvml_double): one GPU drawing a known curve, its energy counter
    // updated and sampled every 2 ms, so that a run of some tens of ms (100,000 launches; busy
    // CI machines make it longer, never shorter) has many samples.
    let nvml = dir.join("libnvml_double.so").display().to_string();
    let src = tests_dir().join("nvml_double").join("nvml_double.c").display().to_string();
    gcc(&["-shared", "-fPIC", "-O1", "-o", &nvml, &src, "-lm"]);
    let out = dir.join("energy.bin");
    let args = ["--gpu-timeline", "--clock", "monotonic", "--energy-interval", "2", "--nvml-lib", &nvml];
    let mut c = collect_command(&out, &args, &[main.as_str(), "100000", "5"]);
    c.env_remove("CUDA_VISIBLE_DEVICES").env("NVML_DOUBLE_GPUS", "1").env("NVML_DOUBLE_UPDATE_MS", "2");
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "mlprof-collect failed\n{}", describe(&o));
    let mut c = std::process::Command::new(&bins().mlprof);
    c.args(["energy", "--json", &out.display().to_string()]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "mlprof energy failed\n{}", describe(&o));
    let energy: Value = serde_json::from_slice(&o.stdout).unwrap();
    let side = &energy["gpu_side"];
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    // The program launches outside any ITT op: the GPU's energy is its idle time's and the
    // work's outside any op, which add up to the GPU's measured energy (the run's only device).
    assert!(f(&side["measured_j"]) > 0.0, "{side}");
    let parts = f(&side["ops_j"]) + f(&side["idle_j"]) + f(&side["outside_j"]);
    assert!((parts - f(&side["measured_j"])).abs() < 1e-5, "parts {parts} of {side}");
    assert!(
        (f(&side["measured_j"]) - f(&energy["total"]["energy_j"])).abs() < 1e-5,
        "{side} {}",
        energy["total"]
    );
    assert!(f(&side["outside_j"]) > 0.0 && f(&side["idle_j"]) > 0.0, "{side}");
    let rows: Vec<&str> =
        energy["spans"].as_array().unwrap().iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(rows.contains(&"(GPU idle)") && rows.contains(&"(GPU work outside any op)"), "{rows:?}");
}

#[test]
fn a_fork_child_does_not_take_its_parents_timeline_as_its_own() {
    let dir = TempDir::new("gpu-timeline-fork");
    let main = gpu_timeline_program(&dir, true);
    // The child launches 50 kernels on the CUPTI state it inherited, without a cuInit of its
    // own; the double hands each buffer back at once (one kernel a buffer), so the child's
    // records would reach mlprof if it took them.
    let run = run(&dir, &main, &["50", "0", "fork"], &[("DOUBLE_CUPTI_BUFFER_RECORDS", "1")]);
    let t = run.json();
    let mut e = run.summary.expect();
    e.eq("launches recorded (parent and child)", run.summary.calls().count("cuLaunchKernel"), 100);
    e.eq("kernels on the timeline (the parent's)", number(&t["kernels"][0]["count"]), 50);
    e.eq("unmatched", number(&t["unmatched"]), 0);
    e.finish();
}

#[test]
fn a_process_whose_cuda_started_before_its_session_gets_a_timeline_once_it_joins() {
    let dir = TempDir::new("gpu-timeline-attach");
    let main = gpu_timeline_program(&dir, true);
    let session = unique_session("gpu-timeline");
    let go = dir.join("go");
    // Attach mode: the program initializes CUDA before any collector serves its session…
    let mut program = preloaded_command(&main, &session);
    program
        .args(["60", "3"])
        .env("GPU_TIMELINE_WAIT_FOR", &go)
        .env("MLPROF_QUIET", "1")
        .env("MLPROF_CUPTI", "on");
    let mut driven = Driven::spawn(program, false, default_timeout());
    driven.expect_line("initialized\n", "the program's cuInit");
    // …then one starts, and only then does the program launch.
    let out = dir.join("attach.bin");
    let mut collector = AttachCollector::start(&out, &session);
    std::fs::write(&go, b"").unwrap();
    let finished = driven.finish("the timeline program hung");
    assert!(finished.status.success(), "the program failed: {}", finished.stderr);
    collector.stop_ok();
    let summary = Summary::load(&out);
    let t = &summary.json["gpu"]["timeline"];
    let mut e = summary.expect();
    e.that(format_args!("source {}", t["source"]), t["source"] == "cupti");
    e.eq("kernels", number(&t["kernels"][0]["count"]), 60);
    e.eq("H2D copies", number(&t["copies"]["H2D"]["count"]), 3);
    e.eq("unmatched", number(&t["unmatched"]), 0);
    e.finish();
}
