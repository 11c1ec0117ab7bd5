//! `mlprof convert` to Perfetto's protobuf, decoded with Perfetto's own published schema
//! (tests/scripts/perfetto_check.py: the `perfetto` package's compiled protos and `protobuf`,
//! offline) and checked against `mlprof summary --json` and the Chrome JSON trace of the same
//! run: slice counts per function, begin/end balanced per track in trace_processor's order,
//! every interned name resolved on its sequence, flows paired, counter tracks with the same
//! values, a descriptor for every process and thread. Then the same on a `--torch`
//! DataLoader run and on an energy run with the NVML test double, the options that cut a
//! trace, and damaged run files.

use mlprof_tests::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn limit() -> Duration {
    default_timeout().max(Duration::from_secs(300))
}

/// `mlprof ARGS`, which must succeed.
fn mlprof(args: &[&str]) -> Output {
    let mut c = Command::new(&bins().mlprof);
    clean_env(&mut c).args(args);
    let out = output_with_timeout(c, limit());
    assert!(out.status.success(), "mlprof {args:?} failed\n{}", describe(&out));
    out
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The checker's report on `trace`, compared with `chrome` when given.
fn check(trace: &Path, chrome: Option<&Path>) -> Value {
    let py = python();
    let mut c = Command::new(&py);
    clean_env(&mut c).arg(script("perfetto_check.py")).arg(trace);
    if let Some(chrome) = chrome {
        c.arg("--chrome").arg(chrome);
    }
    let out = output_with_timeout(c, limit());
    assert!(
        out.status.success(),
        "perfetto_check.py failed ({} needs the perfetto and protobuf packages: \
         scripts/python-env.sh installs them)\n{}",
        py.display(),
        describe(&out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad checker output: {e}\n{}", describe(&out)))
}

/// Converts `run` to `NAME.pftrace` and `NAME.json` beside it, checks the Perfetto trace in
/// itself and against the Chrome one, and returns the report and the trace's path.
fn convert_and_check(run: &Path, name: &str, extra: &[&str]) -> (Value, PathBuf) {
    let dir = run.parent().unwrap();
    let (pf, json) = (dir.join(format!("{name}.pftrace")), dir.join(format!("{name}.json")));
    let (run_s, pf_s) = (s(run), s(&pf));
    let mut args = vec!["convert", run_s.as_str(), "-o", pf_s.as_str()];
    args.extend_from_slice(extra);
    let out = mlprof(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Perfetto protobuf") && stderr.contains("opens in"), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    mlprof(&["convert", &s(run), "-o", &s(&json)]);
    let report = check(&pf, Some(&json));
    assert_eq!(report["error_count"], 0, "{}", report["errors"]);
    let chrome = &report["chrome"];
    assert!(chrome["compared"].as_u64().unwrap() > 0, "{chrome}");
    assert_eq!(chrome["missing_in_perfetto"], 0, "{chrome}");
    assert_eq!(chrome["extra_in_perfetto"], 0, "{chrome}");
    assert_eq!(chrome["counter_differences"], serde_json::json!({}), "{chrome}");
    (report, pf)
}

/// Every pid of the summary is a process of the trace, and every thread's process is too.
fn assert_descriptors(report: &Value, summary: &Value) {
    let processes = report["processes"].as_object().unwrap();
    for p in summary["processes"].as_array().unwrap() {
        let pid = p["pid"].as_u64().unwrap().to_string();
        assert!(processes.contains_key(&pid), "no process descriptor for {pid}: {processes:?}");
    }
    for (tid, t) in report["threads"].as_object().unwrap() {
        assert!(processes.contains_key(&t["pid"].to_string()), "thread {tid}: {t}");
    }
}

/// Slices per function equal the summary's call counts (aggregated clock reads are counters,
/// ITT records are spans).
fn assert_call_counts(report: &Value, summary: &Value) {
    let slices = &report["slices"];
    let mut compared = 0;
    for (func, stats) in summary["calls"].as_object().unwrap() {
        if func.starts_with("itt_") || func == "clock_gettime" || func == "gettimeofday" {
            continue;
        }
        assert_eq!(slices[func].as_u64().unwrap_or(0), stats["count"].as_u64().unwrap(), "slices of {func}");
        compared += 1;
    }
    assert!(compared > 0, "no calls in {summary}");
}

/// System calls of threads and forked processes: everything the Chrome trace has, nothing
/// more, with the same times and arguments; compact; the same with --compress; cut by the
/// options; split into complete parts.
#[test]
fn io_programs_convert_completely_and_compactly() {
    let dir = TempDir::new("perfetto-io");
    let prog = compile("threads_fork", &dir);
    let run = dir.join("run.bin");
    run_collect_ok(&run, &[&prog, &dir.str(), "3", "200"]);
    let fileops = compile("fileops", &dir);
    let run2 = dir.join("fileops.bin");
    run_collect_ok(&run2, &[&fileops, &dir.str(), "100"]);

    let summary = summary_json(&run);
    let (report, pf) = convert_and_check(&run, "trace", &[]);
    assert_descriptors(&report, &summary);
    assert_call_counts(&report, &summary);
    assert_eq!(report["late_begins"], 0, "calls of threads without spans go out in order");
    assert!(report["counters"].as_object().unwrap().keys().any(|k| k.contains("clock_gettime calls")));
    // 2 processes × 4 threads (main + 3), each its own sequence, plus metadata and counters.
    assert!(report["sequences"].as_u64().unwrap() >= 10, "{}", report["sequences"]);

    // Size: bytes per slice over the whole file (metadata included).
    let fileops_summary = summary_json(&run2);
    let (fileops_report, fileops_pf) = convert_and_check(&run2, "fileops", &[]);
    assert_call_counts(&fileops_report, &fileops_summary);
    for (trace, report) in [(&pf, &report), (&fileops_pf, &fileops_report)] {
        let slices: u64 = report["slices"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        let per_slice = std::fs::metadata(trace).unwrap().len() as f64 / slices as f64;
        eprintln!("{}: {slices} slices, {per_slice:.1} bytes per slice", trace.display());
        assert!(per_slice < 64.0, "{}: {per_slice:.1} bytes per slice", trace.display());
    }

    // Into a pipe (`-o /dev/stdout | ...`): no offsets, no direct writes; the same bytes.
    let mut c = Command::new("sh");
    clean_env(&mut c).arg("-c").arg(format!(
        "'{}' convert '{}' -o /dev/stdout | cat > '{}'",
        bins().mlprof.display(),
        s(&run),
        s(&dir.join("piped.pftrace"))
    ));
    let out = output_with_timeout(c, limit());
    assert!(out.status.success(), "convert into a pipe failed\n{}", describe(&out));
    assert_eq!(std::fs::read(dir.join("piped.pftrace")).unwrap(), std::fs::read(&pf).unwrap());

    // --compress: the same content, smaller.
    let packed = dir.join("packed.pftrace");
    mlprof(&["convert", &s(&run), "-o", &s(&packed), "--compress"]);
    let packed_report = check(&packed, None);
    assert_eq!(packed_report["error_count"], 0, "{}", packed_report["errors"]);
    assert_eq!(packed_report["compressed_batches"], true);
    assert_eq!(packed_report["slices"], report["slices"]);
    assert!(std::fs::metadata(&packed).unwrap().len() * 2 < std::fs::metadata(&pf).unwrap().len());

    // --pid: one process; --only: one kind; --from/--to: a window.
    let child = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["forked"] == true)
        .map(|p| p["pid"].as_u64().unwrap())
        .expect("a forked child");
    let one = dir.join("one.pftrace");
    mlprof(&["convert", &s(&run), "-o", &s(&one), "--pid", &child.to_string()]);
    let one_report = check(&one, None);
    assert_eq!(one_report["error_count"], 0, "{}", one_report["errors"]);
    assert_eq!(one_report["processes"].as_object().unwrap().len(), 1, "{}", one_report["processes"]);
    let child_calls = summary["processes"].as_array().unwrap().iter().find(|p| p["pid"] == child).unwrap();
    assert_eq!(one_report["slices"]["write"], child_calls["calls"]["write"]["count"]);
    let energy_only = dir.join("energy-only.pftrace");
    mlprof(&["convert", &s(&run), "-o", &s(&energy_only), "--only", "energy"]);
    assert_eq!(check(&energy_only, None)["slices"], serde_json::json!({}));
    let window = dir.join("window.pftrace");
    mlprof(&["convert", &s(&run), "-o", &s(&window), "--from", "1000", "--to", "2000"]);
    assert_eq!(check(&window, None)["slices"], serde_json::json!({}), "nothing 1000 s after the start");

    // --split-every: parts of at most N events, each complete, together the whole run.
    let split = dir.join("split.pftrace");
    let out = mlprof(&["convert", &s(&run), "-o", &s(&split), "--split-every", "1000"]);
    let total: u64 = report["slices"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    let parts = total.div_ceil(1000);
    let mut sum = 0;
    for i in 1..=parts {
        let part = dir.join(format!("split.{i:03}.pftrace"));
        let r = check(&part, None);
        assert_eq!(r["error_count"], 0, "part {i}: {}", r["errors"]);
        let n: u64 = r["slices"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert!(n <= 1000, "part {i}: {n} slices");
        assert_eq!(r["processes"].as_object().unwrap().len(), 2, "part {i} has every process");
        sum += n;
    }
    assert_eq!(sum, total, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.join(format!("split.{:03}.pftrace", parts + 1)).exists());
}

/// `--torch` with a DataLoader: ops, phases, transforms and batch spans nest on their threads,
/// flows from each batch's fetch (worker) to its wait (main process) pair up.
#[test]
fn torch_dataloader_run() {
    if !require_torch() {
        return;
    }
    let dir = TempDir::new("perfetto-torch");
    let run = dir.join("run.bin");
    let py = python().display().to_string();
    let train = script("torch_hook_train.py").display().to_string();
    let o = run_collect_env(&run, &["--torch"], &[py.as_str(), &train, &dir.str()], &[], limit());
    assert!(o.status.success(), "torch_hook_train.py under mlprof-collect --torch failed\n{}", describe(&o));
    let summary = summary_json(&run);
    let (report, _) = convert_and_check(&run, "trace", &[]);
    assert_descriptors(&report, &summary);
    assert_call_counts(&report, &summary);
    let by_key = &report["slices_by_category_name"];
    for span in summary["spans"].as_array().unwrap() {
        let key = format!("itt,{}|{}", span["domain"].as_str().unwrap(), span["name"].as_str().unwrap());
        assert_eq!(by_key[&key], span["count"], "slices {key}");
    }
    for name in ["forward", "backward", "optimizer.step", "batch.fetch", "batch.wait", "collate"] {
        assert!(report["slices"][name].as_u64().unwrap_or(0) > 0, "no {name} slices");
    }
    assert!(report["slices"].as_object().unwrap().keys().any(|k| k.starts_with("aten::")), "no op slices");
    assert!(report["slices"].as_object().unwrap().keys().any(|k| k.starts_with("transform:")));
    // Ops nest under phases, system calls under ops: some thread is several levels deep.
    let deepest = report["max_depth"].as_object().unwrap().values().filter_map(Value::as_u64).max();
    assert!(deepest >= Some(3), "{}", report["max_depth"]);
    let flows = &report["flows"];
    let batches = summary["data_pipeline"]["batches"].as_u64().unwrap();
    assert!(batches > 0);
    assert_eq!(flows["begun"], flows["paired"], "{flows}");
    assert_eq!(flows["terminated"], flows["paired"], "{flows}");
    assert_eq!(flows["paired"].as_u64(), Some(batches), "{flows}");
}

/// Energy with the NVML test double: every series of every device is a counter track with the
/// values of the Chrome trace, on the device's pseudo-process.
#[test]
fn energy_counter_tracks() {
    let dir = TempDir::new("perfetto-energy");
    let lib = dir.join("libnvml_double.so");
    let src = tests_dir().join("nvml_double").join("nvml_double.c");
    gcc(&["-shared", "-fPIC", "-O1", "-Wall", "-o", &s(&lib), &s(&src), "-lm"]);
    let prog = compile("fileops", &dir);
    let run = dir.join("run.bin");
    let empty_powercap = dir.join("no-powercap");
    std::fs::create_dir(&empty_powercap).unwrap();
    let mut c = collect_command(&run, &["--nvml-lib", &s(&lib)], &[prog.as_str(), &dir.str(), "50"]);
    c.env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("MLPROF_NVML_LIB")
        .env("NVML_DOUBLE_GPUS", "2")
        .env("MLPROF_POWERCAP_DIR", &empty_powercap);
    let out = output_with_timeout(c, limit());
    assert!(out.status.success(), "mlprof-collect failed\n{}", describe(&out));
    let (report, _) = convert_and_check(&run, "trace", &[]);
    let counters = report["counters"].as_object().unwrap();
    for device in [0x7fff_0000u64, 0x7fff_0001] {
        for series in ["energy J", "power W (NVML reading)", "GPU utilization %", "temperature C"] {
            let key = format!("{device}/{series}");
            let track = counters.get(&key).unwrap_or_else(|| panic!("no {key}: {:?}", counters.keys()));
            assert!(track["values"].as_u64().unwrap() >= 1, "{key}: {track}");
        }
        let name = &report["processes"][device.to_string()];
        assert!(name.as_str().unwrap().starts_with("GPU "), "{name}");
    }
    // Cumulative energy only grows.
    let energy = &counters["2147418112/energy J"]["series"];
    let values: Vec<f64> = energy.as_array().unwrap().iter().map(|p| p[1].as_f64().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[0] <= w[1]), "{values:?}");
}

/// A truncated run, and one with garbage in the middle, convert to valid traces of what was
/// readable, with a warning, never a panic.
#[test]
fn damaged_runs_give_a_valid_trace_and_a_warning() {
    let dir = TempDir::new("perfetto-damaged");
    let prog = compile("threads_fork", &dir);
    let run = dir.join("run.bin");
    run_collect_ok(&run, &[&prog, &dir.str(), "2", "300"]);
    let bytes = std::fs::read(&run).unwrap();
    // A frame header past the middle of the file, found by walking the frames (a 16-byte
    // file header, then frames of an 8-byte header — kind u16, length u32 at 4 — and a payload
    // padded to 8 bytes).
    let mut at = 16;
    while at < bytes.len() / 2 {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += 8 + len.div_ceil(8) * 8;
    }
    // (case, damaged bytes, whether the reader can tell): garbage inside an event payload
    // reads as events (records carry no checksum), unknown kinds are skipped.
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        // Cut inside the header of that frame: everything before it stays readable.
        ("truncated", bytes[..at + 4].to_vec(), true),
        (
            "bad-frame-header",
            {
                let mut b = bytes.clone();
                b[at..at + 8].copy_from_slice(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
                b
            },
            true,
        ),
        (
            "garbage-payload",
            {
                let mut b = bytes.clone();
                let at = b.len() / 2;
                for (i, x) in b[at..at + 4096].iter_mut().enumerate() {
                    *x = (i as u8).wrapping_mul(151).wrapping_add(7);
                }
                b
            },
            false,
        ),
    ];
    for (name, damaged, detectable) in cases {
        let path = dir.join(format!("{name}.bin"));
        std::fs::write(&path, &damaged).unwrap();
        let trace = dir.join(format!("{name}.pftrace"));
        let mut c = Command::new(&bins().mlprof);
        clean_env(&mut c).args(["convert", &s(&path), "-o", &s(&trace)]);
        let out = output_with_timeout(c, limit());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: mlprof convert failed\n{}", describe(&out));
        assert!(!detectable || stderr.contains("warning"), "{name}: no warning\n{stderr}");
        let report = check(&trace, None);
        assert_eq!(report["error_count"], 0, "{name}: {}", report["errors"]);
        let slices: u64 = report["slices"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert!(slices > 0, "{name}: nothing readable kept");
    }
}

/// The GPU timeline (CUPTI and libcuda test doubles): per device a process, per stream a
/// thread, each kernel and copy a slice with an arrow from the call that issued it, the same
/// in both formats.
#[test]
fn gpu_timeline_tracks_and_arrows() {
    const KERNELS: u64 = 40;
    const COPIES: u64 = 3;
    let dir = TempDir::new("perfetto-gpu");
    let main = gpu_timeline_program(&dir, true);
    let run = dir.join("run.bin");
    let out =
        run_collect(&run, &["--gpu-timeline"], &[main.as_str(), &KERNELS.to_string(), &COPIES.to_string()]);
    assert!(out.status.success(), "mlprof-collect failed\n{}", describe(&out));
    let (report, _) = convert_and_check(&run, "trace", &[]);
    let device = (0x4000_0000u64).to_string();
    assert_eq!(report["processes"][&device], "CUDA device 0 (GPU timeline)", "{}", report["processes"]);
    let stream = (0x4000_0007u64).to_string();
    assert_eq!(report["threads"][&stream]["name"], "stream 7", "{}", report["threads"]);
    assert_eq!(report["slices"]["testKernel(float*, int)"], KERNELS, "{}", report["slices"]);
    assert_eq!(report["slices"]["memcpy H2D"], COPIES, "{}", report["slices"]);
    assert_eq!(report["slices_by_category"]["gpu_kernel"], KERNELS);
    // One arrow per kernel and copy, from its launch or copy call to it.
    assert_eq!(report["flows"]["paired"], KERNELS + COPIES, "{}", report["flows"]);
    // The device's busy counter: 1 from the start of each run of work, 0 at its end.
    let busy = &report["counters"][format!("{device}/GPU busy")];
    assert!(busy["values"].as_u64().unwrap_or(0) >= 2, "{}", report["counters"]);
    assert_eq!((busy["first"].as_f64(), busy["last"].as_f64()), (Some(1.0), Some(0.0)), "{busy}");
}
