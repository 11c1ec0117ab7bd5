//! Unique names (sessions, directories) and per-test temporary directories.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn unique_suffix() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{}-{}-{:x}", std::process::id(), n, nanos)
}

/// A session name no other test (or other test run) uses.
pub fn unique_session(tag: &str) -> String {
    format!("t-{tag}-{}", unique_suffix())
}

/// A directory under `std::env::temp_dir()` that is unique to one test.
/// Removed on drop unless the test panicked or `MLPROF_KEEP_TMP` is set.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("mlprof-test-{tag}-{}", unique_suffix()));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("create temp dir {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }

    /// The path as a `String` (temp paths are ASCII; cmdlines compare as text).
    pub fn str(&self) -> String {
        self.path.display().to_string()
    }

    /// `path/name` as a `String`.
    pub fn file(&self, name: &str) -> String {
        self.join(name).display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if thread::panicking() || std::env::var_os("MLPROF_KEEP_TMP").is_some() {
            eprintln!("kept test directory {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
