//! Python under the launcher: multiprocessing with the fork, spawn and
//! forkserver start methods, and threads (scripts in tests/scripts/).

use mlprof_tests::*;

const WORKERS: u64 = 3;
const WRITES: u64 = 40;

/// Runs mp_workers.py with `method` and checks, per worker file, the exact
/// os.write count and bytes, and that the pid written into the file is a
/// recorded process in the right place of the tree.
fn multiprocessing(method: &str) {
    let dir = TempDir::new(&format!("mp-{method}"));
    let py = python();
    let script = script("mp_workers.py");
    let d = dir.str();
    let out = dir.join("run.bin");
    let cmd = [
        py.display().to_string(),
        script.display().to_string(),
        method.to_string(),
        d.clone(),
        WORKERS.to_string(),
        WRITES.to_string(),
    ];
    run_collect_ok(&out, &cmd);
    let s = clean_summary(&out);
    let mut e = s.expect();

    let mut worker_pids = Vec::new();
    for i in 0..WORKERS {
        let path = dir.file(&format!("w{i}.dat"));
        let n = WRITES + i;
        e.file(s.file(&path), 1, &[("write", n)], 0, 16 * n);
        let content = std::fs::read_to_string(&path).unwrap();
        let pid: u64 = content.lines().next().and_then(|l| l.trim().parse().ok()).expect("pid record");
        worker_pids.push(pid);
        let entries = s.procs_with_pid(pid);
        e.that(format_args!("worker {i} (pid {pid}) is a recorded process"), !entries.is_empty());
        for p in &entries {
            e.that(
                format_args!("worker {i} (pid {pid}) write count {} >= {n}", p.calls().count("write")),
                p.calls().count("write") >= n,
            );
        }
    }

    let mains: Vec<_> = s
        .procs_with_cmdline("mp_workers.py")
        .into_iter()
        .filter(|p| !worker_pids.contains(&p.pid()))
        .collect();
    e.that(format_args!("exactly one main process, found {}", mains.len()), mains.len() == 1);
    if let Some(main) = mains.first() {
        let main_pid = main.pid();
        for &pid in &worker_pids {
            let entries = s.procs_with_pid(pid);
            let Some(w) = entries.last() else { continue };
            match method {
                "fork" => {
                    e.that(
                        format_args!("fork worker {pid}: ppid {} == main {main_pid}", w.ppid()),
                        w.ppid() == main_pid,
                    );
                    e.that(
                        format_args!("fork worker {pid} has the main cmdline, got {:?}", w.cmdline()),
                        w.cmdline() == main.cmdline(),
                    );
                }
                "spawn" => {
                    e.that(
                        format_args!("spawn worker {pid}: ppid {} == main {main_pid}", w.ppid()),
                        w.ppid() == main_pid,
                    );
                    e.that(
                        format_args!(
                            "spawn worker {pid} is an exec'd interpreter, cmdline {:?}",
                            w.cmdline()
                        ),
                        w.cmdline().contains("spawn_main"),
                    );
                }
                "forkserver" => {
                    let server: Vec<_> = s.procs_with_pid(w.ppid());
                    e.that(
                        format_args!(
                            "forkserver worker {pid}: parent {} is the forkserver (child of main {main_pid}); parent entries: {:?}",
                            w.ppid(),
                            server.iter().map(|p| p.describe()).collect::<Vec<_>>()
                        ),
                        server.iter().any(|p| p.cmdline().contains("forkserver") && p.ppid() == main_pid),
                    );
                }
                _ => unreachable!(),
            }
        }
    }
    e.finish();
}

#[test]
fn multiprocessing_fork() {
    multiprocessing("fork");
}

#[test]
fn multiprocessing_spawn() {
    multiprocessing("spawn");
}

#[test]
fn multiprocessing_forkserver() {
    multiprocessing("forkserver");
}

/// Python threads each write and pread their own file concurrently.
#[test]
fn python_threads() {
    const THREADS: u64 = 4;
    const N: u64 = 60;
    let dir = TempDir::new("py-threads");
    let py = python();
    let script = script("py_threads.py");
    let d = dir.str();
    let out = dir.join("run.bin");
    let cmd = [
        py.display().to_string(),
        script.display().to_string(),
        d.clone(),
        THREADS.to_string(),
        N.to_string(),
    ];
    run_collect_ok(&out, &cmd);
    let s = clean_summary(&out);
    let mut e = s.expect();
    for i in 0..THREADS {
        let n = N + i;
        let f = s.file(&dir.file(&format!("t{i}.dat")));
        // CPython calls pread64 (built with _FILE_OFFSET_BITS=64); accept either name.
        e.eq(
            format_args!("file t{i}.dat: by_call.pread + by_call.pread64"),
            f.by_call("pread") + f.by_call("pread64"),
            n,
        );
        e.file(f, 1, &[("write", n)], 16 * n, 32 * n);
    }
    e.expect_one_main(&s, "py_threads.py");
    e.finish();
}

trait MainCheck {
    fn expect_one_main(&mut self, s: &Summary, needle: &str);
}

impl MainCheck for Expect<'_> {
    /// The script ran as exactly one process (threads are not processes).
    fn expect_one_main(&mut self, s: &Summary, needle: &str) {
        let n = s.procs_with_cmdline(needle).len();
        self.that(format_args!("one process running {needle}, found {n}"), n == 1);
    }
}
