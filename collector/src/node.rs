//! One collector per node: the `--out` pattern that names each node's file (`%h`, `%n`), and
//! which of several collectors on one node samples the node's energy.

use std::path::{Path, PathBuf};

/// The node's index in the job: `SLURM_NODEID` (under `srun`), else `GROUP_RANK`, else the
/// `--node_rank`/`--node-rank` of a `torchrun` command (the collector wraps torchrun, which
/// sets `GROUP_RANK` only for its workers), else none.
fn node_index(command: &[String], env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let number = |v: String| {
        Some(v.trim().to_string()).filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
    };
    if let Some(id) = env("SLURM_NODEID").and_then(number).or_else(|| env("GROUP_RANK").and_then(number)) {
        return Some(id);
    }
    let mut args = command.iter();
    while let Some(arg) = args.next() {
        for flag in ["--node_rank", "--node-rank"] {
            if arg == flag {
                return args.next().cloned().and_then(number);
            }
            if let Some(value) = arg.strip_prefix(flag).and_then(|rest| rest.strip_prefix('=')) {
                return number(value.to_string());
            }
        }
    }
    None
}

/// `--out` with `%h` replaced by the host name, `%n` by the node index (the host name when
/// none is known, so that nodes never write the same file) and `%%` by `%`.
pub fn expand_out(
    pattern: &Path,
    command: &[String],
    host: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> PathBuf {
    let text = pattern.to_string_lossy();
    if !text.contains('%') {
        return pattern.to_path_buf();
    }
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('h') => out.push_str(host),
            Some('n') => out.push_str(&node_index(command, env).unwrap_or_else(|| host.to_string())),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    PathBuf::from(out)
}

/// Under `srun` with several tasks per node, each task's collector expands `%h` and `%n` to the
/// same name, and they would write one file. Task `SLURM_LOCALID=L` (L > 0) writes
/// `<stem>-task<L>[.<ext>]` next to it instead (task 0 keeps the name): returns that path and
/// the message saying so. `None` when the pattern names no node, when this is task 0, or when
/// the pattern already holds the number L on its own (`run-%h-$SLURM_LOCALID.bin`, expanded
/// by the shell); a collision left after that is refused by the run file's lock.
pub fn per_task_out(
    pattern: &Path,
    out: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<(PathBuf, String)> {
    let text = pattern.to_string_lossy().replace("%%", "");
    if !text.contains("%h") && !text.contains("%n") {
        return None;
    }
    let local: u32 = env("SLURM_LOCALID")?.trim().parse().ok().filter(|&l| l > 0)?;
    if text.split(|c: char| !c.is_ascii_digit()).any(|number| number.parse() == Ok(local)) {
        return None;
    }
    let stem = out.file_stem()?.to_string_lossy();
    let name = match out.extension() {
        Some(ext) => format!("{stem}-task{local}.{}", ext.to_string_lossy()),
        None => format!("{stem}-task{local}"),
    };
    let path = out.with_file_name(name);
    let why = format!(
        "--out {}: srun started several tasks on this node (SLURM_LOCALID={local}), whose collectors \
         would all write {}; this one writes {} (task 0 keeps the name; `mlprof merge` takes them all)",
        pattern.display(),
        out.display(),
        path.display()
    );
    Some((path, why))
}

/// Why this collector leaves the node's energy to another: under `srun` with several tasks
/// per node, each task's collector would sample the same GPUs and RAPL zones; the task with
/// `SLURM_LOCALID=0` does it for the node.
pub fn energy_left_to_another(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let local = env("SLURM_LOCALID")?;
    let local = local.trim();
    (!local.is_empty() && local != "0")
        .then(|| format!("SLURM_LOCALID={local}: the node's energy is sampled by its task 0's collector"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    fn cmd(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn out_patterns() {
        let none = env(&[]);
        let p = |pattern: &str, command: &[String], e: &dyn Fn(&str) -> Option<String>| {
            expand_out(Path::new(pattern), command, "gpu7", e).display().to_string()
        };
        assert_eq!(p("run.bin", &[], &none), "run.bin");
        assert_eq!(p("run-%h.bin", &[], &none), "run-gpu7.bin");
        assert_eq!(p("/x/%n/run-%h-%%.bin", &[], &env(&[("SLURM_NODEID", "3")])), "/x/3/run-gpu7-%.bin");
        assert_eq!(p("run-%n.bin", &[], &env(&[("GROUP_RANK", "2")])), "run-2.bin");
        let torchrun = cmd(&["torchrun", "--nnodes=2", "--node_rank=1", "train.py"]);
        assert_eq!(p("run-%n.bin", &torchrun, &none), "run-1.bin");
        let torchrun = cmd(&["torchrun", "--node-rank", "4", "train.py"]);
        assert_eq!(p("run-%n.bin", &torchrun, &none), "run-4.bin");
        assert_eq!(p("run-%n.bin", &cmd(&["python", "train.py"]), &none), "run-gpu7.bin");
        assert_eq!(p("run-%x%", &[], &none), "run-%x%");
    }

    #[test]
    fn srun_tasks_of_one_node_write_files_of_their_own() {
        let task = |pattern: &str, out: &str, local: &'static str| {
            let vars: &'static [(&str, &str)] = Box::leak(Box::new([("SLURM_LOCALID", local)]));
            per_task_out(Path::new(pattern), Path::new(out), &env(vars)).map(|(p, _)| p.display().to_string())
        };
        assert_eq!(task("run-%h.bin", "run-gpu7.bin", "0"), None);
        assert_eq!(task("run-%h.bin", "run-gpu7.bin", "2").as_deref(), Some("run-gpu7-task2.bin"));
        assert_eq!(task("/x/%n/run", "/x/3/run", "1").as_deref(), Some("/x/3/run-task1"));
        assert_eq!(task("run.bin", "run.bin", "1"), None, "no node in the name: the file lock says it");
        assert_eq!(task("run-%%h.bin", "run-%h.bin", "1"), None);
        assert_eq!(task("run-%h.bin", "run-gpu7.bin", "x"), None);
        assert_eq!(task("runs/run-%h-3.bin", "runs/run-gpu7-3.bin", "3"), None, "already per task");
        assert_eq!(
            task("runs/run-%h-13.bin", "runs/run-gpu7-13.bin", "3").as_deref(),
            Some("runs/run-gpu7-13-task3.bin")
        );
        assert_eq!(per_task_out(Path::new("run-%h.bin"), Path::new("run-gpu7.bin"), &env(&[])), None);
    }

    #[test]
    fn energy_is_sampled_once_per_node() {
        assert_eq!(energy_left_to_another(&env(&[])), None);
        assert_eq!(energy_left_to_another(&env(&[("SLURM_LOCALID", "0")])), None);
        assert!(energy_left_to_another(&env(&[("SLURM_LOCALID", "3")])).is_some());
    }
}
