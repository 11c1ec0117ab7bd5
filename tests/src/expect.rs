//! Expectations: exact-count checks collected and reported together.

use crate::summary::{Calls, FileEntry, Summary};

/// Collects failed expectations and reports them all at once, with the
/// summary saved to a file for inspection.
pub struct Expect<'a> {
    summary: &'a Summary,
    failures: Vec<String>,
}

impl<'a> Expect<'a> {
    pub(crate) fn new(summary: &'a Summary) -> Expect<'a> {
        Expect { summary, failures: Vec::new() }
    }

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
