//! Energy: the collector samples a test double of NVML (tests/nvml_double/nvml_double.c,
//! compiled here with gcc) whose GPUs draw a known power curve, and a fake powercap tree; the
//! tests check `mlprof energy --json` (totals, attribution, coverage), `--ops --csv --append`,
//! and the counter tracks of `mlprof convert` against that curve.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use mlprof_tests::*;
use serde_json::Value;

const BASE_W: f64 = 100.0;
const AMP_W: f64 = 50.0;
const PERIOD_S: f64 = 2.0;

fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid clock id and out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The double's power curve of GPU `g` at `t` s after its start, W (period `period` s).
fn power_with(g: u32, t: f64, period: f64) -> f64 {
    BASE_W * (g + 1) as f64 + AMP_W * (2.0 * std::f64::consts::PI * t / period).sin()
}

fn power(g: u32, t: f64) -> f64 {
    power_with(g, t, PERIOD_S)
}

/// Integral of `power_with(g, ·, period)` over [0, t], J.
fn energy(g: u32, t: f64, period: f64) -> f64 {
    BASE_W * (g + 1) as f64 * t
        - AMP_W * period / (2.0 * std::f64::consts::PI)
            * ((2.0 * std::f64::consts::PI * t / period).cos() - 1.0)
}

/// Energy of GPU `g` between two CLOCK_MONOTONIC times, J (curve of period `period` s).
fn energy_between_with(g: u32, origin_ns: u64, a_ns: u64, b_ns: u64, period: f64) -> f64 {
    let s = |ns: u64| (ns as f64 - origin_ns as f64) / 1e9;
    energy(g, s(b_ns), period) - energy(g, s(a_ns), period)
}

fn energy_between(g: u32, origin_ns: u64, a_ns: u64, b_ns: u64) -> f64 {
    energy_between_with(g, origin_ns, a_ns, b_ns, PERIOD_S)
}

fn nvml_double(dir: &TempDir) -> String {
    let out = dir.join("libnvml_double.so").display().to_string();
    let src = tests_dir().join("nvml_double").join("nvml_double.c").display().to_string();
    gcc(&["-shared", "-fPIC", "-O1", "-Wall", "-o", &out, &src, "-lm"]);
    out
}

/// A run under the collector with the double; returns (output, run.bin, curve origin).
struct Run {
    out: Output,
    bin: PathBuf,
    origin_ns: u64,
}

fn collect(dir: &TempDir, args: &[&str], cmd: &[String], env: &[(&str, &str)]) -> Run {
    let bin = dir.join("run.bin");
    let empty_powercap = dir.join("no-powercap");
    let _ = std::fs::create_dir(&empty_powercap);
    let origin_ns = mono_ns();
    let origin = origin_ns.to_string();
    let powercap = empty_powercap.display().to_string();
    let mut all_env: Vec<(&str, &str)> = vec![
        ("NVML_DOUBLE_START_NS", &origin),
        ("NVML_DOUBLE_BASE_W", "100"),
        ("NVML_DOUBLE_AMP_W", "50"),
        ("NVML_DOUBLE_PERIOD_MS", "2000"),
        ("MLPROF_POWERCAP_DIR", &powercap),
    ];
    all_env.extend_from_slice(env);
    let mut c = collect_command(&bin, args, cmd);
    c.env_remove("CUDA_VISIBLE_DEVICES").env_remove("MLPROF_NVML_LIB");
    for (k, v) in &all_env {
        c.env(k, v);
    }
    let out = output_with_timeout(c, default_timeout());
    assert!(out.status.success(), "mlprof-collect failed\n{}", describe(&out));
    Run { out, bin, origin_ns }
}

/// The blocking calls' times that `energy_phases` prints: (read's, fread's) (start, end) ns.
fn phase_times(out: &Output) -> ((u64, u64), (u64, u64)) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let times = |tag: &str| -> (u64, u64) {
        let line =
            stdout.lines().find(|l| l.starts_with(tag)).unwrap_or_else(|| panic!("no {tag} line: {stdout}"));
        let v: Vec<u64> = line.split_whitespace().skip(1).map(|x| x.parse().expect("time")).collect();
        (v[0], v[1])
    };
    (times("A "), times("B "))
}

fn mlprof(args: &[&str]) -> Output {
    let mut c = Command::new(&bins().mlprof);
    c.args(args);
    clean_env(&mut c);
    let out = output_with_timeout(c, Duration::from_secs(60));
    assert!(out.status.success(), "mlprof {args:?} failed\n{}", describe(&out));
    out
}

fn energy_json(bin: &Path) -> Value {
    let out = mlprof(&["energy", "--json", &bin.display().to_string()]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("invalid JSON: {e}\n{}", describe(&out)))
}

fn f(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or_else(|| panic!("{key} missing or not a number in {v}"))
}

fn device(json: &Value, id: u64) -> &Value {
    json["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["id"].as_u64() == Some(id)))
        .unwrap_or_else(|| panic!("no device {id} in {json}"))
}

fn span<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["spans"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no span {name} in {json}"))
}

fn close(what: &str, got: f64, want: f64, tolerance: f64) {
    assert!((got - want).abs() <= tolerance, "{what}: got {got}, want {want} ± {tolerance}");
}

fn run_window(json: &Value) -> (u64, u64) {
    (json["start_ns"].as_u64().expect("start_ns"), json["end_ns"].as_u64().expect("end_ns"))
}

/// Two GPUs with energy counters updated every 100 ms; two threads block in read and fread
/// over known, overlapping phases. Totals match the curve's integral within 1%; the split
/// between read and fread follows the overlap rule; coverage is the share of the run's energy
/// inside the union of the calls; samples and events share the time axis.
#[test]
fn counter_totals_attribution_and_time_axis() {
    let dir = TempDir::new("energy-attr");
    let lib = nvml_double(&dir);
    let prog = compile("energy_phases", &dir);
    let run = collect(&dir, &["--nvml-lib", &lib], std::slice::from_ref(&prog), &[("NVML_DOUBLE_GPUS", "2")]);
    let ((a0, a1), (b0, b1)) = phase_times(&run.out);
    let json = energy_json(&run.bin);
    let (start, end) = run_window(&json);

    // Devices: totals against the analytic integral.
    let mut total = 0.0;
    for g in 0..2u32 {
        let d = device(&json, g as u64);
        assert_eq!(d["source"], "nvml_counter");
        assert_eq!(d["in_run"], true);
        assert_eq!(d["uuid"], format!("GPU-00000000-0000-0000-0000-{g:012}"));
        assert_eq!(d["name"], format!("Double GPU {g}"));
        let want = energy_between(g, run.origin_ns, start, end);
        close(&format!("GPU {g} energy"), f(d, "energy_j"), want, want * 0.01);
        close(
            &format!("GPU {g} mean power"),
            f(d, "mean_power_w"),
            want / ((end - start) as f64 / 1e9),
            0.01 * want,
        );
        assert!(f(d, "uncertainty_j") > 0.0);
        total += want;
    }
    close("run total", f(&json["total"], "energy_j"), total, total * 0.01);
    close("duration", f(&json, "duration_s"), (end - start) as f64 / 1e9, 1e-6);

    // Attribution: read alone [a0, b0], shared [b0, a1], fread alone [a1, b1] (both GPUs).
    let both =
        |a: u64, b: u64| energy_between(0, run.origin_ns, a, b) + energy_between(1, run.origin_ns, a, b);
    let want_read = both(a0, b0) + both(b0, a1) / 2.0;
    let want_fread = both(b0, a1) / 2.0 + both(a1, b1);
    let read = span(&json, "read");
    let fread = span(&json, "fread");
    let tolerance = |s: &Value, want: f64| want * 0.02 + f(s, "uncertainty_j");
    close("read energy", f(read, "energy_j"), want_read, tolerance(read, want_read));
    close("fread energy", f(fread, "energy_j"), want_fread, tolerance(fread, want_fread));
    assert_eq!(read["class"], "read");
    // Coverage: the calls cover [a0, b1] (plus microseconds of other calls).
    let covered = both(a0, b1);
    let coverage = &json["coverage"];
    close("coverage attributed", f(coverage, "attributed_j"), covered, covered * 0.02);
    close("coverage fraction", f(coverage, "fraction"), covered / total, 0.02);
    let procs = json["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), 1, "{json}");
    close("process calls energy", f(&procs[0], "spans_energy_j"), covered, covered * 0.02);

    // Time axis: recorded read/fread events against the program's own clock reads, and the
    // power readings in the trace against the curve at their timestamps.
    let trace = convert_trace(&run.bin);
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let to_ns = |ts: f64| start as f64 + ts * 1000.0;
    for (name, s, e) in [("read", a0, a1), ("fread", b0, b1)] {
        let x = events
            .iter()
            .filter(|ev| ev["ph"] == "X" && ev["name"] == name)
            .max_by(|p, q| f(p, "dur").total_cmp(&f(q, "dur")))
            .unwrap_or_else(|| panic!("no {name} event"));
        close(&format!("{name} start"), to_ns(f(x, "ts")), s as f64, 2e6);
        close(&format!("{name} end"), to_ns(f(x, "ts") + f(x, "dur")), e as f64, 2e6);
    }
    let mut readings = 0;
    for ev in events.iter().filter(|ev| ev["ph"] == "C" && ev["name"] == "power W (NVML reading)") {
        let pid = ev["pid"].as_u64().expect("pid");
        assert!(pid == 0x7fff_0000 || pid == 0x7fff_0001, "{ev}");
        let g = (pid - 0x7fff_0000) as u32;
        let t = (to_ns(f(ev, "ts")) - run.origin_ns as f64) / 1e9;
        let watts = f(&ev["args"], "W");
        close(&format!("GPU {g} power at {t:.4} s"), watts, power(g, t), 0.5);
        readings += 1;
    }
    assert!(readings >= 20, "only {readings} power readings in the trace");
    let names: Vec<&str> = events
        .iter()
        .filter(|ev| ev["ph"] == "M" && ev["name"] == "process_name")
        .filter_map(|ev| ev["args"]["name"].as_str())
        .collect();
    assert!(names.contains(&"GPU 0: Double GPU 0") && names.contains(&"GPU 1: Double GPU 1"), "{names:?}");
    for counter in
        ["energy J", "power W", "GPU utilization %", "SM clock MHz", "memory used GB", "temperature C"]
    {
        assert!(events.iter().any(|ev| ev["ph"] == "C" && ev["name"] == counter), "no {counter} track");
    }

    // Operator table: text, CSV, and a CSV database appended from two runs.
    let bin = run.bin.display().to_string();
    let text = String::from_utf8_lossy(&mlprof(&["energy", "--ops", &bin]).stdout).to_string();
    assert!(text.lines().any(|l| l.starts_with("read ")), "{text}");
    let db = dir.join("ops.csv");
    let db_s = db.display().to_string();
    for _ in 0..2 {
        mlprof(&["energy", "--ops", "--csv", "--append", &db_s, &bin]);
    }
    let csv = std::fs::read_to_string(&db).expect("ops.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].starts_with("run,command,op,class,shapes,calls,median_s,mean_s,energy_per_call_j"),
        "{csv}"
    );
    assert_eq!(lines.iter().filter(|l| l.starts_with("run,")).count(), 1, "header once:\n{csv}");
    let read_rows: Vec<&&str> = lines.iter().filter(|l| l.split(',').nth(2) == Some("read")).collect();
    assert_eq!(read_rows.len(), 2, "{csv}");
    let cols: Vec<&str> = read_rows[0].split(',').collect();
    assert_eq!(cols[5], "1");
    close("read median", cols[6].parse().unwrap(), (a1 - a0) as f64 / 1e9, 0.002);
    close("read energy per call", cols[8].parse().unwrap(), f(read, "energy_j"), 1e-3);
}

/// No energy counter: the collector integrates the power readings.
#[test]
fn power_integration_without_counter() {
    let dir = TempDir::new("energy-integrate");
    let lib = nvml_double(&dir);
    // The library comes from MLPROF_NVML_LIB this time.
    let run = collect(
        &dir,
        &[],
        &["sleep".to_string(), "2".to_string()],
        &[("NVML_DOUBLE_NO_ENERGY", "1"), ("MLPROF_NVML_LIB", &lib)],
    );
    let json = energy_json(&run.bin);
    let (start, end) = run_window(&json);
    let d = device(&json, 0);
    assert_eq!(d["source"], "power_integration");
    let want = energy_between(0, run.origin_ns, start, end);
    close("integrated energy", f(d, "energy_j"), want, want * 0.01);
}

/// An energy counter whose every read costs 2 ms of CPU (an H200's costs 3-4 ms), and a
/// memory-info query costing 1 ms (10 % of a core at the default 100 ms): the sampler spaces
/// both to stay under 1 % of a core, says so on stderr and in the run's notes, and the run's
/// total still matches the curve's integral.
#[test]
fn an_expensive_energy_counter_is_read_sparingly() {
    let dir = TempDir::new("energy-costly-counter");
    let lib = nvml_double(&dir);
    let run = collect(
        &dir,
        &["--nvml-lib", &lib],
        &["sleep".to_string(), "3".to_string()],
        &[("NVML_DOUBLE_ENERGY_READ_US", "2000"), ("NVML_DOUBLE_MEMORY_READ_US", "1000")],
    );
    let stderr = String::from_utf8_lossy(&run.out.stderr).to_string();
    let line = stderr.lines().find(|l| l.contains("the sampler used")).unwrap_or_else(|| panic!("{stderr}"));
    let number_after = |tag: &str| -> f64 {
        let rest = &line[line.find(tag).unwrap_or_else(|| panic!("no {tag:?} in {line}")) + tag.len()..];
        rest.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next()
            .unwrap_or("")
            .parse()
            .unwrap_or(f64::NAN)
    };
    let core = number_after(" CPU (");
    assert!(core < 1.0, "the sampler used {core}% of a core: {line}");
    // 2 ms per read within 0.25 % of a core: a read every ~800 ms.
    let every = number_after("GPU energy counters every ");
    assert!((400.0..=2000.0).contains(&every), "counter read every {every} ms: {line}");
    let json = energy_json(&run.bin);
    let (start, end) = run_window(&json);
    let want = energy_between(0, run.origin_ns, start, end);
    // Each reading is up to one counter update (100 ms) stale, and dated accordingly: the total
    // stays within 2 % (a reading dated at its read time would make it 16 % low here) and
    // within its stated uncertainty, which the curve's ±50 W swings inside the ~0.8 s between
    // readings widen to about 8 %.
    let d = device(&json, 0);
    let (got, uncertainty) = (f(d, "energy_j"), f(d, "uncertainty_j"));
    close("energy from sparse counter reads", got, want, want * 0.02);
    assert!((got - want).abs() <= uncertainty, "{got} J ± {uncertainty} J, want {want} J");
    assert!(uncertainty <= want * 0.12, "uncertainty {uncertainty} J of {want} J");
    let notes = json["notes"].to_string();
    assert!(notes.contains("energy-counter read costs"), "notes: {notes}");
}

/// A costly counter on a GPU whose `nvmlDeviceGetPowerUsage` is a one-second average (Ampere
/// and newer) and whose driver has the instantaneous-power field: the trace's power readings
/// are the instantaneous ones, and between the sparse counter reads they shape the energy, so
/// the two phases' calls get their energy within a few percent.
#[test]
fn instantaneous_power_shapes_energy_between_sparse_counter_reads() {
    let dir = TempDir::new("energy-instant-power");
    let lib = nvml_double(&dir);
    let prog = compile("energy_phases", &dir);
    let run = collect(
        &dir,
        &["--nvml-lib", &lib],
        std::slice::from_ref(&prog),
        // Power swings with a 1.6 s period: reads ~0.8 s apart cannot follow it, the readings can.
        &[
            ("NVML_DOUBLE_ENERGY_READ_US", "2000"),
            ("NVML_DOUBLE_AVERAGED_POWER", "1"),
            ("NVML_DOUBLE_PERIOD_MS", "1600"),
        ],
    );
    let ((a0, a1), (b0, b1)) = phase_times(&run.out);
    let json = energy_json(&run.bin);
    let between = |a: u64, b: u64| energy_between_with(0, run.origin_ns, a, b, 1.6);
    // read alone [a0, b0], shared [b0, a1], fread alone [a1, b1] (the overlap rule).
    let want_read = between(a0, b0) + between(b0, a1) / 2.0;
    let want_fread = between(b0, a1) / 2.0 + between(a1, b1);
    for (name, want) in [("read", want_read), ("fread", want_fread)] {
        let (got, uncertainty) = (f(span(&json, name), "energy_j"), f(span(&json, name), "uncertainty_j"));
        eprintln!("{name}: {got} ± {uncertainty} J, want {want} J");
        close(&format!("{name} energy"), got, want, want * 0.04);
        // Stated from the readings' resolution: covers the error, stays a few percent.
        assert!(
            (got - want).abs() <= uncertainty.max(want * 0.005),
            "{name}: {got} ± {uncertainty}, want {want}"
        );
        assert!(uncertainty <= want * 0.1, "{name}: ± {uncertainty} J of {want} J");
    }
    // The readings in the trace are instantaneous power, not the one-second average.
    let (start, _) = run_window(&json);
    let trace = convert_trace(&run.bin);
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let mut readings = 0;
    for ev in events.iter().filter(|ev| ev["ph"] == "C" && ev["name"] == "power W (NVML reading)") {
        let t = (start as f64 + f(ev, "ts") * 1000.0 - run.origin_ns as f64) / 1e9;
        close(&format!("power at {t:.4} s"), f(&ev["args"], "W"), power_with(0, t, 1.6), 0.5);
        readings += 1;
    }
    assert!(readings >= 10, "only {readings} power readings in the trace");
}

/// No NVML: one line says so, the run goes on, nothing is invented.
#[test]
fn no_nvml() {
    let dir = TempDir::new("energy-none");
    let missing = dir.file("no-such-libnvidia-ml.so");
    let run = collect(&dir, &["--nvml-lib", &missing], &["true".to_string()], &[]);
    let stderr = String::from_utf8_lossy(&run.out.stderr).to_string();
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("no NVML")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("no CPU energy"), "{stderr}");
    let json = energy_json(&run.bin);
    assert_eq!(json["devices"].as_array().map(Vec::len), Some(0), "{json}");
    assert_eq!(f(&json["total"], "energy_j"), 0.0);
    assert!(!json["notes"].as_array().expect("notes").is_empty());
    // Not an NVML library at all (libc): refused before nvml-wrapper gets it.
    let run = collect(&dir, &["--nvml-lib", "libc.so.6"], &["true".to_string()], &[]);
    assert!(String::from_utf8_lossy(&run.out.stderr).contains("not an NVML library"));
}

/// GPU 1 disappears 400 ms in: the error is recorded, GPU 0 is sampled to the end.
#[test]
fn gpu_lost_mid_run() {
    let dir = TempDir::new("energy-lost");
    let lib = nvml_double(&dir);
    let run = collect(
        &dir,
        &["--nvml-lib", &lib],
        &["sleep".to_string(), "2".to_string()],
        &[("NVML_DOUBLE_GPUS", "2"), ("NVML_DOUBLE_LOSE", "1:400")],
    );
    let json = energy_json(&run.bin);
    let (start, end) = run_window(&json);
    let duration = (end - start) as f64 / 1e9;
    let lost = device(&json, 1);
    let errors = lost["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{lost}");
    assert!(errors[0].as_str().unwrap_or("").contains("GPU 1"), "{lost}");
    let lost_at = (run.origin_ns as f64 + 0.4e9 - start as f64) / 1e9;
    assert!(f(lost, "last_sample_s") < lost_at + 0.05, "{lost}");
    let alive = device(&json, 0);
    assert!(alive["errors"].as_array().expect("errors").is_empty());
    assert!(f(alive, "last_sample_s") > duration - 0.05, "{alive} (duration {duration})");
    let want = energy_between(0, run.origin_ns, start, end);
    close("GPU 0 energy", f(alive, "energy_j"), want, want * 0.01);
}

/// CUDA_VISIBLE_DEVICES decides which GPUs belong to the run; all are recorded.
#[test]
fn cuda_visible_devices() {
    let dir = TempDir::new("energy-visible");
    let lib = nvml_double(&dir);
    let run = collect(
        &dir,
        &["--nvml-lib", &lib],
        &["sleep".to_string(), "0.5".to_string()],
        &[("NVML_DOUBLE_GPUS", "2"), ("CUDA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000001")],
    );
    let json = energy_json(&run.bin);
    assert_eq!(device(&json, 0)["in_run"], false);
    assert_eq!(device(&json, 1)["in_run"], true);
    close("run total", f(&json["total"], "energy_j"), f(device(&json, 1), "energy_j"), 1e-6);
}

/// CPU energy from powercap: a fake package zone whose counter wraps during the run.
#[test]
fn rapl_package_with_wraparound() {
    let dir = TempDir::new("energy-rapl");
    let zone = dir.join("powercap").join("intel-rapl:0");
    std::fs::create_dir_all(&zone).expect("mkdir");
    std::fs::write(zone.join("name"), "package-0\n").expect("name");
    std::fs::write(zone.join("max_energy_range_uj"), "1000000\n").expect("range");
    std::fs::write(zone.join("energy_uj"), "900000\n").expect("energy");
    let file = zone.join("energy_uj").display().to_string();
    let script = format!(
        "sleep 0.2; echo 950000 > {file}; sleep 0.2; echo 50000 > {file}; sleep 0.2; echo 100000 > {file}; sleep 0.3"
    );
    let powercap = dir.join("powercap").display().to_string();
    let missing = dir.file("no-nvml.so");
    let run = collect(
        &dir,
        &["--nvml-lib", &missing],
        &["sh".to_string(), "-c".to_string(), script],
        &[("MLPROF_POWERCAP_DIR", &powercap)],
    );
    let json = energy_json(&run.bin);
    let d = device(&json, 256);
    assert_eq!(d["kind"], "cpu_package");
    assert_eq!(d["source"], "rapl");
    assert_eq!(d["name"], "CPU package 0");
    close("package energy", f(d, "energy_j"), 0.2, 1e-3);
    let stderr = String::from_utf8_lossy(&run.out.stderr);
    assert!(stderr.contains("no NVML") && !stderr.contains("no CPU energy"), "{stderr}");
}

/// The HTML report of an energy run (two GPUs of the double), rendered by headless Chromium:
/// the devices and the spans by energy carry the numbers of `energy --json`, the header those
/// of `summary --json`, the power timeline one line per GPU; the screenshot shows it.
#[test]
fn html_report_of_an_energy_run_in_chromium() {
    let Some(chromium) = mlprof_tests::browser::chromium() else { return };
    use mlprof_tests::browser;
    let dir = TempDir::new("energy-report");
    let lib = nvml_double(&dir);
    let prog = compile("energy_phases", &dir);
    let run = collect(&dir, &["--nvml-lib", &lib], std::slice::from_ref(&prog), &[("NVML_DOUBLE_GPUS", "2")]);
    let json = energy_json(&run.bin);
    let summary = summary_json(&run.bin);
    let html = dir.join("energy.html");
    mlprof(&["report", &run.bin.display().to_string(), "-o", &html.display().to_string()]);
    let rendered = browser::render(&chromium, &html, dir.path(), 2000);
    let dom = &rendered.dom;
    assert!(!dom.contains("<script") && !dom.contains(" src=") && !dom.contains("url("));
    let facts = browser::figures(dom, "summary", "header");
    assert_eq!(facts["events"], summary["events"].to_string());
    assert_eq!(facts["duration_ns"], summary["duration_ns"].to_string());

    let devices = browser::table(dom, "devices-table");
    assert_eq!(devices.len(), 2, "{devices:?}");
    for (id, cells) in &devices {
        let d = device(&json, id.parse().unwrap());
        for key in ["energy_j", "uncertainty_j", "mean_power_w"] {
            assert_eq!(cells[key].parse::<f64>().unwrap(), f(d, key), "device {id} {key}");
        }
        assert_eq!(cells["samples"], d["samples"].to_string());
    }
    let answer = browser::figures(dom, "energy", "p");
    assert_eq!(answer["energy_j"].parse::<f64>().unwrap(), f(&json["total"], "energy_j"));

    let spans = browser::table(dom, "energy-spans-table");
    for name in ["read", "fread"] {
        let (cells, want) = (&spans[name], span(&json, name));
        for key in ["energy_j", "uncertainty_j", "share", "time_s"] {
            assert_eq!(cells[key].parse::<f64>().unwrap(), f(want, key), "{name} {key}");
        }
        assert_eq!(cells["calls"], want["calls"].to_string());
    }
    let power = browser::element(dom, "timeline-power", "div").expect("power timeline");
    assert_eq!(power.matches("<polyline").count(), 2, "one line per GPU");
    assert!(power.contains("GPU 0: Double GPU 0") && power.contains("GPU 1: Double GPU 1"));

    let png = browser::png_stats(&rendered.png);
    assert!(png.width == 1280 && png.colors >= 32 && png.ink >= 0.03, "blank screenshot? {png:?}");
}

/// Energy follows the capture ranges (issue 38): `--delay 0.4 --duration 0.5` over the phases
/// program (1.6 s), two GPUs of the double: the range's energy is the curve's integral over
/// the range the run file records (within 1 %), the total is still the whole run's, and the
/// text says it on its own line.
#[test]
fn the_capture_range_holds_its_own_energy() {
    let dir = TempDir::new("energy-ranges");
    let lib = nvml_double(&dir);
    let prog = compile("energy_phases", &dir);
    let args = ["--nvml-lib", &lib, "--delay", "0.4", "--duration", "0.5"];
    let run = collect(&dir, &args, std::slice::from_ref(&prog), &[("NVML_DOUBLE_GPUS", "2")]);
    let json = energy_json(&run.bin);
    let (start, end) = run_window(&json);
    let ranges = &json["ranges"];
    let listed = ranges["ranges"].as_array().unwrap_or_else(|| panic!("no ranges in {json}"));
    assert_eq!(listed.len(), 1, "{ranges}");
    let (a, b) =
        (start + listed[0]["start_ns"].as_u64().unwrap(), start + listed[0]["end_ns"].as_u64().unwrap());
    close("range length", (b - a) as f64 / 1e9, 0.5, 0.05);
    let both =
        |a: u64, b: u64| energy_between(0, run.origin_ns, a, b) + energy_between(1, run.origin_ns, a, b);
    let want = both(a, b);
    close("range energy", f(&listed[0], "energy_j"), want, want * 0.01);
    close("ranges' sum", f(ranges, "energy_j"), want, want * 0.01);
    close("ranges' time", f(ranges, "time_s"), (b - a) as f64 / 1e9, 1e-6);
    assert_eq!(ranges["source"], "time", "{ranges}");
    let total = both(start, end);
    close("run total", f(&json["total"], "energy_j"), total, total * 0.01);
    let text =
        String::from_utf8_lossy(&mlprof(&["energy", &run.bin.display().to_string()]).stdout).into_owned();
    assert!(
        text.lines().any(|l| l.starts_with("in the capture ranges") && l.contains("1 range(s) (time)")),
        "{text}"
    );
    // Without a capture option there are none.
    let whole =
        collect(&dir, &["--nvml-lib", &lib], std::slice::from_ref(&prog), &[("NVML_DOUBLE_GPUS", "2")]);
    assert_eq!(energy_json(&whole.bin)["ranges"], Value::Null);
}
