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

/// Where `program` resolves to: itself when it names a path, else the first executable match
/// in `$PATH` (as execvp does).
fn resolve_program(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| {
        std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The warning to print when `program` is setuid/setgid to another identity: the dynamic
/// loader runs such programs in secure mode and ignores `LD_PRELOAD`, so nothing of theirs is
/// recorded (children that exec ordinary programs are).
pub fn setid_warning(program: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let path = resolve_program(program)?;
    let meta = std::fs::metadata(&path).ok()?;
    // Safety: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let setuid = meta.mode() & libc::S_ISUID != 0 && meta.uid() != uid;
    let setgid = meta.mode() & libc::S_ISGID != 0 && meta.mode() & 0o010 != 0 && meta.gid() != gid;
    (setuid || setgid).then(|| {
        format!(
            "mlprof-collect: warning: {} is {}: the dynamic loader ignores LD_PRELOAD for it, so it \
             cannot be profiled (programs it execs can)",
            path.display(),
            if setuid { "setuid" } else { "setgid" }
        )
    })
}

/// `extra_env`: more variables for the child (`--torch`'s `PYTHONPATH`).
pub fn spawn(
    command: &[String],
    preload: &Path,
    shm_path: &Path,
    session: &str,
    extra_env: &[(&str, std::ffi::OsString)],
) -> Result<Child, String> {
    if let Some(warning) = setid_warning(&command[0]) {
        eprintln!("{warning}");
    }
    let mut ld_preload = preload.display().to_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        ld_preload.push(':');
        ld_preload.push_str(&existing.to_string_lossy());
    }
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .env("LD_PRELOAD", ld_preload)
        .env("MLPROF_SHM", shm_path)
        .env("MLPROF_SESSION", session);
    // mlprof is the ITT collector; one the user had chosen (VTune's) is chained behind it.
    let preload_os = preload.as_os_str();
    match std::env::var_os("INTEL_LIBITTNOTIFY64").filter(|v| !v.is_empty() && v.as_os_str() != preload_os) {
        Some(theirs) if std::env::var_os("MLPROF_ITT_CHAIN").is_none() => {
            cmd.env("MLPROF_ITT_CHAIN", theirs);
        }
        _ => {}
    }
    cmd.env("INTEL_LIBITTNOTIFY64", preload_os);
    for (name, value) in extra_env {
        cmd.env(name, value);
    }
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

/// Runs `command` without profiling (no ring could be made: `why`), forwarding SIGTERM, and
/// returns its exit status as the launcher's.
pub fn run_unprofiled(command: &[String], why: &str) -> Result<std::process::ExitCode, String> {
    eprintln!(
        "mlprof-collect: error: {why}; running {} without profiling (no run file is written)",
        command[0]
    );
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    // Safety: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    install_signal_handlers();
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {}: {e}", command[0]))?;
    let pid = child.id();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        forward_termination(pid);
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (code, signal) = describe(status);
    Ok(std::process::ExitCode::from(
        code.map(|c| c as u8).unwrap_or_else(|| 128u8.wrapping_add(signal.unwrap_or(0) as u8)),
    ))
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
