//! The shared-memory segment: created private to the user (0600), initialized, and unlinked when
//! the collector finishes.

use std::ffi::CString;
use std::io;
use std::sync::atomic::Ordering;

use mlprof_format::ring::{
    HEADER_BYTES, RING_CLOSED, RING_MAGIC, RING_SERVING, RingGeometry, RingHeader, RingView,
};

pub struct Segment {
    name: CString,
    base: *mut u8,
    len: usize,
    pub geometry: RingGeometry,
    view: RingView,
    unlinked: bool,
}

impl Segment {
    /// Creates the segment `name` (e.g. `/mlprof-1000-default`), failing if it exists.
    pub fn create(name: &str, geometry: RingGeometry, clock_source: u32) -> io::Result<Segment> {
        let c_name = CString::new(name).map_err(|_| io::Error::other("segment name contains NUL"))?;
        let len = geometry.total_bytes() as usize;
        // Safety: plain libc calls on a fresh descriptor; errors are checked.
        unsafe {
            let fd = libc::shm_open(
                c_name.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // The umask cannot widen 0600, but make the mode explicit anyway.
            libc::fchmod(fd, 0o600);
            if libc::ftruncate(fd, len as libc::off_t) != 0 {
                let err = io::Error::last_os_error();
                libc::close(fd);
                libc::shm_unlink(c_name.as_ptr());
                return Err(err);
            }
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            libc::close(fd);
            if base == libc::MAP_FAILED {
                let err = io::Error::last_os_error();
                libc::shm_unlink(c_name.as_ptr());
                return Err(err);
            }
            let base = base as *mut u8;
            let segment = Segment {
                name: c_name,
                base,
                len,
                geometry,
                view: RingView::new(base, geometry),
                unlinked: false,
            };
            segment.init_header(clock_source);
            Ok(segment)
        }
    }

    fn init_header(&self, clock_source: u32) {
        // Safety: the mapping is fresh, zero-filled, page aligned and sized for the geometry.
        unsafe {
            RingView::initialize(self.base, self.geometry, clock_source, libc::geteuid(), std::process::id());
        }
    }

    pub fn view(&self) -> &RingView {
        &self.view
    }

    /// Stops accepting processes: new joiners see no segment, writers see the closed state.
    pub fn close(&mut self) {
        self.view.header().state.store(RING_CLOSED, Ordering::Release);
        self.unlink();
    }

    fn unlink(&mut self) {
        if !self.unlinked {
            // Safety: the name is a valid C string.
            unsafe { libc::shm_unlink(self.name.as_ptr()) };
            self.unlinked = true;
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.unlink();
        // Safety: unmapping our own mapping once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Removes the launcher segments (`/mlprof-UID-run-PID-…`) that collectors of this user left
/// behind when they were killed (SIGKILL gives no chance to unlink): their pages would stay in
/// memory until reboot. A segment whose collector pid is alive is left alone. Returns how many
/// were removed.
pub fn sweep_stale_launcher_segments(uid: u32) -> usize {
    let prefix = format!("mlprof-{uid}-run-");
    let Ok(entries) = std::fs::read_dir("/dev/shm") else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&prefix) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else { continue };
        // Safety: signal 0 only checks that the process exists.
        let alive = pid > 0 && unsafe { libc::kill(pid, 0) } == 0;
        let ours = entry.metadata().map(|m| std::os::unix::fs::MetadataExt::uid(&m) == uid).unwrap_or(false);
        if !alive
            && ours
            && let Ok(c_name) = CString::new(format!("/{name}"))
        {
            // Safety: unlinking a segment name of ours.
            if unsafe { libc::shm_unlink(c_name.as_ptr()) } == 0 {
                removed += 1;
            }
        }
    }
    removed
}

/// Whether an existing segment `name` is served by a live collector; removes it if stale.
pub fn check_existing(name: &str) -> io::Result<Option<u32>> {
    let c_name = CString::new(name).map_err(|_| io::Error::other("segment name contains NUL"))?;
    // Safety: libc calls with checked results; the mapping is dropped before returning.
    unsafe {
        let fd = libc::shm_open(c_name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0);
        if fd < 0 {
            return Ok(None);
        }
        let mut stat: libc::stat = std::mem::zeroed();
        let mut owner = None;
        if libc::fstat(fd, &mut stat) == 0 && stat.st_size as usize >= HEADER_BYTES {
            let base =
                libc::mmap(std::ptr::null_mut(), HEADER_BYTES, libc::PROT_READ, libc::MAP_SHARED, fd, 0);
            if base != libc::MAP_FAILED {
                let header = &*(base as *const RingHeader);
                let pid = header.collector_pid;
                if header.magic == RING_MAGIC
                    && header.state.load(Ordering::Acquire) == RING_SERVING
                    && pid != 0
                    && libc::kill(pid as i32, 0) == 0
                {
                    owner = Some(pid);
                }
                libc::munmap(base, HEADER_BYTES);
            }
        }
        libc::close(fd);
        if owner.is_none() {
            libc::shm_unlink(c_name.as_ptr());
        }
        Ok(owner)
    }
}
