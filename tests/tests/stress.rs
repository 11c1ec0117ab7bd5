//! Stress and overload: full lanes (exact drop counts, never a blocked application), more
//! threads than lanes (lane reuse, exact no-lane drops), a process tree with fork, vfork+exec,
//! posix_spawn, threads exiting mid-run, signal-interrupted calls and dlopen/dlclose, and
//! EINTR passthrough.  Every count is exact.

use mlprof_tests::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// `mtwriter DIR THREADS WRITES 8 MODE` under the launcher with `args`; asserts exit `code`.
fn run_mtwriter(dir: &TempDir, args: &[&str], threads: u64, writes: u64, mode: &str) -> (Summary, Duration) {
    let prog = compile("mtwriter", dir);
    let out = dir.join("run.bin");
    let cmd = [prog, dir.str(), threads.to_string(), writes.to_string(), "8".into(), mode.to_string()];
    let started = Instant::now();
    let o = run_collect(&out, args, &cmd);
    let elapsed = started.elapsed();
    assert!(o.status.success(), "mtwriter {mode} failed\n{}", describe(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), format!("done {}\n", threads * writes));
    (Summary::load(&out), elapsed)
}

/// Per-file recorded writes of an `mtwriter` run, checking bytes = 8 x writes for each file.
fn recorded_per_file(s: &Summary, dir: &Path, threads: u64) -> Vec<u64> {
    (0..threads)
        .map(|t| {
            let path = format!("{}/t{t:02}.dat", dir.display());
            let f = s.file(&path);
            assert_eq!(f.bytes_written(), 8 * f.by_call("write"), "{path}: bytes of the recorded writes");
            assert_eq!(f.opens(), 1, "{path}: opens");
            f.by_call("write")
        })
        .collect()
}

/// Resumes a SIGSTOPped process when dropped (also when the test fails).
struct Stopped(u32);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0 as i32, libc::SIGCONT) };
    }
}

/// Ring full, deterministically: lanes of 64 records and a SIGSTOPped attach collector.  Two
/// threads make 1000 writes each while nothing drains: the program still finishes at once
/// (never blocked), each thread's lane keeps exactly its first 64 writes, and exactly
/// 2 x (1000 - 64) drops are counted once the collector resumes.
#[test]
fn ring_full_with_stopped_collector_drops_exactly() {
    const WRITES: u64 = 1000;
    let dir = TempDir::new("ring-full-stopped");
    let prog = compile("mtwriter", &dir);
    let session = unique_session("full");
    let out = dir.join("run.bin");
    let mut collector = AttachCollector::start_with_args(&out, &session, &["--lane-records", "64"]);
    let mut c = preloaded_command(&prog, &session);
    c.arg(dir.path()).args(["2", &WRITES.to_string(), "8", "stopped"]);
    let mut writer = Driven::spawn(c, true, Duration::from_secs(60));
    writer.expect_line("ready\n", "mtwriter did not see its lane drained");
    let stopped = Stopped::new(collector.pid());
    let started = Instant::now();
    writer.send(b"go\n");
    let Finished { status, stdout: rest, stderr: err } = writer.finish("the program blocked on a full ring");
    let elapsed = started.elapsed();
    drop(stopped);
    assert!(status.success(), "mtwriter status {status:?}; stderr:\n{err}");
    assert_eq!(rest, format!("done {}\n", 2 * WRITES));
    assert!(elapsed < Duration::from_secs(10), "2000 writes on a full ring took {elapsed:?}");
    collector.stop_ok();

    let s = Summary::load(&out);
    assert!(!s.truncated());
    let per_file = recorded_per_file(&s, dir.path(), 2);
    let mut e = s.expect();
    e.eq("thread 0 writes kept", per_file[0], 64);
    e.eq("thread 1 writes kept", per_file[1], 64);
    e.eq("calls.write.count", s.calls().count("write"), 128);
    e.eq("dropped", s.dropped(), 2 * (WRITES - 64));
    e.finish();
}

/// Sustained overload with the collector running: 4 threads x 100000 writes into 64-record
/// lanes.  The lanes do fill up (records are dropped: the collector drains about every
/// millisecond, and a thread makes far more than 64 writes in one), recorded + dropped == calls
/// made, exactly, and the program is not slowed down to the collector's pace (bounded wall
/// time).
#[test]
fn ring_full_under_load_accounts_for_every_call() {
    const THREADS: u64 = 4;
    const WRITES: u64 = 100_000;
    let dir = TempDir::new("ring-full-load");
    let (s, elapsed) = run_mtwriter(&dir, &["--lane-records", "64"], THREADS, WRITES, "join");
    assert!(!s.truncated());
    let per_file = recorded_per_file(&s, dir.path(), THREADS);
    let recorded: u64 = per_file.iter().sum();
    let mut e = s.expect();
    e.eq("calls.write.count = sum over files", s.calls().count("write"), recorded);
    e.eq("recorded + dropped", recorded + s.dropped(), THREADS * WRITES);
    e.that(
        format_args!("dropped {} > 0: the lanes never filled, so the overload was not tested", s.dropped()),
        s.dropped() > 0,
    );
    e.that(format_args!("wall time {elapsed:?} < 10 s"), elapsed < Duration::from_secs(10));
    e.finish();
    eprintln!("ring full under load: {recorded} recorded + {} dropped = {}", s.dropped(), THREADS * WRITES);
}

/// `--lanes 4` and 16 threads over time, at most 2 at once: threads exit, the collector frees
/// their lanes, new threads reuse them.  (Before starting a thread the program waits until the
/// ring shows a free lane, so the outcome does not depend on timing.)  Nothing is dropped and
/// every write is recorded.
#[test]
fn lanes_are_reused_by_threads_over_time() {
    const THREADS: u64 = 16;
    const WRITES: u64 = 2000;
    let dir = TempDir::new("lane-reuse");
    let (s, _) = run_mtwriter(&dir, &["--lanes", "4"], THREADS, WRITES, "serial:2");
    s.assert_clean();
    let per_file = recorded_per_file(&s, dir.path(), THREADS);
    let mut e = s.expect();
    for (t, n) in per_file.iter().enumerate() {
        e.eq(format_args!("thread {t} writes"), *n, WRITES);
    }
    e.eq("calls.write.count", s.calls().count("write"), THREADS * WRITES);
    e.finish();
}

/// `--lanes 4` and 16 threads at once (each holds its lane until all 16 made a first write, so
/// at least 13 find no lane): recorded + dropped == calls made, exactly, and drops are seen.
#[test]
fn more_threads_than_lanes_counts_no_lane_drops_exactly() {
    const THREADS: u64 = 16;
    const WRITES: u64 = 2000;
    let dir = TempDir::new("no-lane");
    let (s, _) = run_mtwriter(&dir, &["--lanes", "4"], THREADS, WRITES, "join");
    assert!(!s.truncated());
    let per_file = recorded_per_file(&s, dir.path(), THREADS);
    let recorded: u64 = per_file.iter().sum();
    let mut e = s.expect();
    e.eq("calls.write.count = sum over files", s.calls().count("write"), recorded);
    e.eq("recorded + dropped", recorded + s.dropped(), THREADS * WRITES);
    e.that(format_args!("dropped {} >= 13 (13 threads found no lane)", s.dropped()), s.dropped() >= 13);
    e.finish();
}

fn compile_plugin(dir: &TempDir) {
    let out = dir.join("libplug.so").display().to_string();
    let src = tests_dir().join("programs/plug.c").display().to_string();
    gcc(&["-O1", "-shared", "-fPIC", "-Wall", "-o", &out, &src]);
}

/// Read events of the trace: `(ret, errno)` of each (a missing field reads as `i64::MIN`).
fn read_events(trace: &Value) -> Vec<(i64, i64)> {
    trace["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|ev| ev["ph"] == "X" && ev["name"] == "read")
        .map(|ev| {
            let arg = |k: &str| ev["args"][k].as_i64().unwrap_or(i64::MIN);
            (arg("ret"), arg("errno"))
        })
        .collect()
}

/// A process tree under load, twice: 4 forked children, each with 8 writer threads (2000 writes
/// each; half of them exit through pthread_exit while the others write), a reader thread whose
/// 4 blocking reads are interrupted by SIGUSR1 (EINTR), one vfork+exec child, one posix_spawn
/// child and 5 dlopen/dlclose rounds of a library that writes.  Every process, file and count
/// is exact, every interrupted read is recorded as an error with ret -1 and errno EINTR, nothing is
/// dropped (no thread writes more than a lane holds), and the run ends in bounded time.
#[test]
fn process_tree_stress_counts_are_exact() {
    const PROCS: u64 = 4;
    const THREADS: u64 = 8;
    const ITERS: u64 = 2000;
    let rounds: u64 = std::env::var("MLPROF_STRESS_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    let dir = TempDir::new("tree-stress");
    let prog = compile("stress", &dir);
    compile_plugin(&dir);
    let mut checked = 0;
    for round in 0..rounds {
        let out = dir.join(format!("run{round}.bin"));
        let started = Instant::now();
        let o = run_collect(&out, &[], &[&prog, &dir.str(), "4", "8", &ITERS.to_string()]);
        let elapsed = started.elapsed();
        assert!(o.status.success(), "round {round}: stress failed\n{}", describe(&o));
        assert!(elapsed < Duration::from_secs(30), "round {round}: took {elapsed:?}");
        let s = clean_summary(&out);
        let root_cmd = format!("{prog} {} 4 8 {ITERS}", dir.str());
        let mut e = s.expect();
        let copies = s.procs_with_cmdline(&root_cmd);
        e.eq("processes with the tree's cmdline (root + forks)", copies.len() as u64, PROCS + 1);
        let root = s.root_exact(&root_cmd);
        e.eq("root calls", root.calls().counts().values().sum(), 0);
        for child in s.children_of(root.pid()) {
            let c = child.calls();
            let who = format!("fork child {}", child.pid());
            e.eq(format_args!("{who}: write"), c.count("write"), THREADS * ITERS + 5 * 20);
            e.eq(format_args!("{who}: open"), c.count("open"), THREADS + 5);
            e.eq(format_args!("{who}: close"), c.count("close"), THREADS / 2 + 5);
            e.eq(format_args!("{who}: read"), c.count("read"), 4);
            e.eq(format_args!("{who}: read errors"), c.errors("read"), 4);
            e.eq(format_args!("{who}: write errors"), c.errors("write"), 0);
            e.eq(format_args!("{who}: children"), s.children_of(child.pid()).len() as u64, 2);
        }
        e.eq("fork children", s.children_of(root.pid()).len() as u64, PROCS);
        e.eq("leaf images", s.procs_with_cmdline(&format!("{prog} leaf ")).len() as u64, 2 * PROCS);
        for i in 0..PROCS {
            for t in 0..THREADS {
                e.file(s.file(&dir.file(&format!("f{i}_{t}.dat"))), 1, &[("write", ITERS)], 0, 64 * ITERS);
            }
            for leaf in ["v", "s"] {
                let path = dir.file(&format!("{leaf}{i}.dat"));
                let p = s.proc_exact(&format!("{prog} leaf {path} 30"));
                e.calls(&path, p.calls(), &[("open", 1), ("write", 30), ("close", 1)], &[("write", 1920)]);
                e.file(s.file(&path), 1, &[("write", 30)], 0, 1920);
            }
            e.file(s.file(&dir.file(&format!("d{i}.dat"))), 5, &[("write", 100)], 0, 6400);
        }
        let total_writes = PROCS * (THREADS * ITERS + 100 + 60);
        e.eq("tree writes", s.calls().count("write"), total_writes);
        e.finish();
        let reads = read_events(&convert_trace(&out));
        assert_eq!(reads.len() as u64, 4 * PROCS, "read events in the trace");
        assert!(reads.iter().all(|&r| r == (-1, libc::EINTR as i64)), "(ret, errno) of the reads: {reads:?}");
        checked += total_writes + 4 * PROCS;
    }
    eprintln!("process tree stress: {rounds} rounds, {checked} records checked");
}

/// A read on an empty pipe interrupted by SIGALRM (handler without SA_RESTART) returns -1/EINTR
/// to the program and is recorded as a failed read with ret -1 and errno EINTR, 5 times.
#[test]
fn eintr_reaches_the_program_and_the_record() {
    let dir = TempDir::new("eintr");
    let prog = compile("eintr", &dir);
    let out = dir.join("run.bin");
    let o = run_collect_ok(&out, &[&prog, "alarm", "5"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "eintr 5\n", "{}", describe(&o));
    let s = clean_summary(&out);
    let mut e = s.expect();
    e.eq("read count", s.calls().count("read"), 5);
    e.eq("read errors", s.calls().errors("read"), 5);
    e.finish();
    let reads = read_events(&convert_trace(&out));
    assert_eq!(reads, vec![(-1, libc::EINTR as i64); 5], "(ret, errno) of the read events");
}

/// A SIGALRM every 20 us whose handler makes a hooked write() while the main thread writes in a
/// loop: every write, the program's and the handler's, must be recorded or counted as dropped.
///
/// A handler call that lands while the interrupted hook is writing its record cannot be
/// recorded (the lane has a single writer); it must be counted in `dropped` instead.
#[test]
fn signal_handler_calls_are_recorded_or_counted() {
    const N: u64 = 300_000;
    let dir = TempDir::new("signal-storm");
    let prog = compile("eintr", &dir);
    let out = dir.join("run.bin");
    let o = run_collect_ok(&out, &[&prog, "storm", &N.to_string()]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let handled: u64 = stdout
        .trim()
        .strip_prefix(&format!("storm {N} "))
        .and_then(|h| h.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output {stdout:?}"));
    let s = Summary::load(&out);
    let recorded = s.calls().count("write");
    assert_eq!(s.calls().bytes("write"), 8 * recorded, "a torn record");
    assert_eq!(
        recorded + s.dropped(),
        N + handled,
        "writes recorded {recorded} + dropped {} != {N} by the program + {handled} by the handler",
        s.dropped()
    );
}

/// 8 threads each open, write 5 times and close their own file 1000 times, so descriptor
/// numbers pass from thread to thread all the time, while two busy threads compete with the
/// collector for the CPU.  Every file must get exactly its 1000 opens, 5000 writes and 1000
/// closes.
///
/// Thread B's `open` that reuses fd N can reach the file before thread A's last writes and
/// `close` of fd N (a drain pass is not a consistent cut across lanes); the tools attribute
/// each call by time, so every write is still charged to the right file.
#[test]
fn fd_reuse_across_threads_is_attributed_exactly() {
    let dir = TempDir::new("fd-churn");
    let prog = compile("fdchurn", &dir);
    let out = dir.join("run.bin");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hogs: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let o = run_collect(&out, &[], &[&prog, &dir.str(), "8", "1000", "5"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    assert!(o.status.success(), "{}", describe(&o));
    let s = clean_summary(&out);
    let mut e = s.expect();
    e.calls("tree", s.calls(), &[("open", 8000), ("write", 40_000), ("close", 8000)], &[]);
    for t in 0..8 {
        let path = dir.file(&format!("c{t}.dat"));
        e.file(s.file(&path), 1000, &[("write", 5000), ("close", 1000)], 0, 5000 * 32);
    }
    e.finish();
}
