//! `mlprof summary --json` and `mlprof convert`, parsed, with typed accessors for the
//! summary's processes, calls and files.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::child::{clean_env, default_timeout, describe, output_with_timeout};
use crate::expect::Expect;
use crate::locations::bins;

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

/// Runs `mlprof ARGS...` and returns its output; it must succeed.
pub fn mlprof_ok(args: &[&str]) -> std::process::Output {
    let mut c = Command::new(&bins().mlprof);
    clean_env(&mut c);
    c.args(args);
    let out = output_with_timeout(c, default_timeout());
    assert!(out.status.success(), "mlprof {} failed\n{}", args.join(" "), describe(&out));
    out
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
    /// The signal that ended the process, when one did.
    pub fn signal(&self) -> Option<i64> {
        self.0.get("signal").and_then(Value::as_i64)
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
    /// Records dropped for one reason (`lane_full`, `no_lane`, `interrupted`).
    pub fn drops(&self, reason: &str) -> u64 {
        u64_of(&self.json["drops"], reason)
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

    pub(crate) fn processes_listing(&self) -> String {
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

    /// Calls of `func` made by the processes whose cmdline contains `needle`, all together.
    pub fn calls_by(&self, needle: &str, func: &str) -> u64 {
        self.procs_with_cmdline(needle).iter().map(|p| p.calls().count(func)).sum()
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
        Expect::new(self)
    }
}

/// Asserts the process tree has no records dropped or truncated and returns
/// the summary of `run_bin`.
pub fn clean_summary(run_bin: &Path) -> Summary {
    let s = Summary::load(run_bin);
    s.assert_clean();
    s
}
