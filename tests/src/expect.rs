//! Expectations: exact-count checks collected and reported together.
//!
//! An [`Expect`] cannot pass by accident: [`Expect::finish`] consumes it (nothing can be added
//! after the report), one dropped without `finish()` fails the test (a forgotten `finish()`
//! would otherwise drop every failure silently), and one finished without a single check fails
//! too (a loop over an empty list checks nothing).

use std::fmt::Display;
use std::thread;

use crate::summary::{Calls, FileEntry, Proc, Summary};

/// Collects failed expectations and reports them all at once, with the
/// summary saved to a file for inspection.
#[must_use = "an Expect reports nothing until finish() is called"]
pub struct Expect<'a> {
    summary: &'a Summary,
    failures: Vec<String>,
    checks: u64,
    finished: bool,
}

impl<'a> Expect<'a> {
    pub(crate) fn new(summary: &'a Summary) -> Expect<'a> {
        Expect { summary, failures: Vec::new(), checks: 0, finished: false }
    }

    /// Expects `got == want`.
    pub fn eq(&mut self, what: impl Display, got: u64, want: u64) -> &mut Self {
        self.checks += 1;
        if got != want {
            self.failures.push(format!("{what}: got {got}, want {want}"));
        }
        self
    }

    /// Expects `cond`.
    pub fn that(&mut self, what: impl Display, cond: bool) -> &mut Self {
        self.checks += 1;
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

    /// Expects the process entry's `exit_code` to be exactly `want`; a missing code fails.
    /// Use it where the code is guaranteed: the launcher records how its own child (CMD, the
    /// last image of its pid) ended, and the exit hooks record the status a process passes to
    /// `exit`/`_exit`/`_Exit`.  Elsewhere a code may be missing, and is not checked.
    pub fn exit_code(&mut self, who: &str, p: Proc<'_>, want: i64) -> &mut Self {
        let got = p.exit_code();
        self.that(format_args!("{who}: exit_code {got:?}, want Some({want})"), got == Some(want))
    }

    /// Expects the process entry's `signal` to be exactly `want` (the launcher records the
    /// signal that killed its child).
    pub fn signal(&mut self, who: &str, p: Proc<'_>, want: i64) -> &mut Self {
        let got = p.signal();
        self.that(format_args!("{who}: signal {got:?}, want Some({want})"), got == Some(want))
    }

    /// Panics listing every failed expectation, or when nothing was checked at all.
    pub fn finish(mut self) {
        self.finished = true;
        if self.checks == 0 {
            panic!("Expect::finish() without a single check: the test checked nothing");
        }
        if !self.failures.is_empty() {
            let dump = self.summary.dump();
            panic!(
                "{} of {} expectation(s) failed (summary in {}):\n  {}\nprocesses:\n{}",
                self.failures.len(),
                self.checks,
                dump.display(),
                self.failures.join("\n  "),
                self.summary.processes_listing()
            );
        }
    }
}

impl Drop for Expect<'_> {
    /// A forgotten `finish()` fails the test (unless it is already failing: its own panic is
    /// the one to report).
    fn drop(&mut self) {
        if !self.finished && !thread::panicking() {
            panic!(
                "Expect dropped without finish(): {} check(s), {} failure(s) never reported:\n  {}",
                self.checks,
                self.failures.len(),
                self.failures.join("\n  ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// A summary whose dump (written on failure) goes nowhere: its directory does not exist.
    fn summary() -> Summary {
        let run_bin = std::path::PathBuf::from("/nonexistent-mlprof-expect-test/run.bin");
        Summary { json: serde_json::json!({"processes": []}), run_bin }
    }

    #[test]
    fn passing_checks_pass() {
        let s = summary();
        let mut e = s.expect();
        e.eq("one", 1, 1).that("true", true);
        e.finish();
    }

    #[test]
    #[should_panic(expected = "1 of 2 expectation(s) failed")]
    fn a_failed_check_fails_at_finish() {
        let s = summary();
        let mut e = s.expect();
        e.eq("one", 1, 1).eq("two", 2, 3);
        e.finish();
    }

    #[test]
    #[should_panic(expected = "Expect dropped without finish()")]
    fn a_forgotten_finish_fails() {
        let s = summary();
        let mut e = s.expect();
        e.eq("two", 2, 3);
    }

    #[test]
    #[should_panic(expected = "without a single check")]
    fn finishing_without_checks_fails() {
        let s = summary();
        s.expect().finish();
    }
}
