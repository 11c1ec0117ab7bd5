//! Security: what the collector creates is private to the user, a hostile producer scribbling
//! over the ring cannot crash the collector or make it write elsewhere, setuid programs are
//! not profiled (and the launcher says so), other users' processes cannot join or are refused.
//! The tests that need a second user run when the suite runs as root (they switch to
//! `nobody`, uid 65534, with setpriv or in the program); otherwise they are skipped (said and
//! counted, see `mlprof_tests::skip`).

use mlprof_tests::*;
use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

const NOBODY: u32 = 65534;

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display())).mode()
}

fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

/// While an attach-mode collector serves a session, its segment `/dev/shm/mlprof-UID-NAME` is
/// owned by the user with mode 0600; in launcher mode the per-run segment is too (checked from
/// inside the command); the run files both write are 0600.  The segment is gone afterwards.
#[test]
fn segment_and_run_file_are_private() {
    let dir = TempDir::new("private");
    let session = unique_session("private");
    let out = dir.join("run.bin");
    let mut collector = AttachCollector::start(&out, &session);
    let shm = Path::new("/dev/shm").join(format!("mlprof-{}-{session}", euid()));
    let meta = std::fs::metadata(&shm).unwrap_or_else(|e| panic!("stat {}: {e}", shm.display()));
    assert_eq!(meta.uid(), euid(), "segment owner");
    assert_eq!(meta.mode() & 0o777, 0o600, "segment mode {:o}", meta.mode());
    collector.stop_ok();
    assert_eq!(mode_of(&out) & 0o777, 0o600, "attach-mode run file mode {:o}", mode_of(&out));
    assert!(!shm.exists(), "segment left behind after the collector finished");

    let out2 = dir.join("launched.bin");
    let o = run_collect(&out2, &[], &["/bin/sh", "-c", "stat -c '%a %u' \"$MLPROF_SHM\""]);
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), format!("600 {}", euid()), "launcher segment");
    assert_eq!(mode_of(&out2) & 0o777, 0o600, "launcher run file mode {:o}", mode_of(&out2));
}

/// A hostile producer maps the session's segment and writes random bytes into lane blocks and
/// slots (and, the second time, into the header) for 1500 rounds while a real preloaded program
/// writes, with the collector draining all along.  The collector must survive and exit 0 on
/// SIGINT, its run file must read back (`summary`, `convert`), it must create nothing but its
/// run file, and the real program must be unaffected.
#[test]
fn garbage_producer_cannot_crash_the_collector() {
    let dir = TempDir::new("garbage");
    let garbage = compile("garbage", &dir);
    let writer = compile("writer", &dir);
    for (round, mode) in ["lanes", "all"].into_iter().enumerate() {
        let session = unique_session("garbage");
        let work = dir.join(format!("round{round}"));
        std::fs::create_dir(&work).unwrap();
        let before = listing(&work);
        let out = work.join("run.bin");
        let mut collector =
            AttachCollector::start_with_args(&out, &session, &["--lanes", "8", "--lane-records", "256"]);
        let data = dir.file(&format!("w{round}.dat"));
        let mut real = preloaded_command(&writer, &session);
        real.args([data.as_str(), "20000", "0"]);
        let mut scribbler = Command::new(&garbage);
        clean_env(&mut scribbler).env("MLPROF_SESSION", &session).args([&round.to_string(), "1500", mode]);
        let (g, w) = std::thread::scope(|sc| {
            let g = sc.spawn(|| output_with_timeout(scribbler, default_timeout()));
            let w = sc.spawn(|| output_with_timeout(real, default_timeout()));
            (g.join().unwrap(), w.join().unwrap())
        });
        assert!(g.status.success(), "garbage producer\n{}", describe(&g));
        assert_eq!(String::from_utf8_lossy(&g.stdout), "scribbled 1500\n");
        assert_eq!(w.status.code(), Some(0), "the real program\n{}", describe(&w));
        assert_eq!(String::from_utf8_lossy(&w.stdout), "done 20000\n");
        assert_eq!(std::fs::metadata(&data).unwrap().len(), 64 * 20000);
        let st = collector.stop();
        assert!(
            st.success(),
            "{mode}: collector exited {st:?} after a garbage producer; stderr:\n{}",
            collector.stderr()
        );
        let s = Summary::load(&out);
        assert!(!s.truncated(), "{mode}: run file not finalized");
        let _ = convert_trace(&out);
        let mut after = listing(&work);
        for made_by_test in ["run.bin", "run.summary.json", "run.trace.json"] {
            after.remove(made_by_test);
        }
        assert_eq!(after, before, "{mode}: the collector created files besides run.bin");
        let shm = Path::new("/dev/shm").join(format!("mlprof-{}-{session}", euid()));
        assert!(!shm.exists(), "{mode}: segment left behind");
    }
}

/// A setuid program (here: `writer`, owned by nobody, mode 4755, run by root) ignores
/// LD_PRELOAD: it runs normally, nothing of it is recorded, and the launcher prints one warning
/// line saying it cannot be profiled.  Needs root (to chown); skipped otherwise.
#[test]
fn setuid_program_is_not_profiled_and_the_launcher_says_so() {
    if !require_root("to make a setuid program of another user") {
        return;
    }
    let dir = TempDir::new("setuid");
    let prog = compile("writer", &dir);
    std::os::unix::fs::chown(&prog, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let out = dir.join("run.bin");
    let o = run_collect(&out, &[], &[&prog, "/dev/null", "10", "0"]);
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "done 10\n");
    let stderr = String::from_utf8_lossy(&o.stderr);
    let warnings: Vec<_> =
        stderr.lines().filter(|l| l.contains("setuid") && l.contains("cannot be profiled")).collect();
    assert_eq!(warnings.len(), 1, "want one setuid warning line; stderr:\n{stderr}");
    assert!(warnings[0].starts_with("mlprof-collect: warning:"), "{}", warnings[0]);
    let s = Summary::load(&out);
    assert_eq!(s.calls().count("write"), 0, "a setuid program's calls were recorded");
    assert!(s.procs_with_cmdline(&prog).is_empty(), "a setuid program was recorded");

    // The same program without the setuid bit is profiled and draws no warning.
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.join("plain.bin");
    let o = run_collect(&out, &[], &[&prog, "/dev/null", "10", "0"]);
    assert!(o.status.success(), "{}", describe(&o));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("cannot be profiled"), "{}", describe(&o));
    assert_eq!(clean_summary(&out).calls().count("write"), 10);
}

/// Another user's process cannot join: as `nobody`, pointed at root's session segment with
/// MLPROF_SHM (or at the session by name, which resolves to nobody's own, absent, segment), the
/// program runs normally and libmlprof prints exactly one `mlprof: no session` line; nothing of
/// it is in the run.  Needs root and setpriv; skipped otherwise.
#[test]
fn other_users_process_cannot_join() {
    if !require_root("to run a program as nobody")
        || !require_program("setpriv", "to run a program as nobody")
    {
        return;
    }
    let dir = TempDir::new("other-user");
    let prog = compile("writer", &dir);
    // A copy of the library that nobody can read whatever the build directory's permissions.
    let lib = dir.join("libmlprof.so");
    std::fs::copy(&bins().preload, &lib).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o755)).unwrap();
    let session = unique_session("other");
    let out = dir.join("run.bin");
    let mut collector = AttachCollector::start(&out, &session);
    let segment = format!("/dev/shm/mlprof-{}-{session}", euid());
    for (what, shm) in [("MLPROF_SHM of root's segment", Some(segment.as_str())), ("MLPROF_SESSION", None)] {
        let mut c = Command::new("setpriv");
        clean_env(&mut c);
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args([&prog, "/dev/null", "10", "0"])
            .env("LD_PRELOAD", &lib)
            .env("MLPROF_SESSION", &session);
        if let Some(shm) = shm {
            c.env("MLPROF_SHM", shm);
        }
        let o = output_with_timeout(c, default_timeout());
        assert!(o.status.success(), "{what}\n{}", describe(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "done 10\n", "{what}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<_> = stderr.lines().collect();
        assert!(
            lines.len() == 1 && lines[0].starts_with("mlprof: no session"),
            "{what}: want one `mlprof: no session` line, got:\n{stderr}"
        );
    }
    collector.stop_ok();
    // setpriv itself is root's process until it switches ids and execs: it may be recorded.
    let s = clean_summary(&out);
    let theirs: Vec<_> = s.processes().into_iter().filter(|p| p.cmdline().starts_with(&prog)).collect();
    assert!(theirs.is_empty(), "another user's process got into the run; summary {}", s.dump().display());
}

/// The collector's own check: a process that joined as root, was drained, then switched every
/// id to nobody starts a thread that writes 7 times.  That thread's lane belongs to another
/// user's process (/proc/<pid> is nobody's): the collector refuses its records and says so; the
/// 5 writes made as root are kept.  (The program stays alive until the collector drained the
/// thread's lane: the check reads /proc/<pid>, and a process already gone is not refused.)
/// Needs root; skipped otherwise.
#[test]
fn records_of_another_users_process_are_refused() {
    if !require_root("to switch a process to nobody") {
        return;
    }
    let dir = TempDir::new("refuse");
    let prog = compile("dropuid", &dir);
    let session = unique_session("refuse");
    let out = dir.join("run.bin");
    let mut collector = AttachCollector::start(&out, &session);
    let mut c = preloaded_command(&prog, &session);
    c.args([NOBODY.to_string(), "5".into(), "7".into()]);
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "dropped\n");
    collector.stop_ok();
    let refusals = collector.stderr_lines().iter().filter(|l| l.contains("refusing records of pid")).count();
    assert_eq!(refusals, 1, "want one refusal line; stderr:\n{}", collector.stderr());
    let s = clean_summary(&out);
    let p = s.proc_exact(&format!("{prog} {NOBODY} 5 7"));
    let mut e = s.expect();
    e.calls("dropuid", p.calls(), &[("write", 5), ("open", 1)], &[("write", 40)]);
    e.finish();
}

/// `setpriv` running `program` as nobody, in a clean environment.
fn as_nobody(program: &Path) -> Command {
    let mut c = Command::new("setpriv");
    clean_env(&mut c);
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(program);
    c
}

/// Copies of mlprof-collect and libmlprof.so that nobody can run whatever the build directory's
/// permissions, and a directory nobody can write its run files to: (collector, directory).
fn nobodys_collector(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    for from in [&bins().collect, &bins().preload] {
        let to = bin.join(from.file_name().unwrap());
        std::fs::copy(from, &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let work = dir.join("nobody");
    std::fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(NOBODY), Some(NOBODY)).unwrap();
    (bin.join("mlprof-collect"), work)
}

/// The lines of `stderr` that say a leftover was removed.
fn removals(stderr: &str) -> Vec<String> {
    stderr.lines().filter(|l| l.starts_with("mlprof-collect: removed")).map(str::to_string).collect()
}

fn removal(segment: &Path, pid: u32) -> String {
    format!(
        "mlprof-collect: removed {}, left behind by mlprof-collect pid {pid}, which is gone",
        segment.display()
    )
}

/// Two users' attach collectors killed with SIGKILL leave their segments in one shm directory
/// (world-writable like /dev/shm; a directory of the test's own, since collectors of other
/// tests sweep /dev/shm), beside a live collector of root's and a file of nobody's under root's
/// names holding a copy of root's dead ring. Root's next collector removes root's leftover
/// only, and says so; root could remove the others, and must not. Nobody's next collector
/// removes nobody's. Needs root and setpriv; skipped otherwise.
#[test]
fn each_user_sweeps_only_their_own_leftovers() {
    if !require_root("to run a collector as nobody")
        || !require_program("setpriv", "to run a collector as nobody")
    {
        return;
    }
    let dir = TempDir::new("leftovers-two-users");
    let (collect, work) = nobodys_collector(&dir);
    let shm = ShmDir::new("leftovers-two-users");
    let attach = |mut c: Command, out: std::path::PathBuf, name: &str| {
        let session = unique_session(name);
        c.env("MLPROF_SHM_DIR", shm.path()).arg("--out").arg(&out).args([
            "--session",
            &session,
            "--no-energy",
        ]);
        (AttachCollector::start_command(c, &out, &session), session)
    };
    let root_collect = || {
        let mut c = Command::new(&bins().collect);
        clean_env(&mut c);
        c
    };
    // The live one first: a collector of root's started after the kill would sweep.
    let (mut live, live_session) = attach(root_collect(), dir.join("live.bin"), "live");
    let served = shm.join(format!("mlprof-{}-{live_session}", euid()));
    let (mut theirs, their_session) = attach(as_nobody(&collect), work.join("killed.bin"), "nobody");
    let their_pid = theirs.pid();
    theirs.kill9();
    let their_segment = shm.join(format!("mlprof-{NOBODY}-{their_session}"));
    let (mut mine, my_session) = attach(root_collect(), dir.join("killed.bin"), "root");
    let my_pid = mine.pid();
    mine.kill9();
    let my_segment = shm.join(format!("mlprof-{}-{my_session}", euid()));
    let planted = shm.join(format!("mlprof-{}-{}", euid(), unique_session("planted")));
    let mut header = vec![0u8; 4096];
    std::io::Read::read_exact(&mut std::fs::File::open(&my_segment).unwrap(), &mut header)
        .unwrap_or_else(|e| panic!("read {}: {e}", my_segment.display()));
    std::fs::write(&planted, header).unwrap();
    std::os::unix::fs::chown(&planted, Some(NOBODY), Some(NOBODY)).unwrap();

    let mut next = collect_command(&dir.join("next.bin"), &["--no-energy"], &["true"]);
    next.env("MLPROF_SHM_DIR", shm.path());
    let o = output_with_timeout(next, default_timeout());
    assert!(o.status.success(), "root's next collector\n{}", describe(&o));
    assert_eq!(
        removals(&String::from_utf8_lossy(&o.stderr)),
        [removal(&my_segment, my_pid)],
        "{}",
        describe(&o)
    );
    assert!(!my_segment.exists(), "root's leftover is still there");
    for (what, kept) in
        [("nobody's leftover", &their_segment), ("nobody's file", &planted), ("the live one", &served)]
    {
        assert!(kept.exists(), "root's collector removed {what}, {}", kept.display());
    }
    live.stop_ok();

    let mut next = as_nobody(&collect);
    next.env("MLPROF_SHM_DIR", shm.path()).arg("--out").arg(work.join("next.bin")).args([
        "--no-energy",
        "--",
        "true",
    ]);
    let o = output_with_timeout(next, default_timeout());
    assert!(o.status.success(), "nobody's next collector\n{}", describe(&o));
    assert_eq!(
        removals(&String::from_utf8_lossy(&o.stderr)),
        [removal(&their_segment, their_pid)],
        "{}",
        describe(&o)
    );
    assert!(!their_segment.exists(), "nobody's leftover is still there");
    assert!(planted.exists(), "nobody's collector removed a file under root's names");
}

/// Another user creates the name of a session's segment before its collector does (the shm
/// directory is writable by all): the collector refuses with an error that says the file is
/// another user's and what to do, and leaves the file alone; another session then works. Both
/// ways: root's file at nobody's name, and nobody's at root's (which root could remove). Needs
/// root and setpriv; skipped otherwise.
#[test]
fn a_session_name_another_user_took_is_refused_and_left_alone() {
    if !require_root("to act as two users") || !require_program("setpriv", "to run a collector as nobody") {
        return;
    }
    let dir = TempDir::new("name-taken");
    let (collect, work) = nobodys_collector(&dir);
    let shm = ShmDir::new("name-taken");
    let session = unique_session("taken");
    let cases = [
        ("nobody's session, taken by root", as_nobody(&collect), NOBODY, 0, work.clone()),
        (
            "root's session, taken by nobody",
            Command::new(&bins().collect),
            euid(),
            NOBODY,
            dir.path().to_path_buf(),
        ),
    ];
    for (what, mut c, victim, owner, out_dir) in cases {
        let name = shm.join(format!("mlprof-{victim}-{session}"));
        std::fs::write(&name, b"mine").unwrap();
        std::os::unix::fs::chown(&name, Some(owner), Some(owner)).unwrap();
        clean_env(&mut c).env("MLPROF_SHM_DIR", shm.path());
        c.arg("--out").arg(out_dir.join("taken.bin")).args(["--session", &session, "--no-energy"]);
        let o = output_with_timeout(c, default_timeout());
        assert_eq!(o.status.code(), Some(2), "{what}: the collector refuses\n{}", describe(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        let said = format!(
            "mlprof-collect: error: cannot create the ring {}: it belongs to another user (uid {owner})",
            name.display()
        );
        assert!(stderr.starts_with(&said), "{what}: want {said:?}\n{stderr}");
        for advice in ["--session NAME", "MLPROF_SESSION=NAME", "MLPROF_SHM_DIR"] {
            assert!(stderr.contains(advice), "{what}: no {advice:?} in\n{stderr}");
        }
        assert_eq!(std::fs::read(&name).unwrap(), b"mine", "{what}: the other user's file was touched");
        assert_eq!(std::fs::metadata(&name).unwrap().uid(), owner, "{what}");
    }
    // The advice works: another session.
    let mut c = Command::new(&bins().collect);
    clean_env(&mut c).env("MLPROF_SHM_DIR", shm.path());
    let other = unique_session("untaken");
    c.arg("--out").arg(dir.join("other.bin")).args(["--session", &other, "--no-energy"]);
    AttachCollector::start_command(c, &dir.join("other.bin"), &other).stop_ok();
}
