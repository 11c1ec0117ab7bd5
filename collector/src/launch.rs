//! Launcher mode: the child's environment, signal forwarding and exit status.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};

/// The libmlprof.so to inject: `--preload`, else `$MLPROF_PRELOAD`, else next to this binary.
pub fn find_preload(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let candidate = match explicit {
        Some(path) => path.to_path_buf(),
        None => match std::env::var_os("MLPROF_PRELOAD") {
            Some(path) => PathBuf::from(path),
            None => std::env::current_exe()
                .map_err(|e| format!("cannot locate mlprof-collect itself: {e}"))?
                .with_file_name("libmlprof.so"),
        },
    };
    let absolute = std::fs::canonicalize(&candidate).map_err(|e| {
        format!(
            "cannot find libmlprof.so at {} ({e}); build it with `cargo build --release` or pass --preload",
            candidate.display()
        )
    })?;
    Ok(absolute)
}

pub fn spawn(command: &[String], preload: &Path, shm_name: &str, session: &str) -> Result<Child, String> {
    let mut ld_preload = preload.display().to_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        ld_preload.push(':');
        ld_preload.push_str(&existing.to_string_lossy());
    }
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .env("LD_PRELOAD", ld_preload)
        .env("MLPROF_SHM", shm_name)
        .env("MLPROF_SESSION", session);
    // The child should not inherit our ignored SIGINT disposition: restore defaults.
    // Safety: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| format!("cannot run {}: {e}", command[0]))
}

static TERMINATION: AtomicI32 = AtomicI32::new(0);
static FORWARDED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    TERMINATION.store(signal, Ordering::Relaxed);
}

/// SIGINT and SIGTERM set a flag: attach mode stops; launcher mode forwards SIGTERM to the child
/// (a terminal's Ctrl-C already reaches the child through its process group).
pub fn install_signal_handlers() {
    // Safety: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

pub fn termination_requested() -> bool {
    TERMINATION.load(Ordering::Relaxed) != 0
}

pub fn forward_termination(child: u32) {
    let signal = TERMINATION.load(Ordering::Relaxed);
    if signal == libc::SIGTERM && FORWARDED.swap(signal, Ordering::Relaxed) == 0 {
        // Safety: signalling our own child.
        unsafe { libc::kill(child as i32, libc::SIGTERM) };
    }
}

/// (exit code, terminating signal).
pub fn describe(status: ExitStatus) -> (Option<i32>, Option<i32>) {
    (status.code(), status.signal())
}
