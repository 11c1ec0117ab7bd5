//! Raw system calls through rustix's `linux_raw` backend: they never go through the libc PLT,
//! so they cannot re-enter our own hooks.

use rustix::fd::{AsFd, OwnedFd};

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
    read_to_fill(&fd, buf)
}

fn read_to_fill(fd: &OwnedFd, buf: &mut [u8]) -> usize {
    let mut len = 0;
    while let Some(rest) = buf.get_mut(len..).filter(|rest| !rest.is_empty()) {
        match rustix::io::read(fd.as_fd(), rest) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    len
}
