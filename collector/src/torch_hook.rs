//! `--torch`: the Python start-up hook. Its files (`python/` in the source tree) are embedded in
//! this binary and written at launch to a private directory (mode 0700) that goes first on the
//! child's `PYTHONPATH`; the directory is removed when the run ends.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

/// (path relative to the hook directory, contents).
const FILES: &[(&str, &str)] = &[
    ("sitecustomize.py", include_str!("../../python/sitecustomize.py")),
    ("mlprof_torch/__init__.py", include_str!("../../python/mlprof_torch/__init__.py")),
    ("mlprof_torch/itt.py", include_str!("../../python/mlprof_torch/itt.py")),
    ("mlprof_torch/hooks.py", include_str!("../../python/mlprof_torch/hooks.py")),
    ("mlprof_torch/shapes.py", include_str!("../../python/mlprof_torch/shapes.py")),
    ("mlprof_torch/steps.py", include_str!("../../python/mlprof_torch/steps.py")),
];

/// The hook's directory for one run; removed on drop.
pub struct TorchHook {
    dir: PathBuf,
}

impl TorchHook {
    /// Writes the hook files into a fresh private directory under `$TMPDIR` (or /tmp).
    pub fn create() -> Result<TorchHook, String> {
        let base = std::env::temp_dir();
        let mut last_error = None;
        for attempt in 0..16u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let dir = base.join(format!("mlprof-torch-{}-{:x}-{attempt}", std::process::id(), nanos));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    let hook = TorchHook { dir };
                    hook.write_files()?;
                    return Ok(hook);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_error = Some(e),
                Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
            }
        }
        Err(format!("cannot create a directory in {}: {last_error:?}", base.display()))
    }

    fn write_files(&self) -> Result<(), String> {
        use std::io::Write;
        for (relative, contents) in FILES {
            let path = self.dir.join(relative);
            if let Some(parent) = path.parent().filter(|p| *p != self.dir) {
                match std::fs::DirBuilder::new().mode(0o700).create(parent) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(format!("cannot create {}: {e}", parent.display())),
                }
            }
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut f| f.write_all(contents.as_bytes()))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        Ok(())
    }

    #[cfg(test)]
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// `PYTHONPATH` for the child: our directory first, then the existing entries.
    pub fn python_path(&self) -> OsString {
        let mut value = self.dir.as_os_str().to_owned();
        if let Some(existing) = std::env::var_os("PYTHONPATH").filter(|v| !v.is_empty()) {
            value.push(":");
            value.push(existing);
        }
        value
    }
}

impl Drop for TorchHook {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_private_files_and_removes_them() {
        let hook = TorchHook::create().unwrap();
        let dir = hook.dir().to_path_buf();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        for (relative, contents) in FILES {
            assert_eq!(std::fs::read_to_string(dir.join(relative)).unwrap(), *contents);
        }
        assert!(hook.python_path().to_string_lossy().starts_with(dir.to_str().unwrap()));
        drop(hook);
        assert!(!dir.exists());
    }
}
