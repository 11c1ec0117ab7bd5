//! Launcher mode: the child's environment, signal forwarding and exit status.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// The library's file name, in a build directory and in the Python package alike.
const PRELOAD_NAME: &str = "libmlprof.so";

/// The libmlprof.so to inject, the first of: `--preload`; `$MLPROF_PRELOAD`; the one next to
/// this binary (a cargo build: `target/release/`); the Python package's copy when this binary
/// came from the wheel ([`installed_copy`]).
pub fn find_preload(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let chosen = match explicit {
        Some(path) => Some((path.to_path_buf(), "--preload")),
        None => std::env::var_os("MLPROF_PRELOAD")
            .filter(|v| !v.is_empty())
            .map(|path| (PathBuf::from(path), "$MLPROF_PRELOAD")),
    };
    if let Some((path, source)) = chosen {
        return std::fs::canonicalize(&path)
            .map_err(|e| format!("cannot use {} from {source}: {e}", path.display()));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate mlprof-collect itself: {e}"))?;
    let bin_dir = exe.parent().unwrap_or(Path::new("/"));
    let beside = bin_dir.join(PRELOAD_NAME);
    let found = if beside.is_file() { Some(beside) } else { installed_copy(bin_dir) };
    match found {
        Some(path) => std::fs::canonicalize(&path).map_err(|e| format!("cannot use {}: {e}", path.display())),
        None => Err(format!(
            "cannot find {PRELOAD_NAME}: it is neither next to {} nor in a Python package `mlprof` \
             installed with it. From a checkout, build it with `cargo build --release`; from pip, \
             reinstall with `pip install --force-reinstall mlprof`; or name it with --preload PATH \
             (or $MLPROF_PRELOAD)",
            exe.display()
        )),
    }
}

/// The wheel installs this binary into a scripts directory (`<prefix>/bin`) and the library
/// into the Python package `mlprof` of the same installation scheme, so that `pip uninstall`
/// removes both: `<prefix>/lib*/<python>/{site,dist}-packages/mlprof/libmlprof.so` (a venv,
/// conda, `pip install --user`, `/usr/local` with Debian's dist-packages, lib64 on Fedora) or
/// `<prefix>/mlprof/libmlprof.so` (`pip install --target`). When several Pythons of one prefix
/// have it, the one whose `mlprof-<version>.dist-info` matches this binary's version wins: it
/// was installed with this binary.
fn installed_copy(bin_dir: &Path) -> Option<PathBuf> {
    let prefix = bin_dir.parent()?;
    let mut candidates = vec![prefix.join("mlprof")];
    let subdirs = |dir: &Path| -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        dirs.sort();
        dirs
    };
    for lib in subdirs(prefix) {
        if !lib.file_name().is_some_and(|n| n.to_string_lossy().starts_with("lib")) {
            continue;
        }
        for python in subdirs(&lib) {
            for packages in ["site-packages", "dist-packages"] {
                candidates.push(python.join(packages).join("mlprof"));
            }
        }
    }
    let installed: Vec<PathBuf> =
        candidates.into_iter().filter(|package| package.join(PRELOAD_NAME).is_file()).collect();
    let dist_info = format!("mlprof-{}.dist-info", env!("CARGO_PKG_VERSION"));
    let ours = installed.iter().find(|package| package.with_file_name(&dist_info).is_dir());
    ours.or(installed.first()).map(|package| package.join(PRELOAD_NAME))
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
    let mut cmd = profiled_command(command, preload, shm_path, session, extra_env);
    cmd.spawn().map_err(|e| format!("cannot run {}: {e}", command[0]))
}

/// The command to launch under the library (what [`spawn`] runs): its environment and the
/// signal dispositions its child starts with.
pub fn profiled_command(
    command: &[String],
    preload: &Path,
    shm_path: &Path,
    session: &str,
    extra_env: &[(&str, std::ffi::OsString)],
) -> Command {
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
    cmd
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
/// SIGCHLD deliveries so far (see [`ChildWatch`]).
static CHILD_SIGNALS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    TERMINATION.store(signal, Ordering::Relaxed);
}

/// SIGINT and SIGTERM set a flag: attach mode stops; launcher mode forwards SIGTERM to the child
/// (a terminal's Ctrl-C already reaches the child through its process group).
pub fn install_signal_handlers() {
    // Safety: the handlers only touch atomics; the signal set is a zeroed local that
    // sigemptyset initializes before use. SIGCHLD gets a handler of its
    // own (not SIG_IGN, which would reap children behind waitpid's back) so that the end of the
    // command interrupts the collector's sleep at once (no SA_RESTART, so the futex wait
    // returns early).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        let mut child: libc::sigaction = std::mem::zeroed();
        child.sa_sigaction = on_child as *const () as libc::sighandler_t;
        libc::sigaction(libc::SIGCHLD, &child, std::ptr::null_mut());
        // A SIGCHLD blocked in the mask this process inherited would neither cut the sleep
        // short nor tell `ChildWatch`: the end of the command would wait for its safety net.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

extern "C" fn on_child(_signal: libc::c_int) {
    CHILD_SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// Tells the launcher when asking whether the child ended is worth a `waitpid`: after a
/// SIGCHLD, and every `SAFETY_NET` passes in case one was missed (a signal the collector's
/// mask blocked, a handler some library replaced). A `waitpid` every pass was ~6 % of an
/// idle collector's CPU (`perf record -e cpu-clock`; BENCHMARKS.md).
pub struct ChildWatch {
    seen: u32,
    passes: u32,
}

impl ChildWatch {
    /// Asks every tenth pass at the latest (about a second, at the idle collector's pace).
    const SAFETY_NET: u32 = 10;

    /// Before the child is spawned, with the handlers installed: the first pass asks.
    pub fn new() -> ChildWatch {
        ChildWatch { seen: CHILD_SIGNALS.load(Ordering::Relaxed).wrapping_sub(1), passes: 0 }
    }

    /// Whether to call `waitpid` in this pass. The counter is read before the call, so a child
    /// that ends after it raises the count again and the next pass asks.
    pub fn should_ask(&mut self) -> bool {
        let now = CHILD_SIGNALS.load(Ordering::Acquire);
        self.passes += 1;
        if now == self.seen && self.passes < Self::SAFETY_NET {
            return false;
        }
        self.seen = now;
        self.passes = 0;
        true
    }
}

impl Default for ChildWatch {
    fn default() -> ChildWatch {
        ChildWatch::new()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    #[test]
    fn the_child_is_asked_after_its_signal_and_now_and_then() {
        let mut watch = ChildWatch::new();
        assert!(watch.should_ask(), "the first pass asks");
        let quiet = (0..ChildWatch::SAFETY_NET - 1).filter(|_| watch.should_ask()).count();
        assert_eq!(quiet, 0, "no signal, no waitpid");
        assert!(watch.should_ask(), "the safety net");
        assert!(!watch.should_ask());
        on_child(libc::SIGCHLD);
        assert!(watch.should_ask(), "a SIGCHLD");
        assert!(!watch.should_ask(), "once per signal");
    }

    /// A fresh directory standing for an installation prefix; removed on drop.
    struct Prefix(TempDir);

    impl Prefix {
        fn new(tag: &str) -> Prefix {
            let dir = TempDir::new(&format!("prefix-{tag}"));
            std::fs::create_dir_all(dir.path().join("bin")).unwrap();
            Prefix(dir)
        }

        /// Installs a package `mlprof` (with its dist-info of `version`) under `relative`.
        fn install(&self, relative: &str, version: &str) -> PathBuf {
            let packages = self.0.path().join(relative);
            std::fs::create_dir_all(packages.join("mlprof")).unwrap();
            std::fs::create_dir_all(packages.join(format!("mlprof-{version}.dist-info"))).unwrap();
            let lib = packages.join("mlprof").join(PRELOAD_NAME);
            std::fs::write(&lib, b"").unwrap();
            lib
        }
    }

    #[test]
    fn finds_the_package_copy_of_each_installation_scheme() {
        let ours = env!("CARGO_PKG_VERSION");
        for (tag, relative) in [
            ("venv", "lib/python3.11/site-packages"),
            ("debian", "lib/python3.11/dist-packages"),
            ("fedora", "lib64/python3.12/site-packages"),
            ("pypy", "lib/pypy3.10/site-packages"),
            ("target", ""),
        ] {
            let prefix = Prefix::new(tag);
            let lib = prefix.install(relative, ours);
            assert_eq!(installed_copy(&prefix.0.path().join("bin")), Some(lib), "{tag}");
        }
        assert_eq!(installed_copy(&Prefix::new("none").0.path().join("bin")), None);
    }

    #[test]
    fn prefers_the_copy_installed_with_this_binary() {
        let prefix = Prefix::new("two-pythons");
        prefix.install("lib/python3.10/site-packages", "0.0.1");
        let ours = prefix.install("lib/python3.12/site-packages", env!("CARGO_PKG_VERSION"));
        assert_eq!(installed_copy(&prefix.0.path().join("bin")), Some(ours));
    }
}
