//! Helpers that the collector's unit tests share across modules: a temporary directory that
//! removes itself, and the pid of a process that is gone. (The drain's own helpers, a drainer
//! over a heap ring and its records, are `drain::testing`.)

use std::path::{Path, PathBuf};

/// A fresh directory under the system's temporary one, named after `tag` and this process,
/// removed with everything in it when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("mlprof-collector-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The pid of a process that ended and was reaped: it no longer exists.
pub(crate) fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    child.wait().unwrap();
    child.id()
}
