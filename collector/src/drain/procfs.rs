//! What /proc says about the profiled threads and processes.

/// A thread is alive while it exists and is not a zombie. With `zombies: false` a process
/// leader that exists counts as alive without asking /proc whether it is a zombie.
///
/// The collector asks this of every recording thread once a second, so it must be cheap.
/// Whether a thread exists is one `tgkill` with no signal; a thread other than its process's
/// leader is gone, not a zombie, once it has exited (only a leader stays, as a zombie, until
/// its parent reaps the process), so that answers for it. For a leader, telling a zombie takes
/// /proc/PID/task/TID/stat (open, read, close); the caller does that less often. Reading the
/// file with `read_to_string` for every thread took nine system calls and most of an idle
/// collector's CPU.
pub(super) fn thread_alive(pid: u32, tid: u32, zombies: bool) -> bool {
    // Safety: tgkill with signal 0 sends nothing; it only checks that the thread exists (and
    // whether we may signal it: EPERM means that it exists).
    let sent = unsafe { libc::syscall(libc::SYS_tgkill, pid as libc::pid_t, tid as libc::pid_t, 0) };
    if sent != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    if pid != tid || !zombies {
        return true;
    }
    let mut buffer = [0u8; STAT_BYTES];
    match stat_fields(&format!("/proc/{pid}/task/{tid}/stat"), &mut buffer) {
        Some(mut fields) => !matches!(fields.next(), Some(b"Z" | b"X")),
        None => false,
    }
}

/// Whether process `pid` exists (a zombie does, until its parent reaps it): one `kill` with no
/// signal, which sends nothing. A pid that is no process id at all (0, or past `i32::MAX`,
/// which `kill` would read as a process group) counts as existing, as `tgkill` answers for it
/// (the thread check once a second then decides, as before).
pub(super) fn process_exists(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return true;
    }
    // Safety: signal 0 sends nothing; it only checks that the process exists (EPERM: it does).
    let sent = unsafe { libc::kill(pid as libc::pid_t, 0) };
    !(sent != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
}

/// Room for a whole /proc stat line (52 numeric fields and a 16-byte command name).
const STAT_BYTES: usize = 4096;

/// The fields of a /proc stat line after the command name (from field 3, the state), read in
/// one `read` (these files have no size to ask for; `read_to_string` made six reads of a
/// growing buffer and a statx).
fn stat_fields<'a>(path: &str, buffer: &'a mut [u8]) -> Option<impl Iterator<Item = &'a [u8]> + use<'a>> {
    use std::io::Read;
    let n = std::fs::File::open(path).ok()?.read(buffer).ok()?;
    let line = &buffer[..n];
    // The command name is in parentheses and may hold any byte, ')' included: cut at the last.
    let after = line.iter().rposition(|&b| b == b')')? + 1;
    Some(line[after..].split(u8::is_ascii_whitespace).filter(|f| !f.is_empty()))
}

/// How process `pid` ended, while it is a zombie (its parent has not reaped it yet): field 52
/// of /proc/PID/stat is its wait status. (exit code, signal).
pub(super) fn zombie_exit(pid: u32) -> Option<(Option<i32>, Option<i32>)> {
    let mut buffer = [0u8; STAT_BYTES];
    let mut fields = stat_fields(&format!("/proc/{pid}/stat"), &mut buffer)?;
    if fields.next()? != b"Z" {
        return None;
    }
    // The state was field 3; the wait status is field 52.
    let status: i32 = std::str::from_utf8(fields.nth(52 - 4)?).ok()?.parse().ok()?;
    if status & 0x7f != 0 {
        Some((None, Some(status & 0x7f)))
    } else {
        Some((Some((status >> 8) & 0xff), None))
    }
}

pub(super) fn owner_uid(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}")).ok().map(|m| m.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gettid() -> u32 {
        // Safety: gettid takes no arguments and cannot fail.
        unsafe { libc::gettid() as u32 }
    }

    #[test]
    fn threads_are_alive_until_they_exit() {
        let pid = std::process::id();
        for zombies in [true, false] {
            assert!(thread_alive(pid, pid, zombies), "the leader");
            assert!(thread_alive(pid, gettid(), zombies), "this thread");
            let tid = std::thread::spawn(gettid).join().unwrap();
            // A joined thread has left user space, but the kernel may take a moment more to
            // let go of it (join returns when its tid word is cleared, before the task is
            // released); its tid is not reused this soon.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while thread_alive(pid, tid, zombies) {
                assert!(std::time::Instant::now() < deadline, "an exited thread still counts as alive");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert!(!thread_alive(pid, 1 << 30, zombies), "no such thread");
        }
    }

    #[test]
    fn a_process_exists_until_it_is_reaped() {
        assert!(process_exists(std::process::id()));
        assert!(process_exists(0) && process_exists(u32::MAX), "not process ids: left to the thread check");
        let mut child = std::process::Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while zombie_exit(pid).is_none() {
            assert!(std::time::Instant::now() < deadline, "the child did not end");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(process_exists(pid), "a zombie exists until it is reaped");
        child.wait().unwrap();
        assert!(!process_exists(pid));
    }

    #[test]
    fn a_zombie_leader_is_dead_and_says_how_it_ended() {
        let mut child = std::process::Command::new("sh").args(["-c", "exit 7"]).spawn().unwrap();
        let pid = child.id();
        // Until it is reaped the child is a zombie: /proc still lists it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while thread_alive(pid, pid, true) {
            assert!(std::time::Instant::now() < deadline, "the child did not end");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(zombie_exit(pid), Some((Some(7), None)));
        assert!(thread_alive(pid, pid, false), "a zombie exists until it is reaped");
        child.wait().unwrap();
        assert!(!thread_alive(pid, pid, true));
        assert!(!thread_alive(pid, pid, false));
    }
}
