//! strace as the reference for the strace-shaped view (`mlprof summary --syscalls`): running a
//! program under `strace -f`, cutting out the window a program marks, counting per system
//! call, and the view's counts of a process tree to hold against them.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

use crate::*;

/// `mlprof summary --syscalls --json RUN`, parsed.
pub fn syscalls_json(run_bin: &std::path::Path) -> Value {
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

/// One system call strace printed: who made it, its name and everything after the name
/// (arguments and result; an `<unfinished ...>` call joined with its `<... resumed>` rest).
pub struct Traced {
    pub pid: String,
    pub name: String,
    pub rest: String,
}

impl Traced {
    pub fn failed(&self) -> bool {
        self.rest.contains(" = -1 ")
    }
    /// The first quoted argument (a path).
    pub fn path(&self) -> Option<&str> {
        self.rest.split('"').nth(1)
    }
}

/// The system calls `strace -f` printed between the markers (`write(-1, "MLPROF_MARK1")` ..
/// `write(-1, "MLPROF_MARK2")`, both included) by the process that wrote the first marker, its
/// threads and the processes below it: the same tree the tests count on mlprof's side
/// (`process_tree`). Other processes are left out: a parent whose `fork` returns after its new
/// child wrote the first marker would otherwise count that fork for strace (its line resumes
/// inside the window) and not for mlprof (the call began before it, in another process).
pub fn strace_window(trace: &str) -> Vec<Traced> {
    let mut pending: BTreeMap<String, (String, String)> = BTreeMap::new();
    // Thread id -> its process (thread group), and process -> its parent process, learned
    // from the clone family's results over the whole trace.
    let mut process_of: BTreeMap<String, String> = BTreeMap::new();
    let mut parent_of: BTreeMap<String, String> = BTreeMap::new();
    let mut calls = Vec::new();
    let mut marker: Option<String> = None;
    for line in trace.lines() {
        // `-f` prefixes each line with the pid.
        let (pid, line) = line.split_once(' ').unwrap_or(("", line));
        let line = line.trim_start();
        if line.contains("MLPROF_MARK1") && marker.is_none() {
            marker = Some(pid.to_string());
        }
        if line.starts_with("+++") || line.starts_with("---") {
            continue;
        }
        let call = if let Some(resumed) = line.strip_prefix("<... ") {
            let Some((name, rest)) = resumed.split_once(" resumed>") else { continue };
            match pending.remove(pid) {
                Some((n, head)) if n == name => (n, head + rest),
                _ => continue,
            }
        } else {
            let Some((name, rest)) = line.split_once('(') else { continue };
            if name.is_empty() || name.contains(' ') {
                continue;
            }
            if let Some(head) = rest.strip_suffix("<unfinished ...>") {
                pending.insert(pid.to_string(), (name.to_string(), head.to_string()));
                continue;
            }
            (name.to_string(), rest.to_string())
        };
        if let Some(child) = new_task(&call.0, &call.1) {
            let process = process_of.get(pid).cloned().unwrap_or_else(|| pid.to_string());
            if call.1.contains("CLONE_THREAD") {
                process_of.insert(child, process);
            } else {
                parent_of.insert(child, process);
            }
        }
        if marker.is_some() {
            calls.push(Traced { pid: pid.to_string(), name: call.0, rest: call.1 });
        }
        if line.contains("MLPROF_MARK2") {
            break;
        }
    }
    let Some(marker) = marker else { return calls };
    let root = process_of.get(&marker).cloned().unwrap_or(marker);
    let in_tree = |tid: &str| {
        let mut process = process_of.get(tid).map(String::as_str).unwrap_or(tid);
        loop {
            if process == root {
                return true;
            }
            match parent_of.get(process) {
                Some(parent) => process = parent,
                None => return false,
            }
        }
    };
    calls.retain(|c| in_tree(&c.pid));
    calls
}

/// The thread or process a clone-family call made, from its result (`= 1234`).
fn new_task(name: &str, rest: &str) -> Option<String> {
    if !matches!(name, "clone" | "clone3" | "fork" | "vfork") {
        return None;
    }
    let result = rest.rsplit_once(" = ")?.1.split_whitespace().next()?;
    result.parse::<u64>().ok().filter(|&id| id > 0).map(|id| id.to_string())
}

/// `name -> (calls, errors)` of `calls`.
pub fn tally<'a>(calls: impl Iterator<Item = &'a Traced>) -> BTreeMap<String, (u64, u64)> {
    let mut counts = BTreeMap::new();
    for c in calls {
        let entry = counts.entry(c.name.clone()).or_insert((0, 0));
        entry.0 += 1;
        entry.1 += c.failed() as u64;
    }
    counts
}

/// Runs `strace -f -o DIR/strace.txt CMD`; `None` (skipped, saying why) where strace is missing
/// or may not trace.
pub fn strace(dir: &TempDir, cmd: &[String]) -> Option<(String, std::process::Output)> {
    if !require_program("strace", "the reference counts of the strace-shaped view") {
        return None;
    }
    let trace = dir.join("strace.txt");
    let mut c = Command::new("strace");
    clean_env(&mut c).arg("-f").arg("-o").arg(&trace).args(cmd);
    let o = output_with_timeout(c, default_timeout());
    if !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("PTRACE_TRACEME") {
        skip(format!("strace cannot trace here (ptrace refused): {}", describe(&o)));
        return None;
    }
    assert!(o.status.success(), "strace -f {cmd:?} failed\n{}", describe(&o));
    Some((std::fs::read_to_string(&trace).expect("strace output"), o))
}

/// `root` and every process below it (by ppid).
pub fn process_tree(summary: &Summary, root: u64) -> std::collections::BTreeSet<u64> {
    let mut pids = std::collections::BTreeSet::from([root]);
    loop {
        let before = pids.len();
        for p in summary.processes() {
            if pids.contains(&p.ppid()) {
                pids.insert(p.pid());
            }
        }
        if pids.len() == before {
            return pids;
        }
    }
}

/// The `--syscalls` view of `root` and every process below it (by ppid), summed.
pub fn view_of_tree(summary: &Summary, view: &Value, root: u64) -> BTreeMap<String, (u64, u64)> {
    let pids = process_tree(summary, root);
    let mut counts = BTreeMap::new();
    for pid in pids {
        let Some(table) = view.pointer(&format!("/per_process/{pid}")).and_then(Value::as_object) else {
            continue;
        };
        for (name, stat) in table {
            let entry = counts.entry(name.clone()).or_insert((0, 0));
            entry.0 += stat.get("count").and_then(Value::as_u64).unwrap_or(0);
            entry.1 += stat.get("errors").and_then(Value::as_u64).unwrap_or(0);
        }
    }
    counts
}
