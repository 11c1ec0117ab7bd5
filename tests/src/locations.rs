//! Where things are: the workspace, the test programs and scripts, the profiler's release
//! binaries and the Python interpreter for the Python tests.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `<workspace>` (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests crate has a parent directory").to_path_buf()
}

/// `<workspace>/tests`.
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A Python script in `tests/scripts/`.
pub fn script(name: &str) -> PathBuf {
    tests_dir().join("scripts").join(name)
}

/// The profiler's binaries.
#[derive(Debug)]
pub struct Bins {
    pub dir: PathBuf,
    pub collect: PathBuf,
    pub mlprof: PathBuf,
    pub preload: PathBuf,
}

/// Finds the binaries once; panics with a clear message when they are missing.
pub fn bins() -> &'static Bins {
    static BINS: OnceLock<Bins> = OnceLock::new();
    BINS.get_or_init(|| {
        let dir = match std::env::var_os("MLPROF_BIN_DIR") {
            Some(d) => PathBuf::from(d),
            None => match std::env::var_os("CARGO_TARGET_DIR") {
                Some(t) => PathBuf::from(t).join("release"),
                None => workspace_root().join("target").join("release"),
            },
        };
        let bins = Bins {
            collect: dir.join("mlprof-collect"),
            mlprof: dir.join("mlprof"),
            preload: dir.join("libmlprof.so"),
            dir,
        };
        let missing: Vec<String> = [&bins.collect, &bins.mlprof, &bins.preload]
            .into_iter()
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            panic!(
                "mlprof binaries not found: {}\n\
                 run cargo build --release first (or set MLPROF_BIN_DIR to the directory \
                 holding mlprof-collect, mlprof and libmlprof.so)",
                missing.join(", ")
            );
        }
        bins
    })
}

/// The Python interpreter for the Python tests.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("MLPROF_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new("/root/.cache/mlprof-venv/bin/python");
    if venv.exists() {
        return venv.to_path_buf();
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = Path::new(&home).join(".cache/mlprof-venv/bin/python");
        if p.exists() {
            return p;
        }
    }
    PathBuf::from("python3")
}

/// The directory and file name of the first NVIDIA wheel library named in `prefixes` (e.g.
/// libcudart.so.13) in the Python environment's site-packages, or under
/// `$MLPROF_CUDA_LIB_DIR`.  None when there is none: the test is skipped (with
/// `MLPROF_SKIP_TORCH=1`) or has failed, and returns.
pub fn nvidia_library(prefixes: &[&str]) -> Option<(PathBuf, String)> {
    let mut roots = Vec::new();
    if let Some(dir) = std::env::var_os("MLPROF_CUDA_LIB_DIR") {
        roots.push(PathBuf::from(dir));
    }
    let python = python();
    let venv = python.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
    roots.push(venv.join("lib"));
    for root in &roots {
        if let Some(found) = find_file(root, prefixes, 0) {
            let dir = found.parent().unwrap().to_path_buf();
            let name = found.file_name().unwrap().to_string_lossy().into_owned();
            return Some((dir, name));
        }
    }
    crate::skip::skip_without_venv(format_args!(
        "no {prefixes:?} under {roots:?}: install torch in the test environment (scripts/python-env.sh) \
         or point MLPROF_CUDA_LIB_DIR at the NVIDIA wheel's lib folder"
    ));
    None
}

fn find_file(dir: &Path, prefixes: &[&str], depth: usize) -> Option<PathBuf> {
    if depth > 7 {
        return None;
    }
    let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in &entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if prefixes.iter().any(|p| name == *p) {
            return Some(entry.path());
        }
    }
    for entry in entries {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false)
            && let Some(found) = find_file(&entry.path(), prefixes, depth + 1)
        {
            return Some(found);
        }
    }
    None
}
