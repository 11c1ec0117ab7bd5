//! C programs (tests/programs/*.c) run under the launcher,
//! `mlprof-collect --out run.bin -- PROGRAM ARGS`, with exact per-process and
//! per-file counts checked in `mlprof summary --json`.

use mlprof_tests::*;
use serde_json::Value;

/// Launcher-mode run of a compiled program; returns the clean summary.
fn launch(dir: &TempDir, argv: &[String]) -> Summary {
    let out = dir.join("run.bin");
    run_collect_ok(&out, argv);
    clean_summary(&out)
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// Threads in a process and in its forked child (forked while the parent's
/// threads are running): open/write/pread/ioctl/close/clock_gettime counts
/// per process, per file and for the whole tree.
#[test]
fn threads_and_fork() {
    const T: u64 = 4;
    const I: u64 = 300;
    let run = run_program("threads_fork", &[&T.to_string(), &I.to_string()]);
    let (s, dir) = (&run.summary, &run.dir);
    let mut e = s.expect();
    let (parent, child) = run.parent_and_forked_child(&mut e);
    let per_proc = [
        ("open", T),
        ("write", T * I),
        ("pread", T * I),
        ("ioctl", T * I),
        ("close", T),
        ("clock_gettime", T * I),
    ];
    let bytes = [("write", 100 * T * I), ("pread", 50 * T * I)];
    e.calls("parent", parent.calls(), &per_proc, &bytes);
    e.calls("child", child.calls(), &per_proc, &bytes);
    let tree: Vec<(&str, u64)> = per_proc.iter().map(|(f, n)| (*f, 2 * n)).collect();
    e.calls("tree", s.calls(), &tree, &[("write", 200 * T * I), ("pread", 100 * T * I)]);
    for role in ['p', 'c'] {
        for t in 0..T {
            let f = s.file(&dir.file(&format!("{role}{t}.dat")));
            e.file(f, 1, &[("write", I), ("pread", I)], 50 * I, 100 * I);
        }
    }
    e.exit_code("parent", parent, 0);
    e.finish();
}

/// vfork + calls in the vfork child (open/write/dup2/close on the parent's
/// memory and TLS) + exec: nothing of the vfork child may land in the
/// parent; the exec'd image is its own process entry.
#[test]
fn vfork_exec() {
    spawn_test("vfork", 10, 13);
}

/// posix_spawn of a child image that does its own known work.
#[test]
fn posix_spawn() {
    spawn_test("posix_spawn", 11, 17);
}

fn spawn_test(mode: &str, n: u64, m: u64) {
    let dir = TempDir::new(&format!("spawn-{mode}"));
    let prog = compile("spawn", &dir);
    let d = dir.str();
    let (ns, ms) = (n.to_string(), m.to_string());
    let s = launch(&dir, &argv(&[&prog, mode, &d, &ns, &ms]));

    let parent = s.proc_exact(&format!("{prog} {mode} {d} {n} {m}"));
    let child = s.proc_exact(&format!("{prog} child {d} {n} {m}"));
    let mut e = s.expect();
    e.calls("parent", parent.calls(), &[("open", 1), ("write", n), ("close", 1)], &[("write", 64 * n)]);
    e.calls("child image", child.calls(), &[("open", 1), ("write", m), ("close", 1)], &[("write", 64 * m)]);
    e.that(
        format_args!("child ppid {} == parent pid {}", child.ppid(), parent.pid()),
        child.ppid() == parent.pid() && child.pid() != parent.pid(),
    );
    e.file(s.file(&dir.file("parent.dat")), 1, &[("write", n)], 0, 64 * n);
    e.file(s.file(&dir.file("child.dat")), 1, &[("write", m)], 0, 64 * m);
    e.exit_code("parent", parent, 0);
    e.finish();
}

/// A execs B execs C in one pid; each image writes a distinct count to its
/// own file and shows as its own process entry with its own cmdline.
#[test]
fn exec_chain() {
    const N: u64 = 7;
    let run = run_program("exec_chain", &["A", &N.to_string()]);
    let (s, dir, prog, d) = (&run.summary, &run.dir, &run.prog, run.dir.str());
    let mut e = s.expect();
    let images: Vec<_> =
        ["A", "B", "C"].iter().map(|st| s.proc_exact(&format!("{prog} {d} {st} {N}"))).collect();
    for (k, (st, p)) in ["A", "B", "C"].iter().zip(&images).enumerate() {
        let w = N * (k as u64 + 1);
        e.calls(
            &format!("image {st}"),
            p.calls(),
            &[("open", 1), ("write", w), ("close", 1)],
            &[("write", 64 * w)],
        );
        e.file(s.file(&dir.file(&format!("{st}.dat"))), 1, &[("write", w)], 0, 64 * w);
        e.that(
            format_args!("image {st} pid {} == image A pid {}", p.pid(), images[0].pid()),
            p.pid() == images[0].pid(),
        );
    }
    e.calls("tree", s.calls(), &[("open", 3), ("write", 6 * N), ("close", 3)], &[]);
    e.exit_code("image C", images[2], 0);
    e.finish();
}

/// A forked child that writes N times and calls _exit(3) without closing:
/// every write must be recorded although no exit handler runs.
#[test]
fn child_exit_without_handlers() {
    const N: u64 = 500;
    let run = run_program("exit_child", &[&N.to_string()]);
    let (s, dir) = (&run.summary, &run.dir);
    let mut e = s.expect();
    let (parent, child) = run.parent_and_forked_child(&mut e);
    e.calls("child", child.calls(), &[("open", 1), ("write", N), ("close", 0)], &[("write", 64 * N)]);
    e.calls("parent", parent.calls(), &[("open", 0), ("write", 0), ("close", 0)], &[]);
    e.file(s.file(&dir.file("exit.dat")), 1, &[("write", N)], 0, 64 * N);
    e.exit_code("child", child, 3);
    e.exit_code("parent", parent, 0);
    e.finish();
}

/// A child SIGKILLed after it told the parent (through a pipe) that its N
/// file writes returned: all N file writes must be in run.bin.
#[test]
fn child_killed_by_sigkill_keeps_committed_writes() {
    const N: u64 = 400;
    let run = run_program("sigkill_child", &[&N.to_string()]);
    let (s, dir) = (&run.summary, &run.dir);
    let mut e = s.expect();
    let (parent, child) = run.parent_and_forked_child(&mut e);
    e.calls("killed child", child.calls(), &[("close", 1), ("open", 1)], &[]);
    // The N file writes returned before the child signalled the parent, so all
    // N are committed.  The signalling pipe write itself races with the
    // SIGKILL (the parent can kill the child between the syscall's return
    // and the hook's record), so it may or may not be there.
    let w = child.calls().count("write");
    e.that(format_args!("killed child: calls.write.count {w} is N={N} or N+1"), w == N || w == N + 1);
    e.eq("killed child: calls.write.errors", child.calls().errors("write"), 0);
    e.eq(
        "killed child: calls.write.bytes",
        child.calls().bytes("write"),
        64 * N + w.saturating_sub(N).min(1),
    );
    e.calls("parent", parent.calls(), &[("close", 1), ("read", 1)], &[("read", 1)]);
    e.file(s.file(&dir.file("killed.dat")), 1, &[("write", N)], 0, 64 * N);
    e.exit_code("parent", parent, 0);
    e.finish();
}

/// fopen/fwrite/fread/fclose are counted as such; the glibc-internal
/// open/read/write/close behind them are not (they never reach the hooks).
#[test]
fn stdio_calls() {
    const N: u64 = 250;
    let run = run_program("stdio", &[&N.to_string()]);
    let (s, dir) = (&run.summary, &run.dir);
    let p = s.proc_exact(&run.cmdline);
    let mut e = s.expect();
    e.calls(
        "stdio",
        p.calls(),
        &[
            ("fopen", 2),
            ("fwrite", N),
            ("fread", N),
            ("fclose", 2),
            ("open", 0),
            ("read", 0),
            ("write", 0),
            ("close", 0),
        ],
        &[("fwrite", 40 * N), ("fread", 40 * N)],
    );
    // Assumption: a successful fopen counts as one of the file's "opens".
    e.file(s.file(&dir.file("stdio.dat")), 2, &[("fwrite", N), ("fread", N)], 40 * N, 40 * N);
    e.exit_code("stdio", p, 0);
    e.finish();
}

/// creat/openat/writev/pwritev/pwrite/readv/preadv/lseek/fsync/fdatasync/
/// mmap/munmap counts, bytes, and per-file attribution.
#[test]
fn vectored_and_misc_file_calls() {
    const N: u64 = 60;
    let run = run_program("fileops", &[&N.to_string()]);
    let (s, dir, d) = (&run.summary, &run.dir, run.dir.str());
    let p = s.proc_exact(&run.cmdline);
    let mut e = s.expect();
    e.calls(
        "fileops",
        p.calls(),
        &[
            ("creat", 1),
            ("writev", N),
            ("pwritev", N),
            ("fsync", 1),
            ("fdatasync", 1),
            ("open", 1),
            ("openat", 1),
            ("pwrite", 1),
            ("readv", N),
            ("lseek", N),
            ("preadv", N),
            ("mmap", 1),
            ("munmap", 1),
            ("close", 3),
            ("read", 0),
            ("write", 0),
            ("pread", 0),
        ],
        &[("writev", 30 * N), ("pwritev", 30 * N), ("pwrite", 4096), ("readv", 30 * N), ("preadv", 30 * N)],
    );
    e.file(s.file(&dir.file("a.dat")), 1, &[("writev", N), ("pwritev", N)], 0, 60 * N);
    // openat(dirfd, "b.dat"): the path is either resolved against the
    // directory or kept as opened ("b.dat").
    let b_abs = dir.file("b.dat");
    let b = s.file_where("b.dat", |p| p == b_abs || p == "b.dat");
    e.file(b, 1, &[("pwrite", 1), ("readv", N), ("preadv", N)], 60 * N, 4096);
    e.eq(format_args!("file {d}: opens"), s.file(&d).opens(), 1);
    e.exit_code("fileops", p, 0);
    e.finish();
}

/// clock_gettime/gettimeofday counts are exact in the default aggregate
/// mode and with MLPROF_CLOCK=events (`events` counts each clock call once
/// in both).  The difference shows in the trace: one "X" event per clock call
/// with MLPROF_CLOCK=events, none (only "C" counters) when aggregated.
#[test]
fn clock_aggregate_and_events() {
    // N + M stays below one lane's default capacity (16384 records), so the
    // events run cannot drop even if the collector drains late.
    const N: u64 = 10_000;
    const M: u64 = 1_000;
    let dir = TempDir::new("clock");
    let prog = compile("clock", &dir);
    let cmd = argv(&[&prog, &N.to_string(), &M.to_string()]);
    for mode in ["aggregate", "events"] {
        let out = dir.join(format!("{mode}.bin"));
        let env: &[(&str, &str)] = if mode == "events" { &[("MLPROF_CLOCK", "events")] } else { &[] };
        let o = run_collect_env(&out, &[], &cmd, env, default_timeout());
        assert!(o.status.success(), "mlprof-collect failed ({mode})\n{}", describe(&o));
        let s = clean_summary(&out);
        let p = s.proc_exact(&format!("{prog} {N} {M}"));
        let pid = p.pid();
        let mut e = s.expect();
        e.calls(mode, s.calls(), &[("clock_gettime", N), ("gettimeofday", M)], &[]);
        e.calls(&format!("{mode} process"), p.calls(), &[("clock_gettime", N), ("gettimeofday", M)], &[]);
        e.eq(format_args!("{mode}: events"), s.events(), N + M);

        let trace = convert_trace(&out);
        let events = trace.get("traceEvents").and_then(Value::as_array).expect("traceEvents array");
        let mine = |ph: &str, name: &str| {
            events
                .iter()
                .filter(|ev| {
                    ev.get("pid").and_then(Value::as_u64) == Some(pid)
                        && ev.get("ph").and_then(Value::as_str) == Some(ph)
                        && (name.is_empty() || ev.get("name").and_then(Value::as_str) == Some(name))
                })
                .count() as u64
        };
        if mode == "events" {
            e.eq("events mode: X clock_gettime events", mine("X", "clock_gettime"), N);
            e.eq("events mode: X gettimeofday events", mine("X", "gettimeofday"), M);
        } else {
            e.eq("aggregate mode: X clock_gettime events", mine("X", "clock_gettime"), 0);
            e.eq("aggregate mode: X gettimeofday events", mine("X", "gettimeofday"), 0);
            e.that("aggregate mode: the trace has counter (\"C\") events", mine("C", "") > 0);
        }
        e.finish();
    }
}

/// Failing calls count in `errors`, move no bytes, and keep errno (the
/// program exits non-zero if errno is not exactly EBADF/ENOENT after each
/// failure, or is changed by a successful call).
#[test]
fn errors_counted_and_errno_preserved() {
    const N: u64 = 25;
    let dir = TempDir::new("errors");
    let prog = compile("errors", &dir);
    let d = dir.str();
    let out = dir.join("run.bin");
    let o = run_collect(&out, &[], &argv(&[&prog, &d, &N.to_string()]));
    assert!(
        o.status.success(),
        "errors program failed under the profiler (errno not preserved?)\n{}",
        describe(&o)
    );
    let s = clean_summary(&out);
    let p = s.proc_exact(&format!("{prog} {d} {N}"));
    let mut e = s.expect();
    let want = [
        ("read", 2 * N, N, 10 * N),
        ("write", N, N, 0),
        ("pread", N, N, 0),
        ("close", N + 1, N, 0),
        ("open", N + 1, N, 0),
        ("fopen", N, N, 0),
    ];
    for (who, calls) in [("process", p.calls()), ("tree", s.calls())] {
        for (f, count, errors, bytes) in want {
            e.eq(format_args!("{who}: calls.{f}.count"), calls.count(f), count);
            e.eq(format_args!("{who}: calls.{f}.errors"), calls.errors(f), errors);
            e.eq(format_args!("{who}: calls.{f}.bytes"), calls.bytes(f), bytes);
        }
    }
    e.exit_code("errors", p, 0);
    e.finish();
}
