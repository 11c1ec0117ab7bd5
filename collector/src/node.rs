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
    fn energy_is_sampled_once_per_node() {
        assert_eq!(energy_left_to_another(&env(&[])), None);
        assert_eq!(energy_left_to_another(&env(&[("SLURM_LOCALID", "0")])), None);
        assert!(energy_left_to_another(&env(&[("SLURM_LOCALID", "3")])).is_some());
    }
}
