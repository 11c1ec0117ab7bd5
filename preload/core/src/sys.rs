//! Raw system calls through rustix's `linux_raw` backend: they never go through the libc PLT,
//! so they cannot re-enter our own hooks.

use rustix::fd::{BorrowedFd, IntoRawFd, OwnedFd};

/// Copies as much of `src` as fits at the start of `dst`; returns how much that was.
pub fn copy_prefix(dst: &mut [u8], src: &[u8]) -> usize {
    let len = dst.len().min(src.len());
    if let (Some(to), Some(from)) = (dst.get_mut(..len), src.get(..len)) {
        to.copy_from_slice(from);
    }
    len
}

/// Writes a diagnostic line to stderr without stdio, allocation or our hooks (at most 511
/// bytes of text; the rest is cut).
pub fn log_line(parts: &[&[u8]]) {
    let stderr = rustix::stdio::stderr();
    const LINE: usize = 512;
    let mut line = [0u8; LINE];
    let mut len = 0;
    for part in parts {
        let room = line.get_mut(len..LINE - 1).unwrap_or_default();
        len += copy_prefix(room, part);
    }
    len += copy_prefix(line.get_mut(len..).unwrap_or_default(), b"\n");
    let mut written = 0;
    while let Some(rest) = line.get(written..len).filter(|rest| !rest.is_empty()) {
        match rustix::io::write(stderr, rest) {
            Ok(0) => break,
            Ok(n) => written += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
}

pub fn getpid() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}

pub fn getppid() -> u32 {
    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32)
}

pub fn gettid() -> u32 {
    rustix::thread::gettid().as_raw_nonzero().get() as u32
}

pub fn geteuid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether a process exists (signal 0).
pub fn process_exists(pid: u32) -> bool {
    match rustix::process::Pid::from_raw(pid as i32) {
        Some(pid) => !matches!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH)),
        None => false,
    }
}

/// Reads a whole small file (e.g. `/proc/self/cmdline`) into `buf`; returns the length.
pub fn read_small_file(path: &str, buf: &mut [u8]) -> usize {
    let Ok(fd) = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return 0;
    };
    let fd = Fd::new(fd);
    read_to_fill(fd.borrow(), buf)
}

/// A descriptor of ours, closed with the raw system call: std's `OwnedFd` closes through
/// libc's `close`, which is our own hook (and would count as a call of the application's).
pub struct Fd(i32);

impl Fd {
    /// Takes over `fd`.
    pub fn new(fd: OwnedFd) -> Fd {
        Fd(fd.into_raw_fd())
    }

    /// The descriptor, for as long as `self` lives.
    pub fn borrow(&self) -> BorrowedFd<'_> {
        // Safety: `self.0` is open until `self` is dropped.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // Safety: `self.0` is ours and closed exactly once, here.
        unsafe { rustix::io::close(self.0) };
    }
}

fn read_to_fill(fd: BorrowedFd<'_>, buf: &mut [u8]) -> usize {
    let mut len = 0;
    while let Some(rest) = buf.get_mut(len..).filter(|rest| !rest.is_empty()) {
        match rustix::io::read(fd, rest) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    len
}

/// An empty signal set.
pub fn empty_sigset() -> libc::sigset_t {
    // Safety: sigset_t is plain data; sigemptyset initializes it.
    let mut set: libc::sigset_t = unsafe { core::mem::zeroed() };
    // Safety: a valid pointer to a set.
    unsafe { libc::sigemptyset(&mut set) };
    set
}

/// Every signal except the synchronous ones (a fault, a trap, a bad system call), which are
/// delivered to the faulting thread whatever its mask says and kill it when blocked.
pub fn async_signals() -> libc::sigset_t {
    // Safety: sigset_t is plain data; sigfillset initializes it.
    let mut set: libc::sigset_t = unsafe { core::mem::zeroed() };
    // Safety: valid pointers to a set.
    unsafe {
        libc::sigfillset(&mut set);
        for signal in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, libc::SIGSYS] {
            libc::sigdelset(&mut set, signal);
        }
    }
    set
}
