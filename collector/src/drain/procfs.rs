//! What /proc says about the profiled threads and processes.

/// A thread is alive while /proc lists it and it is not a zombie.
pub(super) fn thread_alive(pid: u32, tid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")) {
        Ok(stat) => match stat.rfind(')').and_then(|at| stat[at + 1..].split_whitespace().next()) {
            Some(state) => state != "Z" && state != "X",
            None => true,
        },
        Err(_) => false,
    }
}

/// How process `pid` ended, while it is a zombie (its parent has not reaped it yet): field 52
/// of /proc/PID/stat is its wait status. (exit code, signal).
pub(super) fn zombie_exit(pid: u32) -> Option<(Option<i32>, Option<i32>)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    // After the ')' the fields start at 3 (state); the wait status is field 52.
    if fields.first() != Some(&"Z") {
        return None;
    }
    let status: i32 = fields.get(52 - 3)?.parse().ok()?;
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
