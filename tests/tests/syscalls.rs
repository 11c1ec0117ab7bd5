//! Issue 16: the metadata, directory, descriptor, space/copy, terminal and loader hooks, with
//! exact counts per function and per file, and `mlprof summary --syscalls --json` held against
//! `strace -f` on the same program (tests/programs/metadata.c).

use mlprof_tests::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

const N: u64 = 20;

/// `mlprof summary --syscalls --json RUN`, parsed.
fn syscalls_json(run_bin: &std::path::Path) -> Value {
    let mut c = Command::new(&bins().mlprof);
    clean_env(&mut c);
    c.arg("summary").arg("--syscalls").arg("--json").arg(run_bin);
    let out = output_with_timeout(c, default_timeout());
    assert!(out.status.success(), "mlprof summary --syscalls --json failed\n{}", describe(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "summary --syscalls --json printed invalid JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Every hooked call of metadata.c, counted exactly per function (with its failures), per
/// file (duplicated descriptors keep their file's name, `*at` paths are joined to their
/// directory), and the dlopen spans with their library's path and time.
#[test]
fn metadata_directory_descriptor_and_loader_calls() {
    let run = run_program("metadata", &[&N.to_string()]);
    let (s, dir) = (&run.summary, &run.dir);
    let p = s.proc_exact(&run.cmdline);
    let calls = p.calls();
    let mut e = s.expect();
    // (function, calls, failed calls): see the table at the top of tests/programs/metadata.c.
    let expected: &[(&str, u64, u64)] = &[
        ("mkdir", 2, 1),
        ("open", N + 4, 0),
        ("write", N + 6, 2),
        ("close", N + 7, 0),
        ("stat", N + 1, 1),
        ("lstat", 1, 0),
        ("fstatat", 2, 1),
        ("fstat", 2, 1),
        ("statx", 1, 0),
        ("__xstat", 1, 0),
        ("__lxstat", 1, 0),
        ("__fxstat", 1, 0),
        ("__fxstatat", 1, 0),
        ("access", 2, 1),
        ("faccessat", 1, 0),
        ("opendir", 1, 0),
        ("fdopendir", 1, 0),
        ("readdir", N + 3, 0),
        ("readdir64", N + 3, 0),
        ("closedir", 2, 0),
        ("getdents64", 2, 0),
        ("dup", 2, 1),
        ("dup2", 1, 0),
        ("dup3", 1, 0),
        ("fcntl", 2, 0),
        ("ftruncate", 1, 0),
        ("fallocate", 1, 0),
        ("posix_fallocate", 1, 0),
        ("posix_fadvise", 2, 1),
        ("sync_file_range", 1, 0),
        ("sendfile", 1, 0),
        ("copy_file_range", 1, 0),
        ("isatty", 1, 1),
        ("tcgetattr", 1, 1),
        ("rename", 1, 0),
        ("renameat", 1, 0),
        ("unlinkat", 1, 0),
        ("unlink", N + 1, 1),
        ("mkdirat", 1, 0),
        ("rmdir", 3, 1),
        ("dlopen", 2, 1),
        ("dlclose", 1, 0),
    ];
    for &(f, count, errors) in expected {
        e.eq(format_args!("metadata: {f} calls"), calls.count(f), count);
        e.eq(format_args!("metadata: {f} errors"), calls.errors(f), errors);
    }
    // Nothing else was recorded: the program makes no other hooked call.
    let known: Vec<&str> = expected.iter().map(|(f, _, _)| *f).collect();
    for (f, n) in calls.counts() {
        e.that(format_args!("metadata: unexpected {f} x{n}"), known.contains(&f.as_str()));
    }
    e.eq("metadata: bytes written", calls.bytes("write"), 16 * (N + 4));

    // f0: opened twice, written once plainly and once through each of its 4 duplicates.
    let f0 = dir.file("d/f0");
    e.file(
        s.file(&f0),
        2,
        &[
            ("write", 5),
            ("dup", 1),
            ("dup2", 1),
            ("dup3", 1),
            ("fcntl", 2),
            ("close", 6),
            ("stat", 1),
            ("lstat", 1),
            ("fstatat", 1),
            ("statx", 1),
            ("__xstat", 1),
            ("__lxstat", 1),
            ("__fxstatat", 1),
            ("access", 1),
            ("faccessat", 1),
            ("ftruncate", 1),
            ("fallocate", 1),
            ("posix_fallocate", 1),
            ("posix_fadvise", 1),
            ("sync_file_range", 1),
            ("isatty", 1),
            ("tcgetattr", 1),
            ("unlink", 1),
        ],
        0,
        80,
    );
    for k in 1..N {
        let f = dir.file(&format!("d/f{k}"));
        e.file(s.file(&f), 1, &[("open", 1), ("write", 1), ("close", 1), ("stat", 1), ("unlink", 1)], 0, 16);
    }
    let d = dir.file("d");
    e.file(
        s.file(&d),
        2,
        &[
            ("mkdir", 2),
            ("opendir", 1),
            ("fdopendir", 1),
            ("readdir", N + 3),
            ("readdir64", N + 3),
            ("closedir", 2),
            ("getdents64", 2),
            ("fstat", 1),
            ("__fxstat", 1),
            ("rmdir", 1),
        ],
        0,
        0,
    );
    let copy = dir.file("d/copy");
    e.file(s.file(&copy), 1, &[("sendfile", 1), ("copy_file_range", 1), ("rename", 1), ("close", 1)], 0, 0);
    e.file(s.file(&dir.file("d/copy2")), 0, &[("renameat", 1)], 0, 0);
    e.file(s.file(&dir.file("d/copy3")), 0, &[("unlinkat", 1)], 0, 0);
    e.file(s.file(&dir.file("d/e")), 0, &[("mkdirat", 1), ("rmdir", 2)], 0, 0);
    e.file(
        s.file(&dir.file("d/missing")),
        0,
        &[("stat", 1), ("fstatat", 1), ("access", 1), ("unlink", 1)],
        0,
        0,
    );
    e.file(s.file("libm.so.6"), 0, &[("dlopen", 1)], 0, 0);
    e.file(s.file(&dir.file("nonexistent.so")), 0, &[("dlopen", 1)], 0, 0);
    e.that("metadata: dlopen spans have a duration", calls.total_ns("dlopen") > 0);

    // The start-up section: the whole life (no training step), with the two library loads.
    let json = summary_json(&dir.join("run.bin"));
    let startup = json.get("startup").and_then(Value::as_array).cloned().unwrap_or_default();
    e.eq("metadata: start-up entries", startup.len() as u64, 1);
    if let Some(st) = startup.first() {
        let loads = st.pointer("/library_loads/count").and_then(Value::as_u64).unwrap_or(0);
        e.eq("metadata: start-up library loads", loads, 2);
        let libs = st.get("libraries").and_then(Value::as_array).map(|l| l.len()).unwrap_or(0);
        e.eq("metadata: start-up libraries", libs as u64, 2);
    }
    e.exit_code("metadata", p, 0);
    e.finish();
}

/// `strace -f` counts of each system call between the program's markers (`write(-1,
/// "MLPROF_MARK1")` .. `write(-1, "MLPROF_MARK2")`), both included: `name -> (calls, errors)`.
fn strace_counts(trace: &str) -> BTreeMap<String, (u64, u64)> {
    let mut counts = BTreeMap::new();
    let mut on = false;
    for line in trace.lines() {
        // `-f` prefixes each line with the pid.
        let line = line.trim_start_matches(|c: char| c.is_ascii_digit()).trim_start();
        if line.contains("MLPROF_MARK1") {
            on = true;
        }
        let name = line.split('(').next().filter(|n| !n.is_empty() && !n.contains(' '));
        if on
            && !line.starts_with("+++")
            && !line.starts_with("---")
            && let Some(name) = name
        {
            let entry = counts.entry(name.to_string()).or_insert((0, 0));
            entry.0 += 1;
            if line.contains(" = -1 ") {
                entry.1 += 1;
            }
        }
        if line.contains("MLPROF_MARK2") {
            break;
        }
    }
    counts
}

/// The strace-shaped view folds each recorded libc call into the system calls it makes; on
/// metadata.c every system call in it must equal strace's count and errors exactly, and every
/// system call strace saw between the markers must be in it, except malloc's own (`brk`,
/// `getrandom`: opendir allocates its stream; memory, not I/O, and never hooked).
#[test]
fn syscalls_view_matches_strace() {
    if !require_program("strace", "the reference counts of the strace-shaped view") {
        return;
    }
    let dir = TempDir::new("syscalls-strace");
    let prog = compile("metadata", &dir);
    let d = dir.str();

    let trace = dir.join("strace.txt");
    let mut c = Command::new("strace");
    clean_env(&mut c).arg("-f").arg("-o").arg(&trace).arg(&prog).arg(&d).arg(N.to_string());
    let o = output_with_timeout(c, default_timeout());
    if !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("PTRACE_TRACEME") {
        skip(format!("strace cannot trace here (ptrace refused): {}", describe(&o)));
        return;
    }
    assert!(o.status.success(), "strace -f metadata failed\n{}", describe(&o));
    let text = std::fs::read_to_string(&trace).expect("strace output");
    let reference = strace_counts(&text);
    assert!(reference.contains_key("newfstatat"), "no newfstatat between the markers:\n{text}");

    let out = dir.join("run.bin");
    run_collect_ok(&out, &[&prog, &d, &N.to_string()]);
    let summary = clean_summary(&out);
    let view = syscalls_json(&out);
    let table = view.get("syscalls").and_then(Value::as_object).expect("\"syscalls\" object");
    let mut e = summary.expect();
    for (name, stat) in table {
        let count = stat.get("count").and_then(Value::as_u64).unwrap_or(u64::MAX);
        let errors = stat.get("errors").and_then(Value::as_u64).unwrap_or(u64::MAX);
        e.that(
            format_args!("{name}: total_ns present"),
            stat.get("total_ns").and_then(Value::as_u64).is_some(),
        );
        let (want, want_err) = reference.get(name).copied().unwrap_or((0, 0));
        e.eq(format_args!("{name}: calls (strace {want})"), count, want);
        e.eq(format_args!("{name}: errors (strace {want_err})"), errors, want_err);
    }
    for (name, (n, _)) in &reference {
        let invisible = ["brk", "getrandom"].contains(&name.as_str());
        e.that(
            format_args!("strace saw {name} x{n} between the markers; the view has none"),
            invisible || table.contains_key(name),
        );
    }
    // dlopen/dlclose are listed apart: the loader's system calls inside them are its own.
    e.eq("not_folded.dlopen", view.pointer("/not_folded/dlopen").and_then(Value::as_u64).unwrap_or(0), 2);
    e.eq("not_folded.dlclose", view.pointer("/not_folded/dlclose").and_then(Value::as_u64).unwrap_or(0), 1);
    e.finish();
}
