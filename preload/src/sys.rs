//! Raw system calls through rustix's `linux_raw` backend: they never go through the libc PLT,
//! so they cannot re-enter our own hooks.

use rustix::fd::{AsFd, OwnedFd};

/// Writes a diagnostic line to stderr without stdio, allocation or our hooks.
pub fn log_line(parts: &[&[u8]]) {
    let stderr = rustix::stdio::stderr();
    let mut line = [0u8; 512];
    let mut len = 0;
    for part in parts {
        let take = part.len().min(line.len() - 1 - len);
        line[len..len + take].copy_from_slice(&part[..take]);
        len += take;
    }
    line[len] = b'\n';
    len += 1;
    let mut written = 0;
    while written < len {
        match rustix::io::write(stderr, &line[written..len]) {
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
    while len < buf.len() {
        match rustix::io::read(fd.as_fd(), &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    len
}
