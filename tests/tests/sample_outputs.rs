//! Sampled stacks (`mlprof-collect --sample`, issue 37) in the two outputs besides `mlprof
//! hotspots`: the Perfetto trace of `mlprof convert` (PerfSample packets with interned
//! callstacks, decoded with Perfetto's published protos by tests/scripts/perfetto_check.py)
//! and the `samples` table of `mlprof export --parquet` (queried with DuckDB). One run of the
//! C program of tests/tests/hotspots.rs (ITT tasks "alpha" and "beta" around the hot functions
//! of libhot_tasks.so), checked against `mlprof hotspots --json` of the same run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use mlprof_tests::*;
use serde_json::Value;

/// Milliseconds of CPU each task spends: ~150 samples at 499 Hz.
const MS: &str = "300";

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// `python -c CODE` (the mlprof environment's), which must succeed: its stdout as JSON.
fn python_json(code: &str) -> Value {
    let mut c = Command::new(python());
    clean_env(&mut c).args(["-c", code]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "{} -c failed\n{}", python().display(), describe(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bad output: {e}\n{}", describe(&o)))
}

/// The run's samples per span, as `mlprof hotspots --json` counts them.
fn hotspots_per_span(hotspots: &Value) -> BTreeMap<String, u64> {
    let spans = hotspots["spans"].as_array().expect("spans");
    spans.iter().map(|s| (s["span"].as_str().unwrap().to_string(), s["samples"].as_u64().unwrap())).collect()
}

/// Every sample is a PerfSample of the trace; in each task's time range on its thread, ≥ 90 %
/// of the samples have the task's hot function as the leaf of their interned callstack.
fn check_perfetto(e: &mut Expect<'_>, run: &Path, samples: u64) {
    let trace = run.with_extension("pftrace");
    let o = mlprof_ok(&["convert", &s(run), "-o", &s(&trace)]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    e.that(
        format_args!("convert says how many samples it wrote: {stderr}"),
        stderr.contains(&format!("and {samples} CPU samples to")),
    );
    let mut c = Command::new(python());
    clean_env(&mut c).arg(script("perfetto_check.py")).arg(&trace).arg("--samples");
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "perfetto_check.py failed\n{}", describe(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    e.that(format_args!("checker errors: {}", report["errors"]), report["error_count"] == 0);
    e.that(
        format_args!("{} perf_sample packets, {samples} samples in the run", report["perf_samples"]),
        report["perf_samples"] == samples,
    );
    let listed = report["samples"].as_array().unwrap();
    for (task, hot) in [("alpha", "hot_alpha"), ("beta", "hot_beta")] {
        let slice = report["itt_slices"].as_array().unwrap().iter().find(|s| s[2] == task);
        let Some(slice) = slice else {
            e.that(format_args!("no ITT slice {task} in the trace"), false);
            continue;
        };
        let (pid, tid) = (&slice[0], &slice[1]);
        let (start, dur) = (slice[3].as_u64().unwrap(), slice[4].as_u64().unwrap());
        let inside: Vec<&Value> = listed
            .iter()
            .filter(|x| &x[1] == pid && &x[2] == tid)
            .filter(|x| (start..start + dur).contains(&x[0].as_u64().unwrap()))
            .collect();
        let leaf_is_hot = inside
            .iter()
            .filter(|x| x[3].as_array().and_then(|frames| frames.last()).is_some_and(|leaf| leaf == hot))
            .count();
        e.that(
            format_args!("{task}: {} samples in its time range (want ≥ 50)", inside.len()),
            inside.len() >= 50,
        );
        e.that(
            format_args!("{task}: {leaf_is_hot} of {} with {hot} as leaf of their callstack", inside.len()),
            leaf_is_hot * 10 >= inside.len() * 9,
        );
    }
}

/// The `samples` table has a row per sample, and DuckDB's count per span is hotspots'.
fn check_parquet(e: &mut Expect<'_>, run: &Path, samples: u64, per_span: &BTreeMap<String, u64>) {
    let dir = run.with_file_name("parquet");
    let o = mlprof_ok(&["export", "--parquet", &s(&dir), &s(run)]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    e.that(
        format_args!("export lists the samples table: {stderr}"),
        stderr.contains(&format!("samples {samples},")),
    );
    let query = format!(
        "import duckdb, json\n\
         src = \"read_parquet('{}/samples/**/*.parquet', hive_partitioning=1)\"\n\
         rows = duckdb.sql(f\"select coalesce(span, '(outside any span)'), count(*) from {{src}} group by all\").fetchall()\n\
         total = duckdb.sql(f\"select count(*) from {{src}}\").fetchall()[0][0]\n\
         hot = duckdb.sql(f\"select span, count(*) from {{src}} where leaf_function = 'hot_' || span \
         and leaf_module = 'libhot_tasks.so' and stack like '%;run_' || span || ';hot_' || span group by all\").fetchall()\n\
         print(json.dumps({{'total': total, 'per_span': dict(rows), 'hot': dict(hot)}}))",
        dir.display()
    );
    let got = python_json(&query);
    e.that(format_args!("{} rows, {samples} samples", got["total"]), got["total"] == samples);
    let duckdb: BTreeMap<String, u64> =
        got["per_span"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect();
    e.that(format_args!("per span: DuckDB {duckdb:?}, hotspots {per_span:?}"), &duckdb == per_span);
    // The leaf and the folded stack name the hot function under its caller, as in hotspots.
    for task in ["alpha", "beta"] {
        let (hot, all) = (got["hot"][task].as_u64().unwrap_or(0), per_span.get(task).copied().unwrap_or(0));
        e.that(format_args!("{task}: {hot} of {all} rows end in run_{task};hot_{task}"), hot * 10 >= all * 9);
    }
}

#[test]
fn samples_reach_the_perfetto_trace_and_the_parquet_table() {
    if !require_python_modules(&["duckdb", "perfetto"]) {
        return;
    }
    let dir = TempDir::new("sample-outputs");
    let (_, program) = hot_tasks_program(&dir);
    let run = dir.join("run.bin");
    let o = run_collect(&run, &["--sample=499"], &[program.as_str(), MS]);
    assert!(o.status.success(), "hot_tasks failed under --sample\n{}", describe(&o));
    let o = mlprof_ok(&["hotspots", "--json", &s(&run)]);
    let hotspots: Value = serde_json::from_slice(&o.stdout).unwrap();
    let samples = hotspots["samples"].as_u64().unwrap();
    let per_span = hotspots_per_span(&hotspots);
    let summary = clean_summary(&run);
    let mut e = summary.expect();
    e.that(
        format_args!("hotspots' spans hold {per_span:?}, the run {samples} samples"),
        samples >= 100 && per_span.values().sum::<u64>() == samples,
    );
    check_perfetto(&mut e, &run, samples);
    check_parquet(&mut e, &run, samples, &per_span);
    e.finish();
}
