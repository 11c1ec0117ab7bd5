//! Segments other collectors left: the launcher and session segments of collectors that were
//! killed (SIGKILL gives no chance to unlink), whose pages would stay in memory until reboot
//! (in a container's 64 MiB /dev/shm, every later ring shrinks for them). They are found by the
//! collector pid their header (or, for a launcher segment that is no ring, its name) holds, and
//! removed when that process is gone. Only the user's own files are looked at: another user's
//! is never touched, even by root, who could remove it.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mlprof_format::ring::RingHeader;

/// A segment the sweep removed: where it was, and the collector pid that is gone.
#[derive(Debug, PartialEq, Eq)]
pub struct Removed {
    pub path: PathBuf,
    pub pid: u32,
}

impl std::fmt::Display for Removed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "removed {}, left behind by mlprof-collect pid {}, which is gone",
            self.path.display(),
            self.pid
        )
    }
}

/// How long the sweep watches the heartbeat of a ring whose collector pid is gone before it
/// removes the ring. A pid is only gone in our pid namespace: a collector in another container
/// that shares the shm directory (`--ipc=host`, a pod's shared `/dev/shm`) is alive there, and
/// its passes stamp the heartbeat at least every 100 ms (it sleeps 100 ms at most); three
/// periods leave room for a slow pass. Only a sweep that found such a ring waits.
const HEARTBEAT_WATCH: Duration = Duration::from_millis(300);

/// Removes the segments of this user's collectors that are gone: launcher segments
/// (`mlprof-UID-run-PID-…`) and session segments (`mlprof-UID-NAME`) alike. A segment whose
/// collector pid exists, or whose heartbeat moves, is left alone, and so is a session file that
/// is no ring (it names no collector to judge it by), and any file another user owns. Returns
/// what was removed, for the caller to say.
pub fn sweep_leftover_segments(dir: &Path, uid: u32) -> Vec<Removed> {
    let suspects = suspects(dir, uid);
    if suspects.iter().any(|s| s.heartbeat.is_some()) {
        std::thread::sleep(HEARTBEAT_WATCH);
    }
    suspects.into_iter().filter_map(Suspect::remove_if_still_stale).collect()
}

/// A segment of ours whose collector pid is gone, kept open so that the file judged is the file
/// removed (a collector of the same session may replace it meanwhile).
struct Suspect {
    path: PathBuf,
    file: File,
    pid: u32,
    /// The ring's heartbeat when first read; `None` for a launcher segment that is no ring.
    heartbeat: Option<u64>,
}

fn suspects(dir: &Path, uid: u32) -> Vec<Suspect> {
    let prefix = format!("mlprof-{uid}-");
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let suspect = |entry: std::fs::DirEntry| {
        let name = entry.file_name();
        let rest = name.to_str()?.strip_prefix(&prefix)?;
        let path = entry.path();
        let file = open_own(&path, uid)?;
        // A launcher segment's header names the same pid as its name; a ring's header is read
        // first so that a session named like a launcher segment (`run-5-x`) is judged by its
        // collector.
        let (pid, heartbeat) = match read_prefix(&file).as_ref().and_then(ring_collector) {
            Some((pid, heartbeat)) => (pid, Some(heartbeat)),
            None => (launcher_pid(rest)?, None),
        };
        pid_gone(pid).then_some(Suspect { path, file, pid, heartbeat })
    };
    entries.flatten().filter_map(suspect).collect()
}

impl Suspect {
    /// Removes the segment unless its heartbeat moved since it was first read (a live collector
    /// in another pid namespace) or another file took its name.
    fn remove_if_still_stale(self) -> Option<Removed> {
        if let Some(seen) = self.heartbeat {
            let mut now = [0u8; 8];
            self.file.read_exact_at(&mut now, HEARTBEAT_AT as u64).ok()?;
            if u64::from_le_bytes(now) != seen {
                return None;
            }
        }
        // The path may name another file by now (the session's next collector removed this one
        // and made its own): only the file judged is removed.
        let (there, judged) = (std::fs::symlink_metadata(&self.path).ok()?, self.file.metadata().ok()?);
        if (there.dev(), there.ino()) != (judged.dev(), judged.ino()) {
            return None;
        }
        std::fs::remove_file(&self.path).ok()?;
        Some(Removed { path: self.path, pid: self.pid })
    }
}

/// `path` opened for reading when it is a regular file that `uid` owns (not through a symlink,
/// and still the same file once open).
fn open_own(path: &Path, uid: u32) -> Option<File> {
    let seen = std::fs::symlink_metadata(path).ok()?;
    if !seen.file_type().is_file() || seen.uid() != uid {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let opened = file.metadata().ok()?;
    ((opened.dev(), opened.ino()) == (seen.dev(), seen.ino()) && opened.uid() == uid).then_some(file)
}

/// The pid in a launcher segment's name (`run-PID-…`, after `mlprof-UID-`).
fn launcher_pid(rest: &str) -> Option<u32> {
    rest.strip_prefix("run-")?.split('-').next()?.parse().ok()
}

/// Whether no process `pid` exists. Only `ESRCH` says so: `EPERM` is a process of another user
/// that exists. 0 and pids beyond `i32::MAX` name no process (`kill` would take them for a
/// process group or every process).
fn pid_gone(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return true };
    // Safety: signal 0 only checks that the process exists.
    pid == 0
        || (unsafe { libc::kill(pid, 0) } != 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
}

/// The first bytes of a segment's header, when it has that many.
fn read_prefix(file: &File) -> Option<[u8; HEADER_PREFIX]> {
    let mut bytes = [0u8; HEADER_PREFIX];
    file.read_exact_at(&mut bytes, 0).ok()?;
    Some(bytes)
}

/// The collector pid and heartbeat a ring's header names; `None` when the bytes are no ring.
fn ring_collector(bytes: &[u8; HEADER_PREFIX]) -> Option<(u32, u64)> {
    let at = |offset: usize, len: usize| bytes.get(offset..offset + len);
    if at(0, 8)? != &mlprof_format::ring::RING_MAGIC[..] {
        return None;
    }
    let pid = u32::from_le_bytes(at(core::mem::offset_of!(RingHeader, collector_pid), 4)?.try_into().ok()?);
    let heartbeat = u64::from_le_bytes(at(HEARTBEAT_AT, 8)?.try_into().ok()?);
    Some((pid, heartbeat))
}

/// Where the header's heartbeat lies.
const HEARTBEAT_AT: usize = core::mem::offset_of!(RingHeader, heartbeat);
const _: () = assert!(HEARTBEAT_AT + 8 <= HEADER_PREFIX);

/// Whether an existing segment `name` in `dir` is served by a live collector (its pid); removes
/// it when stale. A file that `uid` does not own is left alone (root could remove it): creating
/// the segment then fails and says whose it is (`taken`).
pub fn check_existing(dir: &Path, name: &str, uid: u32) -> io::Result<Option<u32>> {
    use std::io::Read;
    let path = dir.join(name);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.uid() != uid) {
        return Ok(None);
    }
    let Ok(mut file) = File::open(&path) else { return Ok(None) };
    let mut header = [0u8; HEADER_PREFIX];
    let owner = match file.read_exact(&mut header) {
        Ok(()) => live_collector(&header),
        Err(_) => None,
    };
    if owner.is_none() {
        let _ = std::fs::remove_file(&path);
    }
    Ok(owner)
}

/// The bytes of a header that say whether a live collector serves it: up to its state word.
/// (64 bytes read to offset 72 once, so that every live session looked stale and a second
/// collector of the session removed the first one's segment.)
const HEADER_PREFIX: usize = 128;
const _: () = assert!(core::mem::offset_of!(RingHeader, state) + 4 <= HEADER_PREFIX);
const _: () = assert!(core::mem::offset_of!(RingHeader, collector_pid) + 4 <= HEADER_PREFIX);

/// The collector pid a header's first bytes name, when the ring is ready, serving and its
/// collector alive.
fn live_collector(bytes: &[u8; HEADER_PREFIX]) -> Option<u32> {
    let word = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let magic_ok = bytes.get(..8) == Some(&mlprof_format::ring::RING_MAGIC[..]);
    let pid = word(core::mem::offset_of!(RingHeader, collector_pid))?;
    let state = word(core::mem::offset_of!(RingHeader, state))?;
    // Safety: signal 0 only checks that the process exists.
    let alive = pid != 0 && unsafe { libc::kill(pid as i32, 0) } == 0;
    (magic_ok && state == mlprof_format::ring::RING_SERVING && alive).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TempDir, dead_pid};

    fn euid() -> u32 {
        // Safety: geteuid cannot fail.
        unsafe { libc::geteuid() }
    }

    /// The first 4 KiB of a serving ring whose header names collector `pid`.
    fn ring_header(pid: u32) -> Vec<u8> {
        use mlprof_format::ring::{CLOCK_MONOTONIC, RingGeometry, RingView};
        let geometry = RingGeometry { lane_count: 2, lane_capacity: 64 };
        let ring = mlprof_format::testing::HeapRing::new(geometry);
        // Safety: the heap ring is zeroed memory of the geometry's size that no view uses.
        unsafe { RingView::initialize(ring.base(), geometry, CLOCK_MONOTONIC, 0, pid, 1) };
        // Safety: the header's bytes, within the ring's allocation, read while nothing writes.
        unsafe { std::slice::from_raw_parts(ring.base(), 4096) }.to_vec()
    }

    #[test]
    fn the_segments_of_dead_collectors_are_swept_and_nothing_else() {
        let dir = TempDir::new("leftovers-sweep");
        let uid = euid();
        let (dead, alive) = (dead_pid(), std::process::id());
        let stale_launcher = format!("mlprof-{uid}-run-{dead}-1f2e");
        let stale_session = format!("mlprof-{uid}-t2");
        let files: Vec<(String, Vec<u8>)> = vec![
            (stale_launcher.clone(), b"ring".to_vec()),
            (stale_session.clone(), ring_header(dead)),
            // Kept: a live launcher; a live session; a session named like a launcher segment
            // of a dead pid, whose header names its live collector; a session file that is no
            // ring (no collector to judge it by); another user's launcher segment; a name with
            // no pid.
            (format!("mlprof-{uid}-run-{alive}-1f2e"), b"ring".to_vec()),
            (format!("mlprof-{uid}-default"), ring_header(alive)),
            (format!("mlprof-{uid}-run-{dead}-x"), ring_header(alive)),
            (format!("mlprof-{uid}-notes"), b"ring".to_vec()),
            (format!("mlprof-{}-run-{dead}-1f2e", uid + 1), b"ring".to_vec()),
            (format!("mlprof-{uid}-run-x-1f2e"), b"ring".to_vec()),
        ];
        for (name, bytes) in &files {
            std::fs::write(dir.path().join(name), bytes).unwrap();
        }
        let mut removed = sweep_leftover_segments(dir.path(), uid);
        removed.sort_by(|a, b| a.path.cmp(&b.path));
        let mut want: Vec<Removed> = [stale_launcher, stale_session]
            .iter()
            .map(|name| Removed { path: dir.path().join(name), pid: dead })
            .collect();
        want.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(removed, want);
        assert!(files[2..].iter().all(|(name, _)| dir.path().join(name).exists()), "the others are left");
        let said = removed[0].to_string();
        assert!(said.contains(&format!("pid {dead}, which is gone")) && said.contains("removed /"), "{said}");
    }

    #[test]
    fn another_users_files_are_never_swept() {
        // The files are ours; swept as the user `uid + 1`, whose names they bear, they are
        // another user's files (as a file another user made under root's names is to root).
        let dir = TempDir::new("leftovers-foreign");
        let other = euid() + 1;
        let dead = dead_pid();
        let names = [format!("mlprof-{other}-run-{dead}-1f2e"), format!("mlprof-{other}-t2")];
        std::fs::write(dir.path().join(&names[0]), b"ring").unwrap();
        std::fs::write(dir.path().join(&names[1]), ring_header(dead)).unwrap();
        assert_eq!(sweep_leftover_segments(dir.path(), other), []);
        assert!(names.iter().all(|name| dir.path().join(name).exists()));
        assert_eq!(check_existing(dir.path(), &names[1], other).unwrap(), None);
        assert!(dir.path().join(&names[1]).exists(), "check_existing leaves it too");
    }

    #[test]
    fn a_ring_whose_heartbeat_moves_is_left_alone() {
        use std::sync::atomic::{AtomicBool, Ordering};
        // A collector in another pid namespace: its pid is gone here, its heartbeat moves.
        let dir = TempDir::new("leftovers-heartbeat");
        let name = format!("mlprof-{}-elsewhere", euid());
        let path = dir.path().join(&name);
        std::fs::write(&path, ring_header(dead_pid())).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            scope.spawn(|| {
                let file = file;
                for beat in 1u64.. {
                    file.write_all_at(&beat.to_le_bytes(), HEARTBEAT_AT as u64).unwrap();
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            let removed = sweep_leftover_segments(dir.path(), euid());
            stop.store(true, Ordering::Relaxed);
            assert_eq!(removed, [], "a moving heartbeat says the collector is alive");
        });
        assert!(path.exists());
        // Once it stops, the ring is stale.
        let removed = sweep_leftover_segments(dir.path(), euid());
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert!(!path.exists());
    }

    #[test]
    fn a_session_segment_that_is_no_serving_ring_is_removed() {
        let dir = TempDir::new("leftovers-existing");
        let uid = euid();
        assert_eq!(check_existing(dir.path(), "mlprof-0-none", uid).unwrap(), None, "no segment at all");
        // Shorter than a header, and a header-sized file that is no ring: nobody serves them.
        for (name, bytes) in [("mlprof-0-short", vec![7u8; 10]), ("mlprof-0-zeroes", vec![0u8; 4096])] {
            std::fs::write(dir.path().join(name), bytes).unwrap();
            assert_eq!(check_existing(dir.path(), name, uid).unwrap(), None);
            assert!(!dir.path().join(name).exists(), "{name} is removed as stale");
        }
    }

    #[test]
    fn a_session_segment_a_live_collector_serves_is_left_alone() {
        let dir = TempDir::new("leftovers-live");
        let uid = euid();
        // Served by this process (alive): kept, and its collector named.
        std::fs::write(dir.path().join("mlprof-0-live"), ring_header(std::process::id())).unwrap();
        assert_eq!(check_existing(dir.path(), "mlprof-0-live", uid).unwrap(), Some(std::process::id()));
        assert!(dir.path().join("mlprof-0-live").exists());
        // The same header naming a collector that is gone: stale, removed.
        std::fs::write(dir.path().join("mlprof-0-dead"), ring_header(dead_pid())).unwrap();
        assert_eq!(check_existing(dir.path(), "mlprof-0-dead", uid).unwrap(), None);
        assert!(!dir.path().join("mlprof-0-dead").exists());
    }
}
