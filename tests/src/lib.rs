//! Harness for the mlprof end-to-end tests.
//!
//! The tests run the release binaries (`mlprof-collect`, `mlprof`,
//! `libmlprof.so`) exactly as a user would and check the JSON printed by
//! `mlprof summary --json` against docs/interfaces.md.
//!
//! * Binaries come from `$MLPROF_BIN_DIR`, else `$CARGO_TARGET_DIR/release`,
//!   else `<workspace>/target/release` (run `cargo build --release` first).
//! * C programs in `tests/programs/*.c` are compiled per test with
//!   `gcc -O1 -pthread` into a unique temporary directory.
//! * Python comes from `$MLPROF_TEST_PYTHON`, else the mlprof venv, else
//!   `python3`.
//! * Every child runs under a watchdog (`$MLPROF_TEST_TIMEOUT` seconds,
//!   default 120) that kills its process group, so a hung profiler fails the
//!   test instead of hanging it.  Nothing sleeps to synchronise: attach-mode
//!   tests wait for the collector's `session 'NAME' ready` line.
//! * Temporary directories are removed when a test passes and kept (with
//!   their path printed) when it fails, or always with `MLPROF_KEEP_TMP=1`.

use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Environment variables that steer libmlprof; removed from every child so
/// that the tests do not depend on the environment they are started from.
const MLPROF_ENV: &[&str] =
    &["LD_PRELOAD", "MLPROF_SHM", "MLPROF_SESSION", "MLPROF_CLOCK", "MLPROF_QUIET", "MLPROF_PRELOAD"];

// ---------------------------------------------------------------------------
// Locations

/// `<workspace>` (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests crate has a parent directory").to_path_buf()
}

/// `<workspace>/tests`.
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A Python script in `tests/scripts/`.
pub fn script(name: &str) -> PathBuf {
    tests_dir().join("scripts").join(name)
}

/// The profiler's binaries.
#[derive(Debug)]
pub struct Bins {
    pub dir: PathBuf,
    pub collect: PathBuf,
    pub mlprof: PathBuf,
    pub preload: PathBuf,
}

/// Finds the binaries once; panics with a clear message when they are missing.
pub fn bins() -> &'static Bins {
    static BINS: OnceLock<Bins> = OnceLock::new();
    BINS.get_or_init(|| {
        let dir = match std::env::var_os("MLPROF_BIN_DIR") {
            Some(d) => PathBuf::from(d),
            None => match std::env::var_os("CARGO_TARGET_DIR") {
                Some(t) => PathBuf::from(t).join("release"),
                None => workspace_root().join("target").join("release"),
            },
        };
        let bins = Bins {
            collect: dir.join("mlprof-collect"),
            mlprof: dir.join("mlprof"),
            preload: dir.join("libmlprof.so"),
            dir,
        };
        let missing: Vec<String> = [&bins.collect, &bins.mlprof, &bins.preload]
            .into_iter()
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            panic!(
                "mlprof binaries not found: {}\n\
                 run cargo build --release first (or set MLPROF_BIN_DIR to the directory \
                 holding mlprof-collect, mlprof and libmlprof.so)",
                missing.join(", ")
            );
        }
        bins
    })
}

/// The Python interpreter for the Python tests.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("MLPROF_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new("/root/.cache/mlprof-venv/bin/python");
    if venv.exists() {
        return venv.to_path_buf();
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = Path::new(&home).join(".cache/mlprof-venv/bin/python");
        if p.exists() {
            return p;
        }
    }
    PathBuf::from("python3")
}

/// True when the test Python can import torch, torchvision and PIL; otherwise the test fails
/// with a clear message, or (with `MLPROF_SKIP_TORCH=1`) says why and returns false to skip.
pub fn torch_available() -> bool {
    let py = python();
    let mut c = Command::new(&py);
    clean_env(&mut c).args(["-c", "import torch, torchvision, PIL"]);
    let o = output_with_timeout(c, default_timeout());
    if o.status.success() {
        return true;
    }
    let why = format!(
        "{} cannot import torch/torchvision/PIL (set MLPROF_TEST_PYTHON to a Python that has them):\n{}",
        py.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    if std::env::var("MLPROF_SKIP_TORCH").as_deref() == Ok("1") {
        eprintln!("skipping the PyTorch test (MLPROF_SKIP_TORCH=1): {why}");
        return false;
    }
    panic!("{why}\n(set MLPROF_SKIP_TORCH=1 to skip this test)");
}

// ---------------------------------------------------------------------------
// Unique names and temporary directories

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn unique_suffix() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{}-{}-{:x}", std::process::id(), n, nanos)
}

/// A session name no other test (or other test run) uses.
pub fn unique_session(tag: &str) -> String {
    format!("t-{tag}-{}", unique_suffix())
}

/// A directory under `std::env::temp_dir()` that is unique to one test.
/// Removed on drop unless the test panicked or `MLPROF_KEEP_TMP` is set.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("mlprof-test-{tag}-{}", unique_suffix()));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("create temp dir {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }

    /// The path as a `String` (temp paths are ASCII; cmdlines compare as text).
    pub fn str(&self) -> String {
        self.path.display().to_string()
    }

    /// `path/name` as a `String`.
    pub fn file(&self, name: &str) -> String {
        self.join(name).display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if thread::panicking() || std::env::var_os("MLPROF_KEEP_TMP").is_some() {
            eprintln!("kept test directory {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

// ---------------------------------------------------------------------------
// C programs

/// Runs gcc with `args`; fails the test with gcc's messages if it fails.
pub fn gcc<S: AsRef<OsStr>>(args: &[S]) {
    let o = Command::new("gcc")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc: {e}"));
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    assert!(o.status.success(), "gcc {shown:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
}

/// Compiles `tests/programs/<name>.c` into `dir/<name>` and returns its path.
pub fn compile(name: &str, dir: &TempDir) -> String {
    let src = tests_dir().join("programs").join(format!("{name}.c"));
    let out = dir.join(name).display().to_string();
    let src = src.display().to_string();
    gcc(&["-O1", "-pthread", "-U_FORTIFY_SOURCE", "-Wall", "-o", &out, &src]);
    out
}

// ---------------------------------------------------------------------------
// Running children

/// Per-command time limit (`$MLPROF_TEST_TIMEOUT` seconds, default 120).
pub fn default_timeout() -> Duration {
    let secs = std::env::var("MLPROF_TEST_TIMEOUT").ok().and_then(|s| s.parse().ok()).unwrap_or(120);
    Duration::from_secs(secs)
}

/// Removes the variables that steer libmlprof from `cmd`'s environment.
pub fn clean_env(cmd: &mut Command) -> &mut Command {
    for k in MLPROF_ENV {
        cmd.env_remove(k);
    }
    cmd
}

/// Kills the process group `pgid` with SIGKILL unless `done` fires within `limit`.
/// Returns the watchdog; join it to learn whether it fired.
fn watchdog(pgid: u32, limit: Duration) -> (mpsc::Sender<()>, thread::JoinHandle<bool>) {
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

/// Runs `cmd` in its own process group with stdout/stderr captured, killing
/// the whole group if it runs longer than `limit`.  stdin is /dev/null.
pub fn output_with_timeout(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let desc = format!("{cmd:?}");
    let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {desc}: {e}"));
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
    out
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

// ---------------------------------------------------------------------------
// Attach-mode collector

/// A `mlprof-collect --out OUT --session NAME` process serving a session.
pub struct AttachCollector {
    child: Option<Child>,
    pub session: String,
    pub out: PathBuf,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<thread::JoinHandle<()>>,
}

impl AttachCollector {
    /// Starts the collector and returns once it printed `session 'NAME' ready`.
    pub fn start(out: &Path, session: &str) -> AttachCollector {
        Self::start_with_args(out, session, &[])
    }

    /// Like [`AttachCollector::start`] with extra options (`--lanes 4`, `--lane-records 64`, ...).
    pub fn start_with_args(out: &Path, session: &str, args: &[&str]) -> AttachCollector {
        let mut cmd = Command::new(&bins().collect);
        clean_env(&mut cmd);
        cmd.arg("--out")
            .arg(out)
            .arg("--session")
            .arg(session)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let sink = Arc::clone(&lines);
        let reader = thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let mut c = AttachCollector {
            child: Some(child),
            session: session.to_string(),
            out: out.to_path_buf(),
            lines,
            reader: Some(reader),
        };
        let want = format!("session '{session}' ready");
        let deadline = Instant::now() + default_timeout();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(&want) => break,
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("collector did not print {want:?} in time; stderr:\n{}", c.stderr())
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = c.child.as_mut().and_then(|ch| ch.wait().ok());
                    panic!(
                        "collector closed stderr before printing {want:?} (status {status:?}); stderr:\n{}",
                        c.stderr()
                    )
                }
            }
        }
        c
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("collector running").id()
    }

    /// Everything the collector printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Stderr lines so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn signal_and_wait(&mut self, sig: i32) -> ExitStatus {
        let mut child = self.child.take().expect("collector running");
        // SAFETY: kill(2) on our own unreaped child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let (tx, dog) = watchdog(child.id(), default_timeout());
        let status = child.wait().expect("wait for collector");
        drop(tx);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        if dog.join().unwrap_or(false) {
            panic!(
                "collector did not exit within {:?} after signal {sig}; stderr:\n{}",
                default_timeout(),
                self.stderr()
            );
        }
        status
    }

    /// SIGINT, wait, and return the exit status (stderr stays readable).
    pub fn stop(&mut self) -> ExitStatus {
        self.signal_and_wait(libc::SIGINT)
    }

    /// SIGINT, wait, and assert a clean exit 0 and a written run file.
    pub fn stop_ok(&mut self) {
        let st = self.stop();
        assert!(st.success(), "attach collector exited with {st:?} after SIGINT; stderr:\n{}", self.stderr());
        assert!(self.out.is_file(), "collector did not write {}", self.out.display());
    }

    /// SIGKILL and wait.
    pub fn kill9(&mut self) -> ExitStatus {
        self.signal_and_wait(libc::SIGKILL)
    }
}

impl Drop for AttachCollector {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------------------
// Summary JSON

/// Runs `mlprof summary --json RUN` and returns the parsed object.
pub fn summary_json(run_bin: &Path) -> Value {
    let mut c = Command::new(&bins().mlprof);
    clean_env(&mut c);
    c.arg("summary").arg("--json").arg(run_bin);
    let out = output_with_timeout(c, default_timeout());
    assert!(out.status.success(), "mlprof summary --json {} failed\n{}", run_bin.display(), describe(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("mlprof summary --json printed invalid JSON ({e}):\n{}", String::from_utf8_lossy(&out.stdout))
    })
}

/// Runs `mlprof convert RUN -o RUN.trace.json` and returns the parsed trace.
pub fn convert_trace(run_bin: &Path) -> Value {
    let trace = run_bin.with_extension("trace.json");
    let mut c = Command::new(&bins().mlprof);
    clean_env(&mut c);
    c.arg("convert").arg(run_bin).arg("-o").arg(&trace);
    let out = output_with_timeout(c, default_timeout());
    assert!(out.status.success(), "mlprof convert failed\n{}", describe(&out));
    let text = std::fs::read(&trace)
        .unwrap_or_else(|e| panic!("mlprof convert did not write {}: {e}", trace.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("invalid trace JSON in {}: {e}", trace.display()))
}

fn u64_of(v: &Value, key: &str) -> u64 {
    match v.get(key) {
        None | Some(Value::Null) => 0,
        Some(x) => x.as_u64().unwrap_or_else(|| panic!("field {key:?} is not an unsigned integer: {x}")),
    }
}

/// A `"calls"` object: function name -> CALLSTATS.  Missing functions read as 0.
#[derive(Clone, Copy)]
pub struct Calls<'a>(pub &'a Value);

impl<'a> Calls<'a> {
    fn stat(&self, func: &str, field: &str) -> u64 {
        self.0.get(func).map(|s| u64_of(s, field)).unwrap_or(0)
    }
    pub fn count(&self, func: &str) -> u64 {
        self.stat(func, "count")
    }
    pub fn errors(&self, func: &str) -> u64 {
        self.stat(func, "errors")
    }
    pub fn bytes(&self, func: &str) -> u64 {
        self.stat(func, "bytes")
    }
    pub fn total_ns(&self, func: &str) -> u64 {
        self.stat(func, "total_ns")
    }
    /// `func -> count` for every function present.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.0
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), u64_of(v, "count"))).collect())
            .unwrap_or_default()
    }
}

/// One entry of `"processes"`.
#[derive(Clone, Copy)]
pub struct Proc<'a>(pub &'a Value);

impl<'a> Proc<'a> {
    pub fn pid(&self) -> u64 {
        u64_of(self.0, "pid")
    }
    pub fn ppid(&self) -> u64 {
        u64_of(self.0, "ppid")
    }
    pub fn cmdline(&self) -> &'a str {
        self.0.get("cmdline").and_then(Value::as_str).unwrap_or("")
    }
    pub fn exit_code(&self) -> Option<i64> {
        self.0.get("exit_code").and_then(Value::as_i64)
    }
    pub fn calls(&self) -> Calls<'a> {
        Calls(self.0.get("calls").unwrap_or(&Value::Null))
    }
    pub fn describe(&self) -> String {
        format!(
            "pid {} ppid {} exit {:?} cmdline {:?} calls {:?}",
            self.pid(),
            self.ppid(),
            self.exit_code(),
            self.cmdline(),
            self.calls().counts()
        )
    }
}

/// One entry of `"files"`.
#[derive(Clone, Copy)]
pub struct FileEntry<'a>(pub &'a Value);

impl<'a> FileEntry<'a> {
    pub fn path(&self) -> &'a str {
        self.0.get("path").and_then(Value::as_str).unwrap_or("")
    }
    pub fn opens(&self) -> u64 {
        u64_of(self.0, "opens")
    }
    pub fn calls(&self) -> u64 {
        u64_of(self.0, "calls")
    }
    pub fn bytes_read(&self) -> u64 {
        u64_of(self.0, "bytes_read")
    }
    pub fn bytes_written(&self) -> u64 {
        u64_of(self.0, "bytes_written")
    }
    /// `by_call[func]`, 0 when absent.
    pub fn by_call(&self, func: &str) -> u64 {
        self.0.get("by_call").map(|b| u64_of(b, func)).unwrap_or(0)
    }
}

/// The parsed output of `mlprof summary --json` for one run file.
pub struct Summary {
    pub json: Value,
    pub run_bin: PathBuf,
}

impl Summary {
    pub fn load(run_bin: &Path) -> Summary {
        Summary { json: summary_json(run_bin), run_bin: run_bin.to_path_buf() }
    }

    pub fn events(&self) -> u64 {
        u64_of(&self.json, "events")
    }
    pub fn dropped(&self) -> u64 {
        u64_of(&self.json, "dropped")
    }
    pub fn truncated(&self) -> bool {
        match self.json.get("truncated") {
            Some(Value::Bool(b)) => *b,
            other => panic!("summary field \"truncated\" is not a bool: {other:?}"),
        }
    }

    /// Whole-tree call statistics.
    pub fn calls(&self) -> Calls<'_> {
        Calls(self.json.get("calls").unwrap_or(&Value::Null))
    }

    pub fn processes(&self) -> Vec<Proc<'_>> {
        self.json
            .get("processes")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(Proc).collect())
            .unwrap_or_default()
    }

    pub fn files(&self) -> Vec<FileEntry<'_>> {
        self.json
            .get("files")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(FileEntry).collect())
            .unwrap_or_default()
    }

    /// Writes the pretty JSON next to the run file and returns its path
    /// (used in failure messages instead of dumping large objects).
    pub fn dump(&self) -> PathBuf {
        let p = self.run_bin.with_extension("summary.json");
        let _ = std::fs::write(&p, serde_json::to_string_pretty(&self.json).unwrap_or_default());
        p
    }

    fn processes_listing(&self) -> String {
        let mut s = String::new();
        for p in self.processes() {
            let _ = writeln!(s, "  {}", p.describe());
        }
        s
    }

    /// Asserts `dropped == 0` and `truncated == false`.
    pub fn assert_clean(&self) {
        assert_eq!(self.dropped(), 0, "records were dropped; summary in {}", self.dump().display());
        assert!(!self.truncated(), "run file is truncated; summary in {}", self.dump().display());
    }

    /// Processes whose cmdline contains `needle`.
    pub fn procs_with_cmdline(&self, needle: &str) -> Vec<Proc<'_>> {
        self.processes().into_iter().filter(|p| p.cmdline().contains(needle)).collect()
    }

    /// The single process whose cmdline equals `cmdline` exactly.
    pub fn proc_exact(&self, cmdline: &str) -> Proc<'_> {
        let v: Vec<_> = self.processes().into_iter().filter(|p| p.cmdline() == cmdline).collect();
        assert_eq!(
            v.len(),
            1,
            "want exactly one process with cmdline {cmdline:?}; processes:\n{}",
            self.processes_listing()
        );
        v[0]
    }

    /// The single process with cmdline `cmdline` whose parent does not have
    /// that cmdline (the top of a tree of forked copies).
    pub fn root_exact(&self, cmdline: &str) -> Proc<'_> {
        let same: Vec<_> = self.processes().into_iter().filter(|p| p.cmdline() == cmdline).collect();
        let roots: Vec<_> = same.iter().filter(|p| !same.iter().any(|q| q.pid() == p.ppid())).collect();
        assert_eq!(
            roots.len(),
            1,
            "want exactly one top process with cmdline {cmdline:?}; processes:\n{}",
            self.processes_listing()
        );
        *roots[0]
    }

    /// The process entries (one per exec'd image) of `pid`.
    pub fn procs_with_pid(&self, pid: u64) -> Vec<Proc<'_>> {
        self.processes().into_iter().filter(|p| p.pid() == pid).collect()
    }

    /// Process entries whose ppid is `pid`.
    pub fn children_of(&self, pid: u64) -> Vec<Proc<'_>> {
        self.processes().into_iter().filter(|p| p.ppid() == pid).collect()
    }

    /// The single process entry whose ppid is `pid`.
    pub fn child_of(&self, pid: u64) -> Proc<'_> {
        let v = self.children_of(pid);
        assert_eq!(
            v.len(),
            1,
            "want exactly one process with ppid {pid}; processes:\n{}",
            self.processes_listing()
        );
        v[0]
    }

    /// Asserts that exactly `n` processes match `needle` and returns them.
    pub fn expect_procs(&self, needle: &str, n: usize) -> Vec<Proc<'_>> {
        let v = self.procs_with_cmdline(needle);
        assert_eq!(
            v.len(),
            n,
            "want {n} processes whose cmdline contains {needle:?}; processes:\n{}",
            self.processes_listing()
        );
        v
    }

    /// The file entry whose path is exactly `path`, if any.
    pub fn file_opt(&self, path: &str) -> Option<FileEntry<'_>> {
        self.files().into_iter().find(|f| f.path() == path)
    }

    /// The file entry whose path is exactly `path`.
    pub fn file(&self, path: &str) -> FileEntry<'_> {
        self.file_opt(path).unwrap_or_else(|| {
            let paths: Vec<_> = self.files().iter().map(|f| f.path().to_string()).collect();
            panic!(
                "no file entry for {path:?}; summary in {}; {} paths, those in the same directory: {:?}",
                self.dump().display(),
                paths.len(),
                paths
                    .iter()
                    .filter(|p| Path::new(p).parent() == Path::new(path).parent())
                    .collect::<Vec<_>>()
            )
        })
    }

    /// The single file entry whose path satisfies `pred`.
    pub fn file_where(&self, what: &str, pred: impl Fn(&str) -> bool) -> FileEntry<'_> {
        let v: Vec<_> = self.files().into_iter().filter(|f| pred(f.path())).collect();
        assert_eq!(
            v.len(),
            1,
            "want exactly one file entry for {what}, found {:?}; summary in {}",
            v.iter().map(|f| f.path()).collect::<Vec<_>>(),
            self.dump().display()
        );
        v[0]
    }

    /// An assertion collector for this summary.
    pub fn expect(&self) -> Expect<'_> {
        Expect { summary: self, failures: Vec::new() }
    }
}

/// Collects failed expectations and reports them all at once, with the
/// summary saved to a file for inspection.
pub struct Expect<'a> {
    summary: &'a Summary,
    failures: Vec<String>,
}

impl<'a> Expect<'a> {
    /// Expects `got == want`.
    pub fn eq(&mut self, what: impl std::fmt::Display, got: u64, want: u64) -> &mut Self {
        if got != want {
            self.failures.push(format!("{what}: got {got}, want {want}"));
        }
        self
    }

    /// Expects `cond`.
    pub fn that(&mut self, what: impl std::fmt::Display, cond: bool) -> &mut Self {
        if !cond {
            self.failures.push(format!("{what}"));
        }
        self
    }

    /// Expects each `(function, count)` in `calls`, with 0 errors, and
    /// `bytes` for each `(function, bytes)` in `bytes`.
    pub fn calls(
        &mut self,
        who: &str,
        calls: Calls<'_>,
        counts: &[(&str, u64)],
        bytes: &[(&str, u64)],
    ) -> &mut Self {
        for (f, n) in counts {
            self.eq(format_args!("{who}: calls.{f}.count"), calls.count(f), *n);
            self.eq(format_args!("{who}: calls.{f}.errors"), calls.errors(f), 0);
        }
        for (f, b) in bytes {
            self.eq(format_args!("{who}: calls.{f}.bytes"), calls.bytes(f), *b);
        }
        self
    }

    /// Expects a file entry's opens, `by_call` counts and byte totals.
    pub fn file(
        &mut self,
        f: FileEntry<'_>,
        opens: u64,
        by_call: &[(&str, u64)],
        bytes_read: u64,
        bytes_written: u64,
    ) -> &mut Self {
        let p = f.path().to_string();
        self.eq(format_args!("file {p}: opens"), f.opens(), opens);
        for (c, n) in by_call {
            self.eq(format_args!("file {p}: by_call.{c}"), f.by_call(c), *n);
        }
        self.eq(format_args!("file {p}: bytes_read"), f.bytes_read(), bytes_read);
        self.eq(format_args!("file {p}: bytes_written"), f.bytes_written(), bytes_written);
        self
    }

    /// Panics listing every failed expectation.
    pub fn finish(&mut self) {
        if !self.failures.is_empty() {
            let dump = self.summary.dump();
            panic!(
                "{} expectation(s) failed (summary in {}):\n  {}\nprocesses:\n{}",
                self.failures.len(),
                dump.display(),
                self.failures.join("\n  "),
                self.summary.processes_listing()
            );
        }
    }
}

/// Asserts the process tree has no records dropped or truncated and returns
/// the summary of `run_bin`.
pub fn clean_summary(run_bin: &Path) -> Summary {
    let s = Summary::load(run_bin);
    s.assert_clean();
    s
}

/// The exit status as the shell reports it: the code, or 128 + signal.
pub fn shell_status(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}
