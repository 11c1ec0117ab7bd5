//! Native callers as call sites (`mlprof-collect --sites` on threads that run no Python): a C
//! program and a library of its, built -O2 without frame pointers (tests/programs/native_sites.c),
//! make known numbers of calls from known functions; each function is a site named by module and
//! function, with exact counts, and failing calls keep their errno.

use mlprof_tests::*;
use serde_json::Value;

/// A site's calls: (function name, count, errors).
type Calls = Vec<(String, u64, u64)>;

/// The calls of the native site of `function` in `module`.
fn native_calls(sites: &[Value], module: &str, function: &str) -> Option<Calls> {
    let site =
        sites.iter().find(|s| s["native"] == true && s["file"] == module && s["function"] == function)?;
    let calls = site["calls"].as_object()?;
    Some(
        calls
            .iter()
            .map(|(name, c)| {
                (name.clone(), c["count"].as_u64().unwrap_or(0), c["errors"].as_u64().unwrap_or(0))
            })
            .collect(),
    )
}

/// Builds the program and its library in `dir`: (program, library).
fn build(dir: &TempDir) -> (String, String) {
    let lib = dir.join("libnative_sites.so").display().to_string();
    let lib_src = tests_dir().join("programs/native_sites_lib.c").display().to_string();
    gcc(&["-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-o", &lib, &lib_src]);
    let program = dir.join("native_sites").display().to_string();
    let src = tests_dir().join("programs/native_sites.c").display().to_string();
    let (libdir, rpath) = (format!("-L{}", dir.str()), format!("-Wl,-rpath,{}", dir.str()));
    gcc(&[
        "-O2",
        "-fomit-frame-pointer",
        "-pthread",
        "-U_FORTIFY_SOURCE",
        "-Wall",
        "-o",
        &program,
        &src,
        &libdir,
        "-lnative_sites",
        &rpath,
    ]);
    (program, lib)
}

/// Runs the program under `--sites` into `out`, making `n` calls of each kind.
fn run(out: &std::path::Path, program: &str, dir: &TempDir, n: u64) {
    let o = run_collect(out, &["--sites"], &[program, &dir.str(), &n.to_string()]);
    // Exit 3 would be a close whose errno the hook changed.
    assert!(o.status.success(), "native_sites failed under --sites\n{}", describe(&o));
}

#[test]
fn a_c_programs_calls_name_their_native_callers() {
    const N: u64 = 9;
    let dir = TempDir::new("native-sites");
    let (program, lib) = build(&dir);
    let out = dir.join("run.bin");
    run(&out, &program, &dir, N);
    let summary = clean_summary(&out);
    let sites = summary.json["sites"].as_array().cloned().unwrap_or_default();
    // The loader names the program by its real path, the library by the path it loaded.
    let program_path = std::fs::canonicalize(&program).unwrap().display().to_string();
    let mut e = summary.expect();
    let want: [(&str, &str, Calls); 4] = [
        (&program_path, "writes_here", vec![("write".into(), N, 0)]),
        (&lib, "reads_in_lib", vec![("read".into(), N, 0)]),
        (&program_path, "thread_body", vec![("write".into(), N + 1, 0)]),
        (&program_path, "closes_that_fail", vec![("close".into(), N, N)]),
    ];
    for (module, function, calls) in want {
        let got = native_calls(&sites, module, function);
        e.that(format_args!("{module} {function}: {got:?}, want {calls:?}"), got.as_ref() == Some(&calls));
    }
    let main = native_calls(&sites, &program_path, "main").unwrap_or_default();
    let count = |name: &str| main.iter().find(|c| c.0 == name).map(|c| c.1);
    e.that(
        format_args!("main's opens and closes: {main:?}"),
        count("open") == Some(2) && count("close") == Some(2),
    );
    // Every call had its caller found.
    e.that(
        format_args!("sites_missing {}", summary.json["sites_missing"]),
        summary.json["sites_missing"] == 0,
    );
    let text = mlprof_ok(&["summary", "--sites", &out.display().to_string()]);
    let text = String::from_utf8_lossy(&text.stdout);
    e.that(
        format_args!("the text names the library's function:\n{text}"),
        text.contains(&format!("{lib} reads_in_lib — {N} read")),
    );
    e.finish();
}

/// `mlprof merge` of two runs (as two nodes) keeps their sites: one site per function, the
/// calls of both runs.
#[test]
fn merged_runs_keep_their_native_sites() {
    let dir = TempDir::new("native-sites-merge");
    let (program, lib) = build(&dir);
    let (a, b, merged) = (dir.join("a.bin"), dir.join("b.bin"), dir.join("merged.bin"));
    run(&a, &program, &dir, 5);
    run(&b, &program, &dir, 7);
    mlprof_ok(&[
        "merge",
        &a.display().to_string(),
        &b.display().to_string(),
        "-o",
        &merged.display().to_string(),
    ]);
    let summary = clean_summary(&merged);
    let sites = summary.json["sites"].as_array().cloned().unwrap_or_default();
    let program_path = std::fs::canonicalize(&program).unwrap().display().to_string();
    let mut e = summary.expect();
    let reads = native_calls(&sites, &lib, "reads_in_lib");
    e.that(format_args!("reads_in_lib {reads:?}"), reads == Some(vec![("read".into(), 12, 0)]));
    let closes = native_calls(&sites, &program_path, "closes_that_fail");
    e.that(format_args!("closes_that_fail {closes:?}"), closes == Some(vec![("close".into(), 12, 12)]));
    let functions = sites.iter().filter(|s| s["function"] == "writes_here").count();
    e.that(format_args!("writes_here is one site, not one per node: {functions}"), functions == 1);
    e.finish();
}
