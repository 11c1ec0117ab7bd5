//! The strings a run defines (paths, command lines, kernel names), kept so that each is
//! written once and process records can be named by their command line.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::io;

use mlprof_format::runfile::RunWriter;

/// String bytes kept in memory to name processes (ids are kept for every string).
const STRING_MEMORY_LIMIT: usize = 64 << 20;

/// The strings the run has defined: every id (so each is written once), and the bytes of the
/// first [`STRING_MEMORY_LIMIT`] bytes' worth (to name processes by their command line).
#[derive(Default)]
pub(super) struct Strings {
    known: HashSet<u64>,
    bytes: HashMap<u64, Vec<u8>>,
    memory: usize,
}

impl Strings {
    /// Writes string `id` to the run file the first time it is defined.
    pub(super) fn define(
        &mut self,
        writer: &mut RunWriter<impl io::Write>,
        id: u64,
        bytes: &[u8],
    ) -> io::Result<()> {
        if self.known.insert(id) {
            writer.write_string(id, bytes)?;
            if self.memory + bytes.len() <= STRING_MEMORY_LIMIT {
                self.memory += bytes.len();
                self.bytes.insert(id, bytes.to_vec());
            }
        }
        Ok(())
    }

    pub(super) fn is_known(&self, id: u64) -> bool {
        self.known.contains(&id)
    }

    pub(super) fn bytes(&self, id: u64) -> Option<&[u8]> {
        self.bytes.get(&id).map(Vec::as_slice)
    }
}

pub(super) fn split_argv(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|&b| b == 0)
        .filter(|part| !part.is_empty())
        .map(|part| String::from_utf8_lossy(part).into_owned())
        .collect()
}
