//! Skips that are said and counted.
//!
//! libtest has no runtime skip: a test that returns early is reported as passed.  A test that
//! cannot run here calls [`skip`] (directly or through one of the `require_*` helpers, which
//! return false after skipping) and returns at once.  [`skip`] writes one line
//!
//! ```text
//! SKIPPED <file>::<test>: <reason>
//! ```
//!
//! straight to the stderr file descriptor, past libtest's output capture, so it shows in a
//! plain `cargo test`; and appends the same line to the file named by `$MLPROF_SKIP_LOG` when
//! it is set.  `scripts/test.sh` sets it and prints `tests: N passed, N failed, N skipped`,
//! where the skipped tests are not counted as passed.

use std::ffi::OsStr;
use std::fmt::Display;
use std::fs::OpenOptions;
use std::io::Write;
use std::process::Command;
use std::thread;
use std::time::Duration;

use crate::child::{clean_env, default_timeout, try_output_with_timeout};
use crate::locations::python;

/// The variable naming the file every skip line is appended to.
pub const SKIP_LOG_ENV: &str = "MLPROF_SKIP_LOG";

/// With `MLPROF_SKIP_TORCH=1`, tests that need the mlprof Python environment's packages skip
/// when the test Python lacks them; without it they fail.
pub const SKIP_TORCH_ENV: &str = "MLPROF_SKIP_TORCH";

/// The running test as `<file>::<test>`: the test binary's name without cargo's hash (the
/// file in tests/tests/) and the thread's name, which libtest sets to the test's name.
pub fn test_name() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
            _ => stem,
        })
        .unwrap_or_else(|| "?".into());
    let test = thread::current().name().unwrap_or("?").to_string();
    format!("{binary}::{test}")
}

/// Reports the running test as skipped for `reason` (see the module documentation).  The
/// caller returns right after: a skipped test checks nothing.  Fails the test when the skip
/// cannot be logged, since it would then be counted as a pass.
pub fn skip(reason: impl Display) {
    let reason: Vec<String> = reason.to_string().lines().map(|l| l.trim().to_string()).collect();
    let line = format!("SKIPPED {}: {}\n", test_name(), reason.join(" / ").trim());
    // A failed write to stderr is not worth failing the test for; the log below is what counts.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV).filter(|p| !p.is_empty()) {
        // One write(2) of one short line to an O_APPEND file: lines of parallel tests do not mix.
        let written = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!("cannot log the skip to ${SKIP_LOG_ENV}={}: {e}\n{line}", path.to_string_lossy());
        }
    }
}

/// True when the tests run as root; otherwise skips, saying what needs root, and returns false.
pub fn require_root(what: &str) -> bool {
    // SAFETY: geteuid cannot fail and has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    skip(format_args!("needs root {what}"));
    false
}

/// The mlprof Python environment (`scripts/python-env.sh`: torch, torchvision, Pillow, the
/// NVIDIA CUDA/NCCL wheels that come with torch, ittapi) is missing something a test needs:
/// skipped with `MLPROF_SKIP_TORCH=1`, a failure otherwise.  The caller returns afterwards.
pub fn skip_without_venv(why: impl Display) {
    if std::env::var(SKIP_TORCH_ENV).as_deref() == Ok("1") {
        skip(format_args!("{why} ({SKIP_TORCH_ENV}=1)"));
        return;
    }
    panic!(
        "{why}\nset MLPROF_TEST_PYTHON to the mlprof Python environment (scripts/python-env.sh \
         prints its path), or {SKIP_TORCH_ENV}=1 to skip the tests that need it"
    );
}

/// True when the test Python imports every one of `modules`; otherwise
/// [`skip_without_venv`] and false.
pub fn require_python_modules(modules: &[&str]) -> bool {
    let py = python();
    let mut c = Command::new(&py);
    clean_env(&mut c).args(["-c", &format!("import {}", modules.join(", "))]);
    let why = match try_output_with_timeout(c, default_timeout()) {
        Ok(o) if o.status.success() => return true,
        Ok(o) => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            let last = stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
            format!("{} cannot import {}: {last}", py.display(), modules.join(", "))
        }
        Err(e) => format!("cannot run {}: {e}", py.display()),
    };
    skip_without_venv(why);
    false
}

/// True when the test Python has torch, torchvision and PIL (see [`require_python_modules`]).
pub fn require_torch() -> bool {
    require_python_modules(&["torch", "torchvision", "PIL"])
}

/// True when `nvidia-smi -L` lists a GPU; otherwise skips, saying why, and returns false.
pub fn require_gpu() -> bool {
    let mut c = Command::new("nvidia-smi");
    clean_env(&mut c).arg("-L");
    let why = match try_output_with_timeout(c, Duration::from_secs(60)) {
        Ok(o) if o.status.success() && String::from_utf8_lossy(&o.stdout).contains("GPU ") => {
            return true;
        }
        Ok(o) => format!(
            "no NVIDIA GPU: `nvidia-smi -L` lists none ({:?}: {}{})",
            o.status,
            String::from_utf8_lossy(&o.stdout).trim(),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("no NVIDIA GPU: cannot run `nvidia-smi -L`: {e}"),
    };
    skip(why);
    false
}

/// True when `program --version` runs; otherwise skips, saying what it is needed for.
pub fn require_program(program: impl AsRef<OsStr>, what: &str) -> bool {
    let program = program.as_ref();
    let mut c = Command::new(program);
    clean_env(&mut c).arg("--version");
    match try_output_with_timeout(c, default_timeout()) {
        Ok(o) if o.status.success() => true,
        _ => {
            skip(format_args!("needs `{}` {what}", program.to_string_lossy()));
            false
        }
    }
}
