//! Joining the collector's session: once per process, lazily (hooks can run before our
//! constructor), from the options in the environment. The join state machine is
//! `UNJOINED → JOINING → ACTIVE | OFF`; a process that found no session stays `OFF` and every
//! hook passes straight through.

use core::ffi::CStr;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use mlprof_format::ring::{CLOCK_TSC, RING_SERVING, RingHeader, RingView, validate_header};

use crate::clock;
use crate::config::Config;
use crate::guard;
use crate::sys;

const UNJOINED: u8 = 0;
const JOINING: u8 = 1;
const ACTIVE: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNJOINED);
static RING: OnceLock<RingView> = OnceLock::new();
/// This process's pid, refreshed in fork children.
static PID: AtomicU32 = AtomicU32::new(0);
/// The effective uid the process joined with (written into each lane it claims).
static UID: AtomicU32 = AtomicU32::new(0);
static CLOCK_EVENTS: AtomicBool = AtomicBool::new(false);
/// Clock reads whose count has these bits clear are timed (every 64th by default).
static TIMING_MASK: AtomicU64 = AtomicU64::new(63);

/// The ring this process joined, if any.
#[inline(always)]
pub fn ring() -> Option<&'static RingView> {
    RING.get()
}

/// This process's pid as the recorder knows it (set at join, refreshed in fork children).
#[inline(always)]
pub fn pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

/// Sets the pid after a fork; returns the previous one (the parent's).
pub(super) fn replace_pid(pid: u32) -> u32 {
    PID.swap(pid, Ordering::Relaxed)
}

/// The effective uid the process joined with.
pub fn uid() -> u32 {
    UID.load(Ordering::Relaxed)
}

/// `MLPROF_CLOCK=events`: every clock read is a record of its own instead of a count.
#[inline(always)]
pub fn clock_events() -> bool {
    CLOCK_EVENTS.load(Ordering::Relaxed)
}

/// Clock reads whose count has these bits clear are timed.
#[inline(always)]
pub(super) fn timing_mask() -> u64 {
    TIMING_MASK.load(Ordering::Relaxed)
}

/// Whether this process records (joined a session), without trying to join.
#[inline(always)]
pub fn is_active_quick() -> bool {
    STATE.load(Ordering::Acquire) == ACTIVE
}

/// Whether this process has not tried to join yet.
#[inline(always)]
pub(super) fn is_unjoined() -> bool {
    STATE.load(Ordering::Acquire) == UNJOINED
}

/// Joins the session named by the environment (once per process); returns whether calls are
/// recorded. Runs with the guard held, as foreign code: joining registers fork and thread-exit
/// handlers, which may allocate, and a preloaded malloc may then call hooked functions.
#[cold]
pub(super) fn join() -> bool {
    if STATE.compare_exchange(UNJOINED, JOINING, Ordering::Acquire, Ordering::Acquire).is_err() {
        return STATE.load(Ordering::Acquire) == ACTIVE;
    }
    let saved_errno = guard::errno();
    let joined = try_join();
    guard::set_errno(saved_errno);
    STATE.store(if joined { ACTIVE } else { OFF }, Ordering::Release);
    if joined {
        super::lifecycle::process_joined();
    }
    joined
}

fn try_join() -> bool {
    let uid = sys::geteuid();
    UID.store(uid, Ordering::Relaxed);
    let config = Config::from_env(uid);
    if config.disabled {
        return false;
    }
    CLOCK_EVENTS.store(config.clock_events, Ordering::Relaxed);
    TIMING_MASK.store(config.clock_timing_every as u64 - 1, Ordering::Relaxed);
    let mut name = [0u8; 130];
    let shm_name = config.shm_name();
    let Some(name_prefix) = name.get_mut(..shm_name.len()) else { return false };
    name_prefix.copy_from_slice(shm_name);
    let Ok(c_name) = CStr::from_bytes_until_nul(&name) else {
        return false;
    };
    let say = |why: &[u8]| {
        if !config.quiet {
            sys::log_line(&[
                b"mlprof: no session to join at ",
                config.shm_name(),
                b" (",
                why,
                b"); running without profiling",
            ]);
        }
    };
    let fd = match rustix::shm::open(c_name, rustix::shm::OFlags::RDWR, rustix::fs::Mode::empty()) {
        Ok(fd) => sys::Fd::new(fd),
        Err(rustix::io::Errno::NOENT) => {
            say(b"start mlprof-collect first");
            return false;
        }
        Err(_) => {
            say(b"cannot open it");
            return false;
        }
    };
    let Ok(stat) = rustix::fs::fstat(fd.borrow()) else {
        return false;
    };
    if stat.st_uid != uid {
        say(b"it belongs to another user");
        return false;
    }
    let size = stat.st_size as usize;
    if size < mlprof_format::ring::HEADER_BYTES {
        say(b"segment too small");
        return false;
    }
    // Safety: a fresh shared mapping of the whole segment; we never unmap it.
    let base = match unsafe {
        rustix::mm::mmap(
            core::ptr::null_mut(),
            size,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            fd.borrow(),
            0,
        )
    } {
        Ok(base) => base as *mut u8,
        Err(_) => {
            say(b"cannot map it");
            return false;
        }
    };
    // Safety: the mapping is at least HEADER_BYTES long and page aligned.
    let header = unsafe { &*(base as *const RingHeader) };
    let geometry = match validate_header(header, size as u64) {
        Ok(geometry) => geometry,
        Err(why) => {
            say(why.as_bytes());
            return false;
        }
    };
    if header.state.load(Ordering::Acquire) != RING_SERVING || !sys::process_exists(header.collector_pid) {
        say(b"its collector has exited");
        return false;
    }
    clock::set_use_tsc(header.clock_source == CLOCK_TSC);
    // Safety: the header was validated against the mapping size, which stays mapped for good.
    adopt(unsafe { RingView::new(base, geometry) });
    true
}

/// Makes `ring` the one this process records into.
fn adopt(ring: RingView) {
    let _ = RING.set(ring);
    PID.store(sys::getpid(), Ordering::Relaxed);
}

/// Joins `ring` directly, as a process whose environment named it would (unit tests, with a
/// ring in ordinary memory).
#[cfg(test)]
pub(crate) fn join_for_test(ring: RingView) {
    if STATE.compare_exchange(UNJOINED, JOINING, Ordering::Acquire, Ordering::Acquire).is_ok() {
        adopt(ring);
        STATE.store(ACTIVE, Ordering::Release);
    }
}
