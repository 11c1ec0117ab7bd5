//! `mlprof-collect --torch` (the Python start-up hook in python/): PyTorch op ranges, training
//! phases, DataLoader and transform spans with their flows in the trace and the
//! `data_pipeline` summary; a user's own sitecustomize still runs; and, without --torch,
//! torch.profiler.itt ranges and marks are recorded exactly.
//!
//! Needs torch + torchvision in the test Python. Without them the tests fail, unless
//! MLPROF_SKIP_TORCH=1, in which case they are skipped (said and counted).

use mlprof_tests::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

fn limit() -> Duration {
    default_timeout().max(Duration::from_secs(300))
}

/// One `"ph":"X"` event of the trace.
#[derive(Clone, Debug)]
struct Slice {
    name: String,
    cat: String,
    pid: u64,
    tid: u64,
    /// µs.
    ts: f64,
    dur: f64,
    id: u64,
    depth: u64,
}

impl Slice {
    fn domain(&self) -> &str {
        self.cat.strip_prefix("itt,").unwrap_or("")
    }

    fn contains(&self, other: &Slice) -> bool {
        self.pid == other.pid
            && self.tid == other.tid
            && self.ts <= other.ts
            && other.ts + other.dur <= self.ts + self.dur + 0.001
    }
}

fn slices(trace: &Value) -> Vec<Slice> {
    let events = trace.get("traceEvents").and_then(Value::as_array).expect("traceEvents array");
    events
        .iter()
        .filter(|e| e.get("ph").and_then(Value::as_str) == Some("X"))
        .map(|e| {
            let args = e.get("args");
            let arg = |k: &str| args.and_then(|a| a.get(k)).and_then(Value::as_u64).unwrap_or(0);
            Slice {
                name: e["name"].as_str().unwrap_or("").to_string(),
                cat: e.get("cat").and_then(Value::as_str).unwrap_or("").to_string(),
                pid: e["pid"].as_u64().unwrap_or(0),
                tid: e["tid"].as_u64().unwrap_or(0),
                ts: e["ts"].as_f64().unwrap_or(0.0),
                dur: e["dur"].as_f64().unwrap_or(0.0),
                id: arg("id"),
                depth: arg("depth"),
            }
        })
        .collect()
}

fn spans<'a>(all: &'a [Slice], domain: &str, name: &str) -> Vec<&'a Slice> {
    all.iter().filter(|s| s.domain() == domain && s.name == name).collect()
}

#[test]
fn torch_ops_phases_and_data_pipeline() {
    if !require_torch() {
        return;
    }
    let dir = TempDir::new("torch-hook");
    let py = python().display().to_string();
    let script = script("torch_hook_train.py").display().to_string();
    let out = dir.join("run.bin");
    let o = run_collect_env(&out, &["--torch"], &[py.as_str(), &script, &dir.str()], &[], limit());
    assert!(o.status.success(), "torch_hook_train.py under mlprof-collect --torch failed\n{}", describe(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("--torch hook"), "the hook warned\n{}", describe(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("16 steps"), "{}", describe(&o));
    // The phase and data spans below went through libmlprof.so's CPython builtins
    // (preload/src/exports/python.rs), not the ctypes fallback.
    assert!(String::from_utf8_lossy(&o.stdout).contains("spans through builtins"), "{}", describe(&o));

    let s = clean_summary(&out);
    let procs = s.procs_with_cmdline("torch_hook_train.py");
    let pids: BTreeSet<u64> = procs.iter().map(|p| p.pid()).collect();
    let mains: Vec<_> = procs.iter().filter(|p| !pids.contains(&p.ppid())).collect();
    assert_eq!(
        mains.len(),
        1,
        "one main process: {:?}",
        procs.iter().map(|p| p.describe()).collect::<Vec<_>>()
    );
    let main = mains[0].pid();
    let workers: BTreeSet<u64> = procs.iter().filter(|p| p.ppid() == main).map(|p| p.pid()).collect();
    assert!(workers.len() >= 2, "DataLoader workers of {main}: {workers:?}");

    let trace = convert_trace(&out);
    let all = slices(&trace);
    let mut e = s.expect();

    // PyTorch ops (emit_itt for the whole run), in the main process.
    for op in ["aten::conv2d", "aten::linear"] {
        let n = spans(&all, "PyTorch", op).iter().filter(|s| s.pid == main).count();
        e.that(format_args!("op {op} spans in the main process: {n} >= 16"), n >= 16);
    }
    // Phases.
    let phase = |name: &str| spans(&all, "mlprof.phase", name).into_iter().filter(|s| s.pid == main).count();
    e.that(format_args!("forward phases {} >= 16", phase("forward")), phase("forward") >= 16)
        .eq("backward phases", phase("backward") as u64, 16)
        .eq("optimizer.step phases", phase("optimizer.step") as u64, 16)
        .eq("torch.save phases", phase("torch.save") as u64, 1)
        .eq("torch.load phases", phase("torch.load") as u64, 1);
    // Ops nest under phases, and system calls under the op or phase that made them.
    let backward = spans(&all, "mlprof.phase", "backward");
    let nested_ops = spans(&all, "PyTorch", "aten::convolution_backward")
        .into_iter()
        .filter(|op| backward.iter().any(|b| b.contains(op)))
        .count();
    e.that(format_args!("aten::convolution_backward inside backward: {nested_ops} >= 16"), nested_ops >= 16);
    let syscalls: Vec<&Slice> = all.iter().filter(|s| !s.cat.starts_with("itt")).collect();
    let inside = |outer: &Slice, names: &[&str]| {
        syscalls.iter().filter(|c| names.contains(&c.name.as_str()) && outer.contains(c)).count()
    };
    let save = spans(&all, "mlprof.phase", "torch.save");
    let writes = save.first().map(|s| inside(s, &["write", "fwrite", "pwrite64", "writev"])).unwrap_or(0);
    e.that(format_args!("write calls nested in torch.save: {writes} > 0"), writes > 0);
    let from_file = spans(&all, "PyTorch", "aten::from_file");
    let opens = from_file.first().map(|s| inside(s, &["open", "open64", "openat", "openat64"])).unwrap_or(0);
    e.that(format_args!("open nested in aten::from_file: {opens} >= 1"), opens >= 1);

    // Transforms per sample, in the workers: 64 samples x 2 epochs each.
    for t in ["transform:RandomHorizontalFlip", "transform:Normalize"] {
        let found = spans(&all, "mlprof.data", t);
        let in_workers = found.iter().filter(|s| workers.contains(&s.pid)).count();
        e.eq(format_args!("{t} spans in workers"), in_workers as u64, 128).eq(
            format_args!("{t} spans elsewhere"),
            (found.len() - in_workers) as u64,
            0,
        );
    }
    // Batches: fetch (and collate) in workers, wait and consume in main, same ids.
    let ids = |name: &str, pred: &dyn Fn(u64) -> bool| -> BTreeSet<u64> {
        spans(&all, "mlprof.data", name).into_iter().filter(|s| pred(s.pid)).map(|s| s.id).collect()
    };
    let fetched = ids("batch.fetch", &|pid| workers.contains(&pid));
    let collated = ids("collate", &|pid| workers.contains(&pid));
    let waited = ids("batch.wait", &|pid| pid == main);
    let consumed = ids("batch.consume", &|pid| pid == main);
    let want: BTreeSet<u64> = (0..2u64).flat_map(|epoch| (0..8u64).map(move |b| epoch << 32 | b)).collect();
    e.that(format_args!("batch.fetch ids in workers {fetched:?} == {want:?}"), fetched == want)
        .that(format_args!("collate ids in workers {collated:?}"), collated == want)
        .that(format_args!("batch.wait ids in main {waited:?}"), waited == want)
        .that(format_args!("batch.consume ids in main {consumed:?}"), consumed == want)
        .eq("batch.wait spans", spans(&all, "mlprof.data", "batch.wait").len() as u64, 16);
    // Flows: one start per fetch, one end per wait, paired by id.
    let events = trace["traceEvents"].as_array().unwrap();
    let mut flows: BTreeMap<u64, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for ev in events {
        let ph = ev.get("ph").and_then(Value::as_str).unwrap_or("");
        if ph != "s" && ph != "f" {
            continue;
        }
        let id = ev.get("id").and_then(Value::as_u64).expect("numeric flow id");
        let pid = ev["pid"].as_u64().unwrap_or(0);
        let entry = flows.entry(id).or_default();
        if ph == "s" { entry.0.push(pid) } else { entry.1.push(pid) }
    }
    let paired =
        flows.values().filter(|(s, f)| s.len() == 1 && f == &vec![main] && workers.contains(&s[0])).count();
    e.eq("flows from a worker's fetch to main's wait", paired as u64, 16).eq(
        "flow ids",
        flows.len() as u64,
        16,
    );
    e.finish();

    // The summary's data-pipeline and span sections.
    let json = summary_json(&out);
    let data = &json["data_pipeline"];
    assert!(data.is_object(), "no data_pipeline in the summary: {json}");
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(num(data, "batches"), 16, "{data}");
    assert!(num(data, "wait_total_ns") > 0 && num(data, "wall_ns") >= num(data, "wait_total_ns"), "{data}");
    let share = data["wait_share"].as_f64().expect("wait_share");
    assert!(share > 0.0 && share <= 1.0, "wait_share {share}");
    num(data, "out_of_order");
    assert_eq!(num(&data["wait"], "count"), 16);
    let transforms: BTreeMap<&str, &Value> =
        data["transforms"].as_array().unwrap().iter().map(|t| (t["name"].as_str().unwrap(), t)).collect();
    for name in ["RandomHorizontalFlip", "Normalize"] {
        let t = transforms.get(name).unwrap_or_else(|| panic!("transform {name} in {data}"));
        assert_eq!(num(t, "count"), 128, "{t}");
        assert!(num(t, "median_ns") <= num(t, "p90_ns") && num(t, "p90_ns") <= num(t, "p99_ns"), "{t}");
    }
    let busy: u64 = data["workers"].as_array().unwrap().iter().map(|w| num(w, "busy_ns")).sum();
    let fetch_total: f64 =
        spans(&all, "mlprof.data", "batch.fetch").iter().map(|s| s.dur).sum::<f64>() * 1000.0;
    assert!((busy as f64 - fetch_total).abs() < 1000.0, "worker busy {busy} vs fetch spans {fetch_total}");
    assert_eq!(data["per_batch"].as_array().unwrap().len(), 16, "{data}");
    let rows = json["spans"].as_array().expect("spans");
    let row = |domain: &str, name: &str| {
        rows.iter().find(|r| r["domain"] == domain && r["name"] == name).map(|r| num(r, "count")).unwrap_or(0)
    };
    assert_eq!(row("mlprof.phase", "backward"), 16);
    assert!(row("PyTorch", "aten::conv2d") >= 16);
}

#[test]
fn user_sitecustomize_still_runs_under_torch() {
    if !require_torch() {
        return;
    }
    let dir = TempDir::new("torch-site");
    let site = dir.join("site");
    std::fs::create_dir(&site).unwrap();
    std::fs::write(site.join("sitecustomize.py"), "import os\nMARK = 'user-site:' + str(os.getpid())\n")
        .unwrap();
    let py = python().display().to_string();
    let code = "import os, sys, sitecustomize, mlprof_torch, torch\n\
                print(getattr(sitecustomize, 'MARK', 'missing'))\n\
                print('hookdir=' + os.path.dirname(mlprof_torch.__path__[0]))\n\
                print('finder', any(type(f).__name__ == '_Finder' for f in sys.meta_path))\n\
                print('path0', sys.path.index(%r) > [i for i, p in enumerate(sys.path) if 'mlprof-torch-' in p][0])\n";
    let code = code.replace("%r", &format!("{:?}", site.display().to_string()));
    let out = dir.join("run.bin");
    let site_str = site.display().to_string();
    let o = run_collect_env(
        &out,
        &["--torch"],
        &[py.as_str(), "-c", &code],
        &[("PYTHONPATH", site_str.as_str())],
        limit(),
    );
    assert!(o.status.success(), "{}", describe(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("user-site:"), "the user's sitecustomize did not run\n{}", describe(&o));
    assert!(stdout.contains("finder True"), "the hook is not installed\n{}", describe(&o));
    assert!(stdout.contains("path0 True"), "PYTHONPATH order: the hook first\n{}", describe(&o));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning: --torch"), "{}", describe(&o));
    // The hook's private directory is gone after the run.
    let hook_dir = stdout.lines().find_map(|l| l.strip_prefix("hookdir=")).expect("hook directory printed");
    assert!(hook_dir.contains("mlprof-torch-"), "{hook_dir}");
    assert!(!std::path::Path::new(hook_dir).exists(), "{hook_dir} still exists after the run");
}

/// A script that profiles itself (torch.profiler.profile with and without a schedule,
/// torch.autograd.profiler.profile, record_function, its own emit_itt) runs under --torch
/// exactly as without it: the same digest of what each profiler saw, the same exported trace;
/// mlprof keeps the phases throughout and the op ranges whenever the script's profiler is off.
#[test]
fn a_script_that_profiles_itself_runs_as_without_mlprof() {
    if !require_torch() {
        return;
    }
    let dir = TempDir::new("torch-selfprof");
    let py = python().display().to_string();
    let script = script("torch_self_profiling.py").display().to_string();
    let (bare_dir, torch_dir) = (dir.join("bare"), dir.join("torch"));
    std::fs::create_dir_all(&bare_dir).unwrap();
    std::fs::create_dir_all(&torch_dir).unwrap();
    let mut c = std::process::Command::new(&py);
    clean_env(&mut c).arg(&script).arg(&bare_dir);
    let bare = output_with_timeout(c, limit());
    assert!(bare.status.success(), "bare run\n{}", describe(&bare));
    let out = dir.join("run.bin");
    let o = run_collect_env(
        &out,
        &["--torch"],
        &[py.as_str(), &script, &torch_dir.display().to_string()],
        &[],
        limit(),
    );
    assert!(o.status.success(), "under --torch\n{}", describe(&o));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning: --torch"), "{}", describe(&o));
    let read = |d: &std::path::Path, f: &str| std::fs::read_to_string(d.join(f)).unwrap();
    assert_eq!(
        read(&torch_dir, "digest.json"),
        read(&bare_dir, "digest.json"),
        "what the script's profilers saw"
    );
    let x_events = |d: &std::path::Path| {
        let trace: Value = serde_json::from_str(&read(d, "plain.json")).unwrap();
        let events = trace.get("traceEvents").cloned().unwrap_or(trace);
        let mut names: BTreeMap<String, u64> = BTreeMap::new();
        for e in events.as_array().unwrap().iter().filter(|e| e["ph"] == "X") {
            *names.entry(e["name"].as_str().unwrap_or("").to_string()).or_default() += 1;
        }
        names
    };
    assert_eq!(x_events(&torch_dir), x_events(&bare_dir), "the script's own exported trace");
    let s = summary_json(&out);
    let rows = s["spans"].as_array().unwrap();
    let count = |domain: &str, name: &str| {
        rows.iter()
            .find(|r| r["domain"] == domain && r["name"] == name)
            .and_then(|r| r["count"].as_u64())
            .unwrap_or(0)
    };
    // 13 training steps in all (3 + 6 + 1 + 1 + 2): phases recorded throughout.
    assert_eq!(count("mlprof.phase", "backward"), 13, "phases");
    // Op ranges: the 5 steps when no profiler of the script ran (the scheduled wait step, the
    // 2 after the schedule, the 2 at the end) plus the one under the script's own emit_itt.
    assert_eq!(count("PyTorch", "my_step"), 6, "op ranges whenever the script's profiler is off");
}

#[test]
fn torch_itt_ranges_and_marks_without_torch_option() {
    if !require_torch() {
        return;
    }
    const N: u64 = 200;
    let dir = TempDir::new("torch-itt");
    let py = python().display().to_string();
    let script = script("torch_itt_ranges.py").display().to_string();
    let out = dir.join("run.bin");
    let o = run_collect_env(&out, &[], &[py.as_str(), &script, &N.to_string()], &[], limit());
    assert!(o.status.success(), "{}", describe(&o));
    let s = clean_summary(&out);
    let main = s.procs_with_cmdline("torch_itt_ranges.py")[0].pid();
    let trace = convert_trace(&out);
    let all = slices(&trace);
    let outer = spans(&all, "PyTorch", "mlprof.outer");
    let inner = spans(&all, "PyTorch", "mlprof.inner");
    let ticks = spans(&all, "PyTorch", "mlprof.tick");
    assert_eq!(outer.len() as u64, N, "outer ranges");
    assert_eq!(inner.len() as u64, N, "inner ranges");
    assert_eq!(ticks.len() as u64, N, "marks");
    assert!(outer.iter().chain(&inner).chain(&ticks).all(|s| s.pid == main));
    let base = outer[0].depth;
    for o in &outer {
        assert_eq!(o.depth, base, "outer depth {o:?}");
        let nested: Vec<_> = inner.iter().filter(|i| o.contains(i)).collect();
        assert_eq!(nested.len(), 1, "one inner range inside {o:?}");
        assert_eq!(nested[0].depth, base + 1, "inner depth {:?}", nested[0]);
    }
    assert!(ticks.iter().all(|t| t.depth == base), "marks at the outer level");
    // No --torch: no hook, so no phase or data spans and no op ranges.
    assert!(all.iter().all(|s| !s.cat.contains("mlprof.") && !s.name.starts_with("aten::")));
    let json = summary_json(&out);
    assert!(json["data_pipeline"].is_null());
    let rows = json["spans"].as_array().unwrap();
    let count =
        |name: &str| rows.iter().find(|r| r["name"] == name).and_then(|r| r["count"].as_u64()).unwrap_or(0);
    assert_eq!((count("mlprof.outer"), count("mlprof.inner"), count("mlprof.tick")), (N, N, N));
}

/// The fields of one CSV line (RFC 4180 quoting: `"a,b"`, `""` inside quotes).
fn csv_fields(line: &str) -> Vec<String> {
    let (mut fields, mut field, mut quoted, mut chars) =
        (Vec::new(), String::new(), false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// `--torch-shapes` on a small CNN: the aten::conv2d and aten::linear rows of `energy --json`
/// and `energy --ops --csv` carry the input shapes and dtypes the script used, with exact call
/// counts; under plain `--torch` nothing changes (no marker, no shapes).
#[test]
fn torch_shapes_on_a_small_cnn() {
    if !require_torch() {
        return;
    }
    let dir = TempDir::new("torch-shapes");
    let py = python().display().to_string();
    let script = script("torch_shapes_cnn.py").display().to_string();
    let mlprof = |args: &[&str]| {
        let mut c = std::process::Command::new(&bins().mlprof);
        clean_env(&mut c).args(args);
        let o = output_with_timeout(c, limit());
        assert!(o.status.success(), "mlprof {args:?}\n{}", describe(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // (op, shapes, dtypes) → calls, from the energy report's spans.
    let rows = |bin: &str| -> BTreeMap<(String, String, String), u64> {
        let json: Value = serde_json::from_str(&mlprof(&["energy", "--json", bin])).expect("energy JSON");
        let mut rows = BTreeMap::new();
        for s in json["spans"].as_array().expect("spans") {
            let name = s["name"].as_str().unwrap_or("");
            if name == "aten::conv2d" || name == "aten::linear" {
                let text = |k: &str| s[k].as_str().unwrap_or_else(|| panic!("{k} in {s}")).to_string();
                rows.insert((name.to_string(), text("shapes"), text("dtypes")), s["calls"].as_u64().unwrap());
            }
        }
        rows
    };
    let f32s = |n: usize| vec!["float32"; n].join(";");
    let row = |op: &str, shapes: &str, dtypes: String, calls: u64| {
        ((op.to_string(), shapes.to_string(), dtypes), calls)
    };

    let shaped = dir.join("shapes.bin");
    let o =
        run_collect_env(&shaped, &["--torch-shapes", "--no-energy"], &[py.as_str(), &script], &[], limit());
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("--torch hook"),
        "the hook warned\n{}",
        describe(&o)
    );
    let bin = shaped.display().to_string();
    let want: BTreeMap<_, _> = [
        row("aten::conv2d", "[2,3,16,16];[8,3,3,3]", f32s(2), 3),
        row("aten::conv2d", "[4,3,16,16];[8,3,3,3]", f32s(2), 5),
        row("aten::linear", "[2,2048];[2,2048];[2]", f32s(3), 3),
        row("aten::linear", "[4,2048];[2,2048];[2]", f32s(3), 5),
    ]
    .into_iter()
    .collect();
    assert_eq!(rows(&bin), want);
    let csv = mlprof(&["energy", "--ops", "--csv", &bin]);
    let mut conv: Vec<(String, String)> = csv
        .lines()
        .map(csv_fields)
        .filter(|f| f[2] == "aten::conv2d")
        .map(|f| (f[4].clone(), f[5].clone()))
        .collect();
    conv.sort();
    let want_csv = [("[2,3,16,16];[8,3,3,3]", "3"), ("[4,3,16,16];[8,3,3,3]", "5")];
    assert_eq!(conv, want_csv.map(|(s, n)| (s.to_string(), n.to_string())), "{csv}");

    let plain = dir.join("plain.bin");
    let o = run_collect_env(&plain, &["--torch", "--no-energy"], &[py.as_str(), &script], &[], limit());
    assert!(o.status.success(), "{}", describe(&o));
    let bin = plain.display().to_string();
    let want: BTreeMap<_, _> =
        [row("aten::conv2d", "", String::new(), 8), row("aten::linear", "", String::new(), 8)]
            .into_iter()
            .collect();
    assert_eq!(rows(&bin), want);
    assert!(summary_json(&plain)["calls"].get("itt_marker").is_none(), "no shape markers without the flag");
}

/// The hook's ITT calls both ways, builtins over libmlprof.so and the ctypes fallback, give the
/// same tasks, ids, nesting and markers; a builtin given what is not an integer raises
/// TypeError and records nothing (an all-ones error value once reached the ITT entry point as
/// an address). Needs only Python, not torch.
#[test]
fn the_hooks_itt_calls_record_alike_through_builtins_and_ctypes() {
    let dir = TempDir::new("itt-builtins");
    let py = python().display().to_string();
    let script = script("itt_builtins.py").display().to_string();
    let out = dir.join("run.bin");
    let o = run_collect_env(&out, &[], &[py.as_str(), &script], &[], limit());
    assert!(o.status.success(), "{}", describe(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("itt_builtins: ok"), "{}", describe(&o));
    let s = clean_summary(&out);
    let mut e = s.expect();
    e.eq("markers, one each way", s.calls().count("itt_marker"), 2);
    let all = slices(&convert_trace(&out));
    for way in ["builtins", "ctypes"] {
        let outer = spans(&all, "mlprof.phase", &format!("via.{way}"));
        let inner = spans(&all, "mlprof.phase", &format!("via.{way}.inner"));
        let ids: Vec<u64> = outer.iter().map(|t| t.id).collect();
        e.eq(format_args!("{way}: tasks"), outer.len() as u64, 3)
            .eq(format_args!("{way}: inner tasks"), inner.len() as u64, 3)
            .that(format_args!("{way}: ids {ids:?} are 1, 2, 3"), ids == [1, 2, 3])
            .that(
                format_args!("{way}: each inner task inside its task, one level down"),
                outer
                    .iter()
                    .all(|t| inner.iter().filter(|i| t.contains(i) && i.depth == t.depth + 1).count() == 1),
            );
    }
    e.finish();
}
