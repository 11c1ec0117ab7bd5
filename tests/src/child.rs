//! Running children: a clean environment, a watchdog that kills a hung process group, and the
//! launcher (`mlprof-collect -- CMD`) and attach-mode (`LD_PRELOAD`) command lines.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::locations::bins;

/// Per-command time limit (`$MLPROF_TEST_TIMEOUT` seconds, default 120).
pub fn default_timeout() -> Duration {
    let secs = std::env::var("MLPROF_TEST_TIMEOUT").ok().and_then(|s| s.parse().ok()).unwrap_or(120);
    Duration::from_secs(secs)
}

/// Removes the variables that steer mlprof from `cmd`'s environment (`LD_PRELOAD` and every
/// variable of the option table, `format/src/options.rs`), so that the tests do not depend on
/// the environment they are started from.  A test sets what it needs afterwards.
pub fn clean_env(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("LD_PRELOAD");
    for option in mlprof_format::options::ENV_OPTIONS {
        cmd.env_remove(option.name);
    }
    cmd
}

/// Kills the process group `pgid` with SIGKILL unless `done` fires within `limit`.
/// Returns the watchdog; join it to learn whether it fired.
pub(crate) fn watchdog(pgid: u32, limit: Duration) -> (mpsc::Sender<()>, thread::JoinHandle<bool>) {
    let (tx, rx) = mpsc::channel::<()>();
    let h = thread::spawn(move || match rx.recv_timeout(limit) {
        Err(mpsc::RecvTimeoutError::Timeout) => {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
            true
        }
        _ => false,
    });
    (tx, h)
}

/// Kills a process group if it outlives a time limit; disarmed on drop.
/// Use it around children the test drives by hand (pipes, signals), so a
/// hung profiler fails the test instead of hanging it.
pub struct Guard {
    tx: Option<mpsc::Sender<()>>,
    dog: Option<thread::JoinHandle<bool>>,
}

impl Guard {
    /// Guards the process group `pgid` (spawn the child with `process_group(0)`).
    pub fn new(pgid: u32, limit: Duration) -> Guard {
        let (tx, dog) = watchdog(pgid, limit);
        Guard { tx: Some(tx), dog: Some(dog) }
    }

    /// Disarms the guard; returns true when it had already fired.
    pub fn fired(mut self) -> bool {
        self.tx.take();
        self.dog.take().map(|d| d.join().unwrap_or(false)).unwrap_or(false)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(d) = self.dog.take() {
            let _ = d.join();
        }
    }
}

/// A child the test drives by hand: stdout and stderr piped, stdin piped or /dev/null, its
/// own process group under a [`Guard`].  The program says where it is on stdout ("ready",
/// "paused", ...), the test acts (signals, kills the collector) and answers on stdin.
pub struct Driven {
    pub child: Child,
    stdout: BufReader<ChildStdout>,
    guard: Guard,
}

/// How a [`Driven`] child ended.
pub struct Finished {
    pub status: ExitStatus,
    /// stdout after the lines read with [`Driven::expect_line`].
    pub stdout: String,
    pub stderr: String,
}

impl Driven {
    /// Starts `cmd` (stdin piped when `stdin`, else /dev/null), killed with its process group
    /// if it outlives `limit`.
    pub fn spawn(mut cmd: Command, stdin: bool, limit: Duration) -> Driven {
        cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let guard = Guard::new(child.id(), limit);
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Driven { child, stdout, guard }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads one line of stdout and asserts that it is `want` (with its newline).
    pub fn expect_line(&mut self, want: &str, what: &str) {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap_or_else(|e| panic!("{what}: read stdout: {e}"));
        assert_eq!(line, want, "{what}");
    }

    /// Writes one command line to stdin, keeping it open for the next.
    pub fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("stdin piped and not yet closed");
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.write_all(b"\n"))
            .expect("write to the child's stdin");
        stdin.flush().expect("flush the child's stdin");
    }

    /// Reads one line of stdout (without its newline).
    pub fn read_line(&mut self, what: &str) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap_or_else(|e| panic!("{what}: read stdout: {e}"));
        assert!(line.ends_with('\n'), "{what}: stdout ended");
        line.trim_end().to_string()
    }

    /// Writes `bytes` to stdin and closes it.
    pub fn send(&mut self, bytes: &[u8]) {
        let mut stdin = self.child.stdin.take().expect("stdin piped and not yet closed");
        stdin.write_all(bytes).expect("write to the child's stdin");
    }

    /// Reads stdout and stderr to their end (the end of every process holding them), waits for
    /// the child and returns how it ended.  Fails with `hung` when the watchdog had to kill it.
    pub fn finish(mut self, hung: &str) -> Finished {
        let mut stdout = String::new();
        self.stdout.read_to_string(&mut stdout).expect("read the child's stdout");
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut stderr).expect("read the child's stderr");
        }
        let status = self.child.wait().expect("wait for the child");
        assert!(!self.guard.fired(), "{hung}; stdout {stdout:?}; stderr:\n{stderr}");
        Finished { status, stdout, stderr }
    }
}

/// Runs `cmd` in its own process group with stdout/stderr captured, killing
/// the whole group if it runs longer than `limit`.  stdin is /dev/null.
pub fn output_with_timeout(cmd: Command, limit: Duration) -> Output {
    let desc = format!("{cmd:?}");
    try_output_with_timeout(cmd, limit).unwrap_or_else(|e| panic!("cannot start {desc}: {e}"))
}

/// Like [`output_with_timeout`], but a command that cannot be started is an error for the
/// caller to judge (a missing tool can be a reason to skip); a timeout still fails the test.
pub fn try_output_with_timeout(mut cmd: Command, limit: Duration) -> io::Result<Output> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let desc = format!("{cmd:?}");
    let child = cmd.spawn()?;
    let (tx, dog) = watchdog(child.id(), limit);
    let out = child.wait_with_output().expect("wait for child");
    drop(tx);
    if dog.join().unwrap_or(false) {
        panic!(
            "command timed out after {limit:?} and was killed: {desc}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out)
}

/// Describes an `Output` for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "status: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `mlprof-collect --out OUT ARGS... -- CMD...` (launcher mode) as a `Command`
/// with a clean environment.
pub fn collect_command<S: AsRef<OsStr>>(out: &Path, args: &[&str], cmd: &[S]) -> Command {
    let mut c = Command::new(&bins().collect);
    c.arg("--out").arg(out).args(args).arg("--").args(cmd);
    clean_env(&mut c);
    c
}

/// Runs `mlprof-collect --out OUT ARGS... -- CMD...` and returns its output.
pub fn run_collect<S: AsRef<OsStr>>(out: &Path, args: &[&str], cmd: &[S]) -> Output {
    output_with_timeout(collect_command(out, args, cmd), default_timeout())
}

/// Like [`run_collect`] with extra environment variables for the collector
/// (and so for CMD, which inherits them).
pub fn run_collect_env<S: AsRef<OsStr>>(
    out: &Path,
    args: &[&str],
    cmd: &[S],
    env: &[(&str, &str)],
    limit: Duration,
) -> Output {
    let mut c = collect_command(out, args, cmd);
    for (k, v) in env {
        c.env(k, v);
    }
    output_with_timeout(c, limit)
}

/// Runs `cmd` under the launcher and asserts that it exited 0 and wrote `out`.
pub fn run_collect_ok<S: AsRef<OsStr>>(out: &Path, cmd: &[S]) -> Output {
    let o = run_collect(out, &[], cmd);
    assert!(o.status.success(), "mlprof-collect failed\n{}", describe(&o));
    assert!(out.is_file(), "mlprof-collect did not write {}\n{}", out.display(), describe(&o));
    o
}

/// A command that joins attach-mode session `session` through LD_PRELOAD.
pub fn preloaded_command<S: AsRef<OsStr>>(program: S, session: &str) -> Command {
    let mut c = Command::new(program);
    clean_env(&mut c);
    c.env("LD_PRELOAD", &bins().preload).env("MLPROF_SESSION", session);
    c
}

/// The exit status as the shell reports it: the code, or 128 + signal.
pub fn shell_status(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}
