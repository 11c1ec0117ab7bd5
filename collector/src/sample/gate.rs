//! Holding a launched child before its `execve` until the sampler is attached to it, as
//! `perf record -- cmd` does, so that nothing the program does goes unsampled.
//!
//! The child, between fork and exec, writes its pid into one pipe and waits for a byte on
//! another. std's `Command::spawn` returns only once the child has exec'd (it waits on a pipe
//! of its own), so the attaching runs on a helper thread, which reads the pid, calls
//! `attach(pid)`, then lets the child go with one byte. A byte, not the end of the pipe: a
//! process another thread forks meanwhile holds a copy of our write end until it execs, and if
//! that process is itself held by a gate, each child would wait for the other's exec. The end
//! of the pipe (this collector gone) lets the child go too.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

/// A pipe whose two ends close on exec, so the program never sees them.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // Safety: pipe2 writes two descriptors into the array we pass.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: both descriptors are new and ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Runs in the child between fork and exec: only async-signal-safe calls. It closes its copy of
/// the go pipe's write end (so that the collector's end closing is seen as the end), sends its
/// pid, and blocks until the go byte comes or the pipe ends.
fn hold(pid_write: RawFd, go_read: RawFd, go_write: RawFd) -> io::Result<()> {
    // Safety: close, getpid, write and read are async-signal-safe, and the descriptors are the
    // child's inherited copies of pipes the parent keeps open until `spawn` returns.
    unsafe {
        libc::close(go_write);
        let pid = libc::getpid().to_ne_bytes();
        libc::write(pid_write, pid.as_ptr().cast(), pid.len());
        libc::close(pid_write);
        let mut byte = 0u8;
        while libc::read(go_read, (&raw mut byte).cast(), 1) < 0 && *libc::__errno_location() == libc::EINTR {
        }
    }
    Ok(())
}

/// Reads the pid the held child sends; `None` at end of file (the child never got to its
/// pre-exec step: the fork failed).
fn read_pid(pid_read: &OwnedFd) -> Option<u32> {
    let mut pid = [0u8; 4];
    let mut got = 0;
    while got < pid.len() {
        // Safety: reading into the unfilled tail of a local buffer.
        let n = unsafe { libc::read(pid_read.as_raw_fd(), pid[got..].as_mut_ptr().cast(), pid.len() - got) };
        match n {
            0 => return None,
            n if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
            n if n < 0 => return None,
            n => got += n as usize,
        }
    }
    Some(u32::from_ne_bytes(pid))
}

/// Spawns `cmd` (taken: its pre-exec step names descriptors that are closed once it returns)
/// with its child held before exec until `attach(child pid)` has returned, and
/// returns the spawn's result with what `attach` returned (`None` when no child was made).
/// The child goes on whatever `attach` returns: a refused sampler does not stop the job.
pub(crate) fn spawn_attached<T: Send>(
    mut cmd: Command,
    attach: impl FnOnce(u32) -> T + Send,
) -> (io::Result<Child>, Option<T>) {
    let ((pid_read, pid_write), (go_read, go_write)) = match pipe().and_then(|a| Ok((a, pipe()?))) {
        Ok(pipes) => pipes,
        Err(e) => return (Err(e), None),
    };
    let (pw, gr, gw) = (pid_write.as_raw_fd(), go_read.as_raw_fd(), go_write.as_raw_fd());
    // Safety: `hold` makes only async-signal-safe calls.
    unsafe { cmd.pre_exec(move || hold(pw, gr, gw)) };
    std::thread::scope(|scope| {
        let attacher = scope.spawn(move || {
            let attached = read_pid(&pid_read).map(attach);
            // Safety: writing one byte from a local into the pipe we own; the child's read
            // returns and it execs. Should it fail, closing the end below ends the pipe.
            unsafe { libc::write(go_write.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
            drop(go_write);
            attached
        });
        let child = cmd.spawn();
        // With the child spawned or not, our write end goes: a child never made leaves the
        // attacher at end of file instead of waiting forever.
        drop(pid_write);
        let attached = attacher.join().unwrap_or(None);
        drop(go_read);
        (child, attached)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_waits_for_the_attach_and_reports_its_own_pid() {
        let (child, attached) = spawn_attached(Command::new("true"), |pid| {
            // The child is held: it has not exec'd `true`, so it is still a copy of this test.
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
            (pid, exe)
        });
        let mut child = child.unwrap();
        let (pid, exe) = attached.unwrap();
        assert_eq!(pid, child.id());
        assert_eq!(exe, std::env::current_exe().unwrap());
        assert!(child.wait().unwrap().success());
    }

    /// Whether `pid` has exec'd `true` within 10 s: it no longer runs this test's binary (or
    /// has exited already: a zombie's exe link does not read).
    fn execs_soon(pid: u32) -> bool {
        let ours = std::env::current_exe().unwrap();
        (0..1000).any(|_| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe"));
            let done = exe.is_err() || exe.is_ok_and(|exe| exe != ours);
            if !done {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            done
        })
    }

    #[test]
    fn a_child_held_by_another_gate_does_not_hold_ours() {
        // While the first child is held, a second gated spawn on another thread forks a child
        // that inherits the first gate's descriptors and stays held until the first child has
        // exec'd. Had the first gate let its child go by closing its pipe, that copy would
        // keep it waiting, and each child would wait for the other.
        std::thread::scope(|scope| {
            let (first, second) = spawn_attached(Command::new("true"), |first_pid| {
                let (forked, forked_rx) = std::sync::mpsc::channel();
                let second = scope.spawn(move || {
                    spawn_attached(Command::new("true"), |_| {
                        forked.send(()).unwrap();
                        execs_soon(first_pid)
                    })
                });
                forked_rx.recv().unwrap();
                second
            });
            let mut first = first.unwrap();
            let (second, first_went) = second.unwrap().join().unwrap();
            assert_eq!(first_went, Some(true), "the first child exec'd while the second was held");
            assert!(first.wait().unwrap().success());
            assert!(second.unwrap().wait().unwrap().success());
        });
    }

    #[test]
    fn a_program_that_cannot_run_leaves_no_one_waiting() {
        let (child, attached) = spawn_attached(Command::new("/nonexistent/program"), |pid| pid);
        assert_eq!(child.unwrap_err().kind(), io::ErrorKind::NotFound);
        assert!(attached.is_some(), "the fork happened; the exec failed after the attach");
    }
}
