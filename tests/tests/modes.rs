//! Ways of running mlprof: launcher exit status, attach mode, no collector,
//! a collector killed mid-run, and `mlprof convert`.

use mlprof_tests::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

/// CMD exiting 7 makes mlprof-collect exit 7; CMD's stdout passes through;
/// the collector's own stderr lines start with `mlprof-collect:`.
#[test]
fn launcher_exit_status_passthrough() {
    let dir = TempDir::new("exit-status");
    let prog = compile("writer", &dir);
    let path = dir.file("w.dat");
    let out = dir.join("run.bin");
    let o = run_collect(&out, &[], &[&prog, &path, "3", "7"]);
    assert_eq!(o.status.code(), Some(7), "mlprof-collect must exit with CMD's status 7\n{}", describe(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "done 3\n", "CMD's stdout must pass through");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.lines().any(|l| l.starts_with("mlprof-collect:")),
        "no `mlprof-collect:` summary line on stderr:\n{stderr}"
    );

    let s = clean_summary(&out);
    let p = s.proc_exact(&format!("{prog} {path} 3 7"));
    let mut e = s.expect();
    e.calls("writer", p.calls(), &[("open", 1), ("write", 3), ("close", 1)], &[("write", 192)]);
    e.file(s.file(&path), 1, &[("write", 3)], 0, 192);
    e.exit_code("writer", p, 7);
    e.finish();
}

/// CMD killed by SIGKILL makes mlprof-collect exit 128+9, and the writes
/// CMD made before dying are all recorded.
#[test]
fn launcher_signal_status() {
    const N: u64 = 300;
    let dir = TempDir::new("signal-status");
    let prog = compile("writer", &dir);
    let path = dir.file("w.dat");
    let out = dir.join("run.bin");
    let o = run_collect(&out, &[], &[&prog, &path, &N.to_string(), "sig9"]);
    assert_eq!(
        shell_status(o.status),
        128 + 9,
        "mlprof-collect must exit 128+SIGKILL when CMD is killed\n{}",
        describe(&o)
    );
    let s = clean_summary(&out);
    let p = s.proc_exact(&format!("{prog} {path} {N} sig9"));
    let mut e = s.expect();
    e.calls("writer", p.calls(), &[("open", 1), ("write", N), ("close", 1)], &[("write", 64 * N)]);
    e.file(s.file(&path), 1, &[("write", N)], 0, 64 * N);
    e.signal("writer", p, 9);
    e.finish();
}

/// Attach mode: a collector serves a unique session; two programs started
/// independently with LD_PRELOAD + MLPROF_SESSION join it concurrently;
/// SIGINT finalizes run.bin and the collector exits 0.
#[test]
fn attach_mode() {
    let dir = TempDir::new("attach");
    let prog = compile("writer", &dir);
    let session = unique_session("attach");
    let out = dir.join("run.bin");
    let mut collector = AttachCollector::start(&out, &session);

    let jobs = [(dir.file("a.dat"), 120u64, 0), (dir.file("b.dat"), 345u64, 4)];
    let outputs: Vec<_> = std::thread::scope(|sc| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|(path, n, code)| {
                let mut c = preloaded_command(&prog, &session);
                c.args([path.as_str(), &n.to_string(), &code.to_string()]);
                sc.spawn(move || output_with_timeout(c, default_timeout()))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("runner thread")).collect()
    });
    for ((_, n, code), o) in jobs.iter().zip(&outputs) {
        assert_eq!(o.status.code(), Some(*code), "attached program status\n{}", describe(o));
        assert_eq!(String::from_utf8_lossy(&o.stdout), format!("done {n}\n"));
    }
    collector.stop_ok();
    let ready = collector.stderr_lines().iter().filter(|l| l.contains("ready")).count();
    assert_eq!(ready, 1, "want exactly one ready line; stderr:\n{}", collector.stderr());

    let s = clean_summary(&out);
    let mut e = s.expect();
    for (path, n, code) in &jobs {
        let p = s.proc_exact(&format!("{prog} {path} {n} {code}"));
        e.calls(path, p.calls(), &[("open", 1), ("write", *n), ("close", 1)], &[("write", 64 * n)]);
        e.file(s.file(path), 1, &[("write", *n)], 0, 64 * n);
    }
    e.calls("tree", s.calls(), &[("open", 2), ("write", 465), ("close", 2)], &[]);
    e.finish();
}

/// A second attach collector of a session that a live collector serves refuses, names the
/// first one and leaves its segment alone: the session's programs go on recording into the
/// first collector's run. (It used to read too little of the header to see the first one
/// alive, removed its segment and took the session over.)
#[test]
fn a_served_session_is_not_taken_over() {
    let dir = TempDir::new("attach-twice");
    let prog = compile("writer", &dir);
    let session = unique_session("twice");
    let out = dir.join("run.bin");
    let mut first = AttachCollector::start(&out, &session);
    let mut second = Command::new(&bins().collect);
    clean_env(&mut second);
    second.arg("--out").arg(dir.join("second.bin")).arg("--session").arg(&session);
    let o = output_with_timeout(second, default_timeout());
    assert_eq!(o.status.code(), Some(2), "the second collector refuses\n{}", describe(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let served = format!("session '{session}' is already served by mlprof-collect pid {}", first.pid());
    assert!(stderr.contains(&served), "it names the first one:\n{stderr}");
    let path = dir.file("a.dat");
    let mut c = preloaded_command(&prog, &session);
    c.args([path.as_str(), "10", "0"]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "the program under the first collector\n{}", describe(&o));
    first.stop_ok();
    let s = clean_summary(&out);
    let mut e = s.expect();
    e.calls("tree", s.calls(), &[("open", 1), ("write", 10), ("close", 1)], &[]);
    e.finish();
}

/// An attach collector killed with SIGKILL leaves its session's segment behind; the user's
/// next collector of another session removes it and says so (path and dead pid), and leaves
/// alone the segment of a session a live collector serves, which goes on recording. The
/// collectors use a shm directory of their own: collectors of other tests sweep /dev/shm.
#[test]
fn a_killed_attach_collectors_segment_is_removed_by_the_next_collector() {
    let dir = TempDir::new("session-leftover");
    let prog = compile("writer", &dir);
    let shm = ShmDir::new("session-leftover");
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let start = |name: &str| {
        let session = unique_session(name);
        let out = dir.join(format!("{name}.bin"));
        let mut c = Command::new(&bins().collect);
        clean_env(&mut c).env("MLPROF_SHM_DIR", shm.path());
        c.arg("--out").arg(&out).args(["--session", &session, "--no-energy"]);
        let segment = shm.join(format!("mlprof-{uid}-{session}"));
        (AttachCollector::start_command(c, &out, &session), segment, session)
    };
    // The live one first: a collector started after the kill would be the one that sweeps.
    let (mut live, served, session) = start("live");
    let (mut killed, left, _) = start("killed");
    let killed_pid = killed.pid();
    killed.kill9();
    assert!(left.exists(), "a SIGKILLed collector cannot unlink {}", left.display());
    // The next collector, of another session: it removes the leftover, and says so.
    let (mut next, _, _) = start("next");
    let said: Vec<String> = next.stderr_lines().into_iter().filter(|l| l.contains("removed")).collect();
    let want = format!(
        "mlprof-collect: removed {}, left behind by mlprof-collect pid {killed_pid}, which is gone",
        left.display()
    );
    assert_eq!(said, [want], "stderr:\n{}", next.stderr());
    assert!(!left.exists(), "{} is left", left.display());
    next.stop_ok();
    assert!(served.exists(), "the live collector's segment {} was removed", served.display());
    let path = dir.file("w.dat");
    let mut c = preloaded_command(&prog, &session);
    c.env("MLPROF_SHM_DIR", shm.path()).args([path.as_str(), "10", "0"]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "a program of the live session\n{}", describe(&o));
    live.stop_ok();
    let s = clean_summary(&live.out);
    let mut e = s.expect();
    e.calls("tree", s.calls(), &[("open", 1), ("write", 10), ("close", 1)], &[]);
    e.finish();
}

/// A collector started with SIGCHLD blocked (a mask some job launchers pass on) unblocks it in
/// its main thread, where the signal of the command's end cuts its sleep short and tells it to
/// reap: without that it would notice the end only at its once-a-second safety net. Read from
/// /proc while it runs: no timing involved. The command's records are whole as ever.
#[test]
fn a_blocked_sigchld_is_unblocked() {
    const SIGCHLD_BIT: u64 = 1 << (libc::SIGCHLD - 1);
    let dir = TempDir::new("sigchld-blocked");
    let prog = compile("writer", &dir);
    let path = dir.file("w.dat");
    let out = dir.join("run.bin");
    let fifo = dir.join("go");
    let made = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // Safety: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(made.as_ptr(), 0o600) }, 0, "mkfifo");
    // The command waits on the fifo until the mask has been read, then writes.
    let script = format!("read _ < {}; exec {prog} {path} 4 0", fifo.display());
    let mut cmd = collect_command(&out, &[], &["sh", "-c", &script]);
    block_sigchld(&mut cmd);
    let blocked_at_exec = {
        let mut probe = Command::new("grep");
        clean_env(&mut probe).args(["SigBlk", "/proc/self/status"]);
        block_sigchld(&mut probe);
        let o = output_with_timeout(probe, default_timeout());
        sig_blocked(&String::from_utf8_lossy(&o.stdout)) & SIGCHLD_BIT != 0
    };
    assert!(blocked_at_exec, "the pre_exec mask must reach the program (else this test tests nothing)");
    let driven = Driven::spawn(cmd, false, default_timeout());
    let pid = driven.pid();
    let status = format!("/proc/{pid}/task/{pid}/status");
    // The collector's main thread unblocks it before it starts the command; the command waits
    // for us, so the collector is alive while we look.
    // Milliseconds after its start; 20 s is for a machine under load.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut mask = u64::MAX;
    while mask & SIGCHLD_BIT != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        mask = sig_blocked(&std::fs::read_to_string(&status).unwrap_or_default());
    }
    // Opening the fifo waits for the command's shell to open it: from a thread of its own, so
    // that a collector that never starts the command fails the test instead of hanging it.
    let go = fifo.clone();
    std::thread::spawn(move || std::fs::write(go, "go\n"));
    let done = driven.finish("the collector with SIGCHLD blocked");
    assert_eq!(
        mask & SIGCHLD_BIT,
        0,
        "SIGCHLD still blocked in the collector's main thread: SigBlk {mask:x}"
    );
    assert!(done.status.success(), "{:?}\n{}", done.status, done.stderr);
    let s = clean_summary(&out);
    let p = s.proc_exact(&format!("{prog} {path} 4 0"));
    let mut e = s.expect();
    e.calls("writer", p.calls(), &[("open", 1), ("write", 4), ("close", 1)], &[("write", 256)]);
    e.finish();
}

/// Makes `cmd` start with SIGCHLD blocked.
fn block_sigchld(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // Safety: only sigemptyset, sigaddset and sigprocmask on a local set, async-signal-safe,
    // between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
}

/// The SigBlk mask of a /proc status text (all bits set when absent).
fn sig_blocked(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(u64::MAX)
}

/// No collector serves the session: the program runs exactly as without
/// the preload (same stdout, exit status and file), and libmlprof prints
/// exactly one stderr line starting `mlprof: no session`; none with
/// MLPROF_QUIET=1.
#[test]
fn no_collector() {
    let dir = TempDir::new("no-collector");
    let prog = compile("writer", &dir);
    let session = unique_session("nobody");
    let path = dir.file("w.dat");
    let args = [path.as_str(), "10", "5"];

    let mut bare = Command::new(&prog);
    clean_env(&mut bare).args(args);
    let bare = output_with_timeout(bare, default_timeout());
    assert_eq!(bare.status.code(), Some(5), "bare run\n{}", describe(&bare));
    assert_eq!(String::from_utf8_lossy(&bare.stdout), "done 10\n");
    assert!(bare.stderr.is_empty(), "bare run\n{}", describe(&bare));
    std::fs::remove_file(&path).unwrap();

    let mut c = preloaded_command(&prog, &session);
    c.args(args);
    let o = output_with_timeout(c, default_timeout());
    assert_eq!(o.status.code(), Some(5), "exit status must be unchanged\n{}", describe(&o));
    assert_eq!(o.stdout, bare.stdout, "stdout must be unchanged\n{}", describe(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<_> = stderr.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("mlprof: no session"),
        "want exactly one stderr line starting `mlprof: no session`, got:\n{stderr}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 640, "the program's file must be written");
    std::fs::remove_file(&path).unwrap();

    let mut c = preloaded_command(&prog, &session);
    c.args(args).env("MLPROF_QUIET", "1");
    let o = output_with_timeout(c, default_timeout());
    assert_eq!(o.status.code(), Some(5), "MLPROF_QUIET=1\n{}", describe(&o));
    assert_eq!(o.stdout, bare.stdout, "MLPROF_QUIET=1\n{}", describe(&o));
    assert!(o.stderr.is_empty(), "MLPROF_QUIET=1 must print nothing\n{}", describe(&o));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 640);
}

/// The attach-mode collector is SIGKILLed while an attached program (our own
/// child) is between writes; the program finishes with its normal output and
/// status.  A collector restarted on the same session then records a new
/// process cleanly.
#[test]
fn collector_killed_mid_run() {
    const N: u64 = 4000;
    const PAUSE: u64 = 1000;
    let dir = TempDir::new("collector-kill");
    let prog = compile("writer", &dir);
    let session = unique_session("kill");
    let out1 = dir.join("killed.bin");
    let mut collector = AttachCollector::start(&out1, &session);

    let path = dir.file("w1.dat");
    let mut c = preloaded_command(&prog, &session);
    c.args([path.as_str(), &N.to_string(), "6", &PAUSE.to_string()]);
    let mut writer = Driven::spawn(c, true, default_timeout());
    writer.expect_line("paused\n", "writer did not reach its pause point");

    let st = collector.kill9();
    assert_eq!(st.code(), None, "collector should have died of SIGKILL: {st:?}");

    writer.send(b"go\n");
    let Finished { status, stdout: rest, stderr: err } =
        writer.finish("writer hung after the collector was killed");
    assert_eq!(
        status.code(),
        Some(6),
        "writer must exit normally (6) after the collector died; stdout {rest:?}, stderr:\n{err}"
    );
    assert_eq!(rest, format!("done {N}\n"), "writer output after the collector died; stderr:\n{err}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 * N);

    // Whatever the killed collector left must still be readable, and marked truncated.
    if std::fs::metadata(&out1).map(|m| m.len() > 0).unwrap_or(false) {
        let s = Summary::load(&out1);
        assert!(s.truncated(), "run file of a SIGKILLed collector must say truncated: true");
    }

    let out2 = dir.join("restarted.bin");
    let mut collector2 = AttachCollector::start(&out2, &session);
    let path2 = dir.file("w2.dat");
    let mut c = preloaded_command(&prog, &session);
    c.args([path2.as_str(), "50", "0"]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "second writer\n{}", describe(&o));
    collector2.stop_ok();

    let s = clean_summary(&out2);
    let p = s.proc_exact(&format!("{prog} {path2} 50 0"));
    let mut e = s.expect();
    e.calls("new process", p.calls(), &[("open", 1), ("write", 50), ("close", 1)], &[("write", 3200)]);
    e.file(s.file(&path2), 1, &[("write", 50)], 0, 3200);
    e.that(
        "the first writer (run before the restart) is not in the new run",
        s.procs_with_cmdline(&path).is_empty(),
    );
    e.finish();
}

/// `mlprof convert`: one "X" event per recorded call, with pid and args.
#[test]
fn convert_one_event_per_call() {
    const N: u64 = 25;
    let dir = TempDir::new("convert");
    let prog = compile("writer", &dir);
    let path = dir.file("w.dat");
    let out = dir.join("run.bin");
    run_collect_ok(&out, &[&prog, &path, &N.to_string(), "0"]);
    let s = clean_summary(&out);
    let pid = s.proc_exact(&format!("{prog} {path} {N} 0")).pid();

    let trace = convert_trace(&out);
    let events = trace.get("traceEvents").and_then(Value::as_array).expect("trace has a traceEvents array");
    let mine: Vec<&Value> =
        events.iter().filter(|ev| ev.get("pid").and_then(Value::as_u64) == Some(pid)).collect();
    let mut by_name: BTreeMap<&str, u64> = BTreeMap::new();
    for ev in mine.iter().filter(|ev| ev.get("ph").and_then(Value::as_str) == Some("X")) {
        *by_name.entry(ev.get("name").and_then(Value::as_str).unwrap_or("?")).or_default() += 1;
    }
    let want: BTreeMap<&str, u64> = [("open", 1), ("write", N), ("close", 1)].into_iter().collect();
    assert_eq!(by_name, want, "X events of pid {pid}");
    for ev in mine.iter().filter(|ev| ev.get("name").and_then(Value::as_str) == Some("write")) {
        let args = ev.get("args").unwrap_or(&Value::Null);
        assert_eq!(args.get("bytes").and_then(Value::as_u64), Some(64), "write event args: {ev}");
        assert_eq!(args.get("path").and_then(Value::as_str), Some(path.as_str()), "write event args: {ev}");
        assert!(ev.get("tid").is_some() && ev.get("ts").is_some() && ev.get("dur").is_some(), "{ev}");
    }
    let named = mine.iter().any(|ev| {
        ev.get("ph").and_then(Value::as_str) == Some("M")
            && ev.get("name").and_then(Value::as_str) == Some("process_name")
    });
    assert!(named, "no process_name metadata event for pid {pid}");
}
