//! Compiling C: the programs in `tests/programs/` and whatever else a test builds with gcc.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

use crate::locations::tests_dir;
use crate::tmp::TempDir;

/// Runs gcc with `args`; fails the test with gcc's messages if it fails.
pub fn gcc<S: AsRef<OsStr>>(args: &[S]) {
    let o = Command::new("gcc")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc: {e}"));
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    assert!(o.status.success(), "gcc {shown:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
}

/// Compiles `tests/programs/<name>.c` into `dir/<name>` and returns its path.
pub fn compile(name: &str, dir: &TempDir) -> String {
    let src = tests_dir().join("programs").join(format!("{name}.c"));
    let out = dir.join(name).display().to_string();
    let src = src.display().to_string();
    gcc(&["-O1", "-pthread", "-U_FORTIFY_SOURCE", "-Wall", "-o", &out, &src]);
    out
}
