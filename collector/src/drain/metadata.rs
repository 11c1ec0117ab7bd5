//! What the run file is told besides events, kept between records: the strings (each written
//! once), the processes waiting for their command line, the rank records waiting for their
//! process, the processes whose exit is written, and the call sites met.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::io;

use mlprof_format::rank::RankInfo;
use mlprof_format::runfile::{ProcessInfo, RunWriter};

use super::sites::Sites;
use super::strings::{Strings, split_argv};

/// The metadata a drain keeps for the run file.
#[derive(Default)]
pub(super) struct Metadata {
    pub(super) strings: Strings,
    /// Processes whose command line string may still come: (its string id, the process).
    pub(super) waiting_for_argv: Vec<(u64, ProcessInfo)>,
    /// Rank records waiting for the process start that follows them on the same lane (a
    /// pass can end between the two).
    pub(super) pending_ranks: HashMap<u32, RankInfo>,
    /// Processes that joined since the last [`super::Drainer::take_joined`], when asked for
    /// (`Some`: attach mode's sampler follows them).
    pub(super) joined: Option<Vec<u32>>,
    /// Pids whose exit is recorded.
    pub(super) exits: HashSet<u32>,
    /// The call sites met.
    pub(super) sites: Sites,
}

impl Metadata {
    /// Writes the process records whose command line is known (all of them when `all`; those
    /// whose string never came get the best the system still knows).
    pub(super) fn write_processes(
        &mut self,
        writer: &mut RunWriter<impl io::Write>,
        all: bool,
    ) -> io::Result<()> {
        let waiting = std::mem::take(&mut self.waiting_for_argv);
        for (id, mut process) in waiting {
            let bytes = match self.strings.bytes(id) {
                Some(bytes) => bytes.to_vec(),
                None if all || self.strings.is_known(id) => {
                    std::fs::read(format!("/proc/{}/cmdline", process.pid)).unwrap_or_default()
                }
                None => {
                    self.waiting_for_argv.push((id, process));
                    continue;
                }
            };
            process.argv = split_argv(&bytes);
            writer.write_process(&process)?;
        }
        Ok(())
    }
}
