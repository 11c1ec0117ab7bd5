//! The common opening of the native tests: a program of `tests/programs/` compiled into its
//! own temporary directory and run once under the launcher as `PROGRAM DIR ARGS...`, and, for
//! the programs that fork, the parent and its forked child found in the summary.

use crate::cc::compile;
use crate::child::run_collect_ok;
use crate::expect::Expect;
use crate::summary::{Proc, Summary, clean_summary};
use crate::tmp::TempDir;

/// One launcher run of a test program.
pub struct ProgramRun {
    pub dir: TempDir,
    /// The compiled program's path.
    pub prog: String,
    /// The command line as the summary shows it: `PROGRAM DIR ARGS...` joined by spaces.
    pub cmdline: String,
    /// The run's summary, already checked clean (nothing dropped, not truncated).
    pub summary: Summary,
}

/// Compiles `tests/programs/NAME.c` into a new temporary directory DIR, runs
/// `PROGRAM DIR ARGS...` under the launcher and asserts that it exited 0 and that the run is
/// clean.
pub fn run_program(name: &str, args: &[&str]) -> ProgramRun {
    let dir = TempDir::new(&name.replace('_', "-"));
    let prog = compile(name, &dir);
    let mut argv = vec![prog.clone(), dir.str()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let out = dir.join("run.bin");
    run_collect_ok(&out, &argv);
    let summary = clean_summary(&out);
    ProgramRun { cmdline: argv.join(" "), dir, prog, summary }
}

impl ProgramRun {
    /// The fork-test opening: the top process running [`ProgramRun::cmdline`] and its single
    /// child, a fork, which must show the same command line (checked into `e`; a missing or
    /// second child fails at once).
    pub fn parent_and_forked_child(&self, e: &mut Expect<'_>) -> (Proc<'_>, Proc<'_>) {
        let cmd = &self.cmdline;
        let parent = self.summary.root_exact(cmd);
        let child = self.summary.child_of(parent.pid());
        e.that(format_args!("parent cmdline {:?} == {cmd:?}", parent.cmdline()), parent.cmdline() == cmd);
        e.that(
            format_args!("forked child cmdline {:?} == parent's {cmd:?}", child.cmdline()),
            child.cmdline() == cmd,
        );
        (parent, child)
    }
}

/// The "name code" lines a test program wrote into `path` (what each call returned, for the
/// test to compare with the run's records).
pub fn statuses(path: &std::path::Path) -> std::collections::BTreeMap<String, i64> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, c)| (n.to_string(), c.trim().parse().unwrap()))
        .collect()
}
