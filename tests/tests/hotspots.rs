//! Sampled stacks (`mlprof-collect --sample`) and `mlprof hotspots` (issue 37): a C library
//! with two hot functions, built -O2 -fomit-frame-pointer, called inside ITT tasks from a C
//! program and from Python through ctypes; each task's samples have its own hot function as
//! the leaf and its non-inlined caller (found by DWARF unwinding) above it.

use std::path::Path;

use mlprof_tests::*;
use serde_json::Value;

/// Milliseconds of CPU each task spends: ~150 samples at 499 Hz.
const MS: &str = "300";

/// `mlprof hotspots --json` of `run`.
fn hotspots(run: &Path) -> Value {
    let o = mlprof_ok(&["hotspots", "--json", "--top", "50", &run.display().to_string()]);
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Checks each task's samples in `report`: at least 50, ≥ 90 % with its hot function as leaf
/// (self), ≥ 90 % with its caller in the stack (total).
fn check_tasks(e: &mut Expect<'_>, report: &Value, how: &str) {
    for (task, hot, caller) in [("alpha", "hot_alpha", "run_alpha"), ("beta", "hot_beta", "run_beta")] {
        let span = report["spans"].as_array().and_then(|s| s.iter().find(|s| s["span"] == task));
        let Some(span) = span else {
            e.that(format_args!("{how}: no span {task} in {report}"), false);
            continue;
        };
        let samples = span["samples"].as_u64().unwrap_or(0);
        let count = |name: &str, key: &str| {
            span["functions"]
                .as_array()
                .and_then(|f| f.iter().find(|f| f["function"] == name && f["module"] == "libhot_tasks.so"))
                .and_then(|f| f[key].as_u64())
                .unwrap_or(0)
        };
        let (leaf, called) = (count(hot, "self"), count(caller, "total"));
        e.that(format_args!("{how}: {task}: {samples} samples (want ≥ 50)"), samples >= 50);
        e.that(
            format_args!("{how}: {task}: {leaf} of {samples} with {hot} as leaf"),
            leaf * 10 >= samples * 9,
        );
        e.that(
            format_args!("{how}: {task}: {called} of {samples} under {caller}"),
            called * 10 >= samples * 9,
        );
    }
}

#[test]
fn c_tasks_have_their_hot_functions_and_callers() {
    let dir = TempDir::new("hotspots-c");
    let (_, program) = hot_tasks_program(&dir);
    let out = dir.join("run.bin");
    let o = run_collect(&out, &["--sample"], &[program.as_str(), MS]);
    assert!(o.status.success(), "hot_tasks failed under --sample\n{}", describe(&o));
    let report = hotspots(&out);
    let summary = clean_summary(&out);
    let mut e = summary.expect();
    e.that(format_args!("lost {}", report["lost"]), report["lost"] == 0);
    e.that(format_args!("rate {}", report["hz"]), report["hz"] == 499);
    check_tasks(&mut e, &report, "C");
    e.finish();
}

#[test]
fn python_tasks_through_ctypes_have_their_hot_functions_and_callers() {
    if !require_python_modules(&["ittapi"]) {
        return;
    }
    let dir = TempDir::new("hotspots-py");
    let (lib, _) = hot_tasks_program(&dir);
    let out = dir.join("run.bin");
    let cmd = [python().display().to_string(), script("hot_tasks.py").display().to_string(), lib, MS.into()];
    let o = run_collect(&out, &["--sample=499"], &cmd);
    assert!(o.status.success(), "hot_tasks.py failed under --sample\n{}", describe(&o));
    let report = hotspots(&out);
    let summary = clean_summary(&out);
    let mut e = summary.expect();
    check_tasks(&mut e, &report, "Python");
    // The folded stacks name the task first and the hot function last.
    let o = mlprof_ok(&["hotspots", "--folded", &out.display().to_string()]);
    let folded = String::from_utf8_lossy(&o.stdout);
    let line = folded.lines().find(|l| l.starts_with("alpha;") && l.contains(";run_alpha;hot_alpha "));
    e.that(format_args!("a folded alpha;…;run_alpha;hot_alpha line in\n{folded}"), line.is_some());
    e.finish();
}
