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

/// A directory in /dev/shm that every user may write, as /dev/shm itself (mode 1777), for
/// `MLPROF_SHM_DIR`: the collectors of one test then see only that test's segments, while the
/// collectors of tests running beside it sweep /dev/shm.  Removed with what it holds on drop.
pub struct ShmDir {
    path: PathBuf,
}

impl ShmDir {
    pub fn new(tag: &str) -> ShmDir {
        use std::os::unix::fs::PermissionsExt;
        let path = Path::new("/dev/shm").join(format!("mlprof-test-{tag}-{}", unique_suffix()));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        // Set after creation: the umask would clear the bits mkdir was given.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o1777))
            .unwrap_or_else(|e| panic!("chmod 1777 {}: {e}", path.display()));
        ShmDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
