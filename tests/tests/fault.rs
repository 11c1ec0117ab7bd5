//! Fault injection: the profiled program SIGKILLed while it writes hard, the collector
//! SIGKILLed under heavy writing (attach and launcher mode).  Kill points are random (the seed
//! is printed; `MLPROF_FAULT_SEED` replays it, `MLPROF_FAULT_RUNS` sets the number of kills),
//! and every outcome is checked exactly against the program's own committed counters.

use mlprof_tests::*;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// xorshift64*: small, seeded, good enough to pick kill delays.
struct Rng(u64);

impl Rng {
    fn from_env() -> (Rng, u64) {
        let seed =
            std::env::var("MLPROF_FAULT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
                SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1) | 1
            });
        (Rng(seed), seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn runs_from_env(default: usize) -> usize {
    std::env::var("MLPROF_FAULT_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The per-thread committed-write counters `mtwriter` keeps in `DIR/counters`.
fn read_counters(dir: &Path, threads: usize) -> Vec<u64> {
    let bytes = std::fs::read(dir.join("counters")).expect("read counters file");
    (0..threads).map(|t| u64::from_le_bytes(bytes[t * 8..t * 8 + 8].try_into().unwrap())).collect()
}

fn file_len(path: &str) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or_else(|e| panic!("stat {path}: {e}"))
}

/// The program is SIGKILLed at a random point while 4 threads write 16-byte records to their
/// own files.  For every thread: the recorded writes `r`, the writes that returned before the
/// kill `c` (its committed counter) and the writes the kernel did `k` (file size / 16) satisfy
/// `c <= r <= c + 1` and `r <= k <= c + 1` (at most one call in flight per thread); bytes
/// match; nothing is dropped; the run file is complete (the collector finished cleanly and
/// exited 128 + 9).  Lanes hold 65536 records and a thread makes at most 60000 calls, so no
/// record can be dropped whatever the scheduling.
#[test]
fn program_sigkilled_while_writing_keeps_every_committed_record() {
    const THREADS: usize = 4;
    const WRITES: u64 = 60_000;
    const SIZE: u64 = 16;
    let (mut rng, seed) = Rng::from_env();
    let runs = runs_from_env(5);
    let dir = TempDir::new("prog-kill");
    let prog = compile("mtwriter", &dir);
    let mut checked = 0u64;
    let mut in_flight = 0u64;
    for run in 0..runs {
        // 0 .. 40 ms: from "right after the threads started" to "after they finished".
        let delay = rng.below(40_000);
        let sub = dir.join(format!("run{run}"));
        std::fs::create_dir(&sub).unwrap();
        let sub_s = sub.display().to_string();
        let out = sub.join("run.bin");
        let args = ["--lanes", "16", "--lane-records", "65536"];
        let cmd = [
            prog.clone(),
            sub_s.clone(),
            THREADS.to_string(),
            WRITES.to_string(),
            SIZE.to_string(),
            format!("kill:{delay}"),
        ];
        let o = run_collect(&out, &args, &cmd);
        let ctx = format!("seed {seed} run {run} kill after {delay} us");
        assert_eq!(shell_status(o.status), 128 + 9, "{ctx}: collector must exit 128+9\n{}", describe(&o));
        let committed = read_counters(&sub, THREADS);
        let s = Summary::load(&out);
        let mut e = s.expect();
        e.eq(format_args!("{ctx}: dropped"), s.dropped(), 0);
        e.that(format_args!("{ctx}: run file complete (truncated: false)"), !s.truncated());
        let procs = s.procs_with_cmdline(&format!("{sub_s} {THREADS}"));
        e.eq(format_args!("{ctx}: process entries"), procs.len() as u64, 1);
        if let Some(&p) = procs.first() {
            e.signal(&format!("{ctx}: process"), p, 9);
        }
        let mut recorded_total = 0;
        for (t, &c) in committed.iter().enumerate() {
            let path = format!("{sub_s}/t{t:02}.dat");
            let k = file_len(&path) / SIZE;
            let f = s.file(&path);
            let r = f.by_call("write");
            recorded_total += r;
            checked += r;
            in_flight += r - c.min(r) + (k - r.min(k));
            e.that(
                format_args!("{ctx}: {path}: committed {c} <= recorded {r} <= committed + 1"),
                c <= r && r <= c + 1,
            );
            e.that(
                format_args!("{ctx}: {path}: recorded {r} <= kernel writes {k} <= committed {c} + 1"),
                r <= k && k <= c + 1,
            );
            e.eq(format_args!("{ctx}: {path}: opens"), f.opens(), 1);
            e.eq(format_args!("{ctx}: {path}: bytes_written"), f.bytes_written(), r * SIZE);
        }
        e.eq(format_args!("{ctx}: calls.write.count"), s.calls().count("write"), recorded_total);
        e.eq(format_args!("{ctx}: calls.write.errors"), s.calls().errors("write"), 0);
        e.finish();
    }
    eprintln!(
        "program SIGKILL: seed {seed}, {runs} kills, {checked} write records checked, {in_flight} writes in flight at the kill (done by the kernel, not yet returned)"
    );
}

fn writer_command(
    prog: &str,
    session: &str,
    dir: &Path,
    threads: usize,
    writes: u64,
    mode: &str,
) -> std::process::Command {
    let mut c = preloaded_command(prog, session);
    c.arg(dir).args([threads.to_string(), writes.to_string(), "16".into(), mode.to_string()]);
    c
}

/// Checks that an `mtwriter` run in `dir` completed every write: counters and file sizes.
fn assert_all_written(dir: &Path, threads: usize, writes: u64, ctx: &str) {
    for (t, c) in read_counters(dir, threads).into_iter().enumerate() {
        assert_eq!(c, writes, "{ctx}: thread {t} committed {c} of {writes} writes");
        let path = dir.join(format!("t{t:02}.dat"));
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert_eq!(len, writes * 16, "{ctx}: size of {}", path.display());
    }
}

/// The attach-mode collector is SIGKILLed while 4 threads of an attached program write as fast
/// as they can (once every thread made 1 write, then once every thread made half of its
/// 100000): the program goes on, prints its normal output, exits with its own status (3), in
/// bounded time (< 20 s; a blocked producer would hang it), with every write done.  What the
/// killed collector left is readable and says truncated.  A collector restarted on the same
/// session then records a new process exactly.
#[test]
fn collector_sigkilled_under_heavy_writing() {
    const THREADS: usize = 4;
    const WRITES: u64 = 100_000;
    let dir = TempDir::new("collector-kill-stress");
    let prog = compile("mtwriter", &dir);
    let session = unique_session("ckill");
    for (round, progress) in [1, WRITES / 2].into_iter().enumerate() {
        let ctx = format!("kill after {progress} writes per thread");
        let sub = dir.join(format!("round{round}"));
        std::fs::create_dir(&sub).unwrap();
        let killed = dir.join(format!("killed{round}.bin"));
        let mut collector = AttachCollector::start(&killed, &session);
        let c = writer_command(&prog, &session, &sub, THREADS, WRITES, &format!("progress:{progress}"));
        let started = Instant::now();
        let mut writer = Driven::spawn(c, false, Duration::from_secs(60));
        writer.expect_line("writing\n", &format!("{ctx}: mtwriter did not report progress"));
        let st = collector.kill9();
        assert_eq!(st.code(), None, "{ctx}: collector should have died of SIGKILL: {st:?}");
        let Finished { status, stdout: rest, stderr: err } =
            writer.finish(&format!("{ctx}: the program hung after the collector was killed"));
        let elapsed = started.elapsed();
        assert_eq!(status.code(), Some(3), "{ctx}: program status; stdout {rest:?}; stderr:\n{err}");
        assert_eq!(rest, format!("done {}\n", THREADS as u64 * WRITES), "{ctx}: stderr:\n{err}");
        assert!(err.is_empty(), "{ctx}: the program printed on stderr:\n{err}");
        assert!(elapsed < Duration::from_secs(20), "{ctx}: the program took {elapsed:?}");
        assert_all_written(&sub, THREADS, WRITES, &ctx);
        if std::fs::metadata(&killed).map(|m| m.len() > 0).unwrap_or(false) {
            assert!(
                Summary::load(&killed).truncated(),
                "{ctx}: a SIGKILLed collector's file must say truncated"
            );
        }
    }

    let out = dir.join("restarted.bin");
    let mut collector = AttachCollector::start(&out, &session);
    let sub = dir.join("after");
    std::fs::create_dir(&sub).unwrap();
    let o = output_with_timeout(writer_command(&prog, &session, &sub, 2, 1000, "join"), default_timeout());
    assert!(o.status.success(), "writer after the restart\n{}", describe(&o));
    collector.stop_ok();
    let s = clean_summary(&out);
    let mut e = s.expect();
    e.eq("processes in the restarted run", s.processes().len() as u64, 1);
    for t in 0..2 {
        e.file(s.file(&format!("{}/t{t:02}.dat", sub.display())), 1, &[("write", 1000)], 0, 16_000);
    }
    e.calls("tree", s.calls(), &[("write", 2000)], &[("write", 32_000)]);
    e.finish();
}

/// Launcher mode: the collector itself is SIGKILLed while its command's 4 threads write; the
/// command, now an orphan, still completes every write and prints its normal output.
#[test]
fn launcher_sigkilled_command_finishes() {
    const THREADS: usize = 4;
    const WRITES: u64 = 100_000;
    let dir = TempDir::new("launcher-kill");
    let prog = compile("mtwriter", &dir);
    let out = dir.join("run.bin");
    let cmd = [
        prog.clone(),
        dir.str(),
        THREADS.to_string(),
        WRITES.to_string(),
        "16".into(),
        "progress:1000".into(),
    ];
    let started = Instant::now();
    let mut collector = Driven::spawn(collect_command(&out, &[], &cmd), false, Duration::from_secs(60));
    let collector_pid = collector.pid();
    collector.expect_line("writing\n", "the command did not report progress");
    // SAFETY: kill(2) on our own unreaped child.
    unsafe { libc::kill(collector_pid as i32, libc::SIGKILL) };
    // The orphan holds the pipes: their end means it exited.
    let Finished { status: st, stdout: rest, stderr: err } =
        collector.finish("the command hung after its collector was killed");
    assert_eq!(shell_status(st), 128 + 9);
    assert_eq!(rest, format!("done {}\n", THREADS as u64 * WRITES), "stderr:\n{err}");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    assert_all_written(dir.path(), THREADS, WRITES, "launcher killed");
    if std::fs::metadata(&out).map(|m| m.len() > 0).unwrap_or(false) {
        assert!(Summary::load(&out).truncated(), "a SIGKILLed collector's file must say truncated");
    }
    // The killed collector could not unlink its segment; the next launcher removes it (its pages
    // would otherwise stay in memory until reboot).
    run_collect_ok(&dir.join("next.bin"), &["true"]);
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let stale = format!("mlprof-{uid}-run-{collector_pid}-");
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(!left.iter().any(|n| n.starts_with(&stale)), "stale segment {stale}* left in /dev/shm: {left:?}");
}
