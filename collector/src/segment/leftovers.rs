//! Segments other collectors left: the launcher segments of collectors that were killed
//! (SIGKILL gives no chance to unlink), and a session's segment whose collector is gone. Both
//! are found by the collector pid their name or header holds, and removed when it is dead.

use std::fs::File;
use std::io;
use std::path::Path;

use mlprof_format::ring::RingHeader;

/// Removes the launcher segments (`mlprof-UID-run-PID-…`) that collectors of this user left
/// behind when they were killed (SIGKILL gives no chance to unlink): their pages would stay in
/// memory until reboot. A segment whose collector pid is alive is left alone. Returns how many
/// were removed.
pub fn sweep_stale_launcher_segments(dir: &Path, uid: u32) -> usize {
    let prefix = format!("mlprof-{uid}-run-");
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&prefix) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else { continue };
        // Safety: signal 0 only checks that the process exists.
        let alive = pid > 0 && unsafe { libc::kill(pid, 0) } == 0;
        let ours = entry.metadata().map(|m| std::os::unix::fs::MetadataExt::uid(&m) == uid).unwrap_or(false);
        if !alive && ours && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Whether an existing segment `name` in `dir` is served by a live collector (its pid); removes
/// it when stale.
pub fn check_existing(dir: &Path, name: &str) -> io::Result<Option<u32>> {
    use std::io::Read;
    let path = dir.join(name);
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

    #[test]
    fn only_the_launcher_segments_of_dead_collectors_are_swept() {
        let dir = TempDir::new("leftovers-sweep");
        // Safety: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        let (dead, alive) = (dead_pid(), std::process::id());
        let names = [
            format!("mlprof-{uid}-run-{dead}-1f2e"),
            format!("mlprof-{uid}-run-{alive}-1f2e"),
            // A session's segment, another user's launcher segment, and a name with no pid:
            // none of them is this sweep's to judge.
            format!("mlprof-{uid}-default"),
            format!("mlprof-{}-run-{dead}-1f2e", uid + 1),
            format!("mlprof-{uid}-run-x-1f2e"),
        ];
        for name in &names {
            std::fs::write(dir.path().join(name), b"ring").unwrap();
        }
        assert_eq!(sweep_stale_launcher_segments(dir.path(), uid), 1);
        assert!(!dir.path().join(&names[0]).exists(), "the dead collector's segment is gone");
        assert!(names[1..].iter().all(|name| dir.path().join(name).exists()), "the others are left");
    }

    #[test]
    fn a_session_segment_that_is_no_serving_ring_is_removed() {
        let dir = TempDir::new("leftovers-existing");
        assert_eq!(check_existing(dir.path(), "mlprof-0-none").unwrap(), None, "no segment at all");
        // Shorter than a header, and a header-sized file that is no ring: nobody serves them.
        for (name, bytes) in [("mlprof-0-short", vec![7u8; 10]), ("mlprof-0-zeroes", vec![0u8; 4096])] {
            std::fs::write(dir.path().join(name), bytes).unwrap();
            assert_eq!(check_existing(dir.path(), name).unwrap(), None);
            assert!(!dir.path().join(name).exists(), "{name} is removed as stale");
        }
    }

    #[test]
    fn a_session_segment_a_live_collector_serves_is_left_alone() {
        use mlprof_format::ring::{CLOCK_MONOTONIC, RingGeometry, RingView};
        let dir = TempDir::new("leftovers-live");
        let geometry = RingGeometry { lane_count: 2, lane_capacity: 64 };
        let ring = mlprof_format::testing::HeapRing::new(geometry);
        let header_of = |pid: u32| {
            // Safety: the heap ring is zeroed memory of the geometry's size that no view uses
            // while it is initialized again, here, with another collector pid.
            unsafe { RingView::initialize(ring.base(), geometry, CLOCK_MONOTONIC, 0, pid, 1) };
            // Safety: the header's bytes, within the ring's allocation, read while nothing writes.
            unsafe { std::slice::from_raw_parts(ring.base(), 4096) }.to_vec()
        };
        // Served by this process (alive): kept, and its collector named.
        std::fs::write(dir.path().join("mlprof-0-live"), header_of(std::process::id())).unwrap();
        assert_eq!(check_existing(dir.path(), "mlprof-0-live").unwrap(), Some(std::process::id()));
        assert!(dir.path().join("mlprof-0-live").exists());
        // The same header naming a collector that is gone: stale, removed.
        std::fs::write(dir.path().join("mlprof-0-dead"), header_of(dead_pid())).unwrap();
        assert_eq!(check_existing(dir.path(), "mlprof-0-dead").unwrap(), None);
        assert!(!dir.path().join("mlprof-0-dead").exists());
    }
}
