//! Joining the collector's ring, and letting go of it: sessions come and go, processes stay.
//!
//! States: `UNJOINED` (nothing tried yet; hooks can run before our constructor) → `ACTIVE`
//! (recording into a ring), `WAITING` (the session has no collector now: every hook passes
//! through, and a join is tried again at most every half second) or `OFF` (recording disabled,
//! or the launcher's own run is over). An `ACTIVE` process looks at its ring about every 100 ms
//! (on the timestamps its records take anyway): a ring its collector closed, or whose collector
//! is gone, is released and the process goes `WAITING` (a session) or `OFF` (a launcher run).
//!
//! Releasing never unmaps memory another thread may be writing: the ring's pages are replaced
//! in place by anonymous memory (one `mmap` with `MAP_FIXED`), which lets the old segment go
//! and swallows the writes of threads still in the middle of a record. Each join is an epoch;
//! a thread's lane and the strings a process sent are valid for one epoch only.
//!
//! The bottom layer of the recorder: nothing here imports the rest of it. What joining takes
//! from above comes in as arguments or goes back as results: how lanes are backed
//! (`join`'s `back`), and announcing the process (`Join::JustJoined` tells the caller to).

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use mlprof_format::ring::{
    BackFn, CLOCK_TSC, RING_CLOSED, RING_SERVING, RingHeader, RingView, validate_header,
};

use crate::clock;
use crate::config::Config;
use crate::guard;
use crate::sys;

const UNJOINED: u8 = 0;
const JOINING: u8 = 1;
const ACTIVE: u8 = 2;
const WAITING: u8 = 3;
const OFF: u8 = 4;

/// Joins (epochs) a process can make; after the last one it stays off.
const MAX_EPOCHS: usize = 64;

static STATE: AtomicU8 = AtomicU8::new(UNJOINED);
/// The ring of each epoch (a released one points at anonymous memory). Static storage, so that
/// joining allocates nothing: a hook may join from inside a preloaded malloc (jemalloc's
/// initialization maps memory with our `mmap`), where allocating would deadlock on its lock.
static RINGS: [OnceLock<RingView>; MAX_EPOCHS] = [const { OnceLock::new() }; MAX_EPOCHS];
/// The current epoch: index into `RINGS` + 1 (0 = none yet).
static EPOCH: AtomicU32 = AtomicU32::new(0);
/// Who is recording: `epoch << 32 | pid`. A thread's lane belongs to one identity: a fork
/// child (new pid) and a rejoined process (new epoch) claim lanes anew.
static IDENTITY: AtomicU64 = AtomicU64::new(0);
/// The effective uid the process joined with (written into each lane it claims).
static UID: AtomicU32 = AtomicU32::new(0);
/// This process image's nonce (see `Lane::image`), drawn at its first join.
static IMAGE: AtomicU64 = AtomicU64::new(0);
static CLOCK_EVENTS: AtomicBool = AtomicBool::new(false);
/// Clock reads whose count has these bits clear are timed (every 64th by default).
static TIMING_MASK: AtomicU64 = AtomicU64::new(63);
/// Ring clock time of the next look at the ring (see `check`).
static NEXT_CHECK: AtomicU64 = AtomicU64::new(u64::MAX);
/// `check_period` of the current ring.
static CHECK_PERIOD: AtomicU64 = AtomicU64::new(u64::MAX);
/// CLOCK_MONOTONIC_COARSE ns of the next join attempt while `WAITING`.
static NEXT_ATTEMPT: AtomicU64 = AtomicU64::new(0);
/// How long a waiting process lets pass between two join attempts.
const RETRY_NS: u64 = 500_000_000;
/// The capture gate hooks load (`RingHeader::capture` of the current ring; `ZERO_GATE`, which
/// records, before the first join). A ring's memory is never unmapped (see `release`), so the
/// pointer stays valid; a released ring's gate reads zero, and its process is not `ACTIVE`.
static GATE: AtomicPtr<AtomicU32> = AtomicPtr::new(&ZERO_GATE as *const AtomicU32 as *mut AtomicU32);
static ZERO_GATE: AtomicU32 = AtomicU32::new(0);

/// The ring of the current epoch, if any.
#[inline(always)]
pub fn ring() -> Option<&'static RingView> {
    let epoch = EPOCH.load(Ordering::Acquire) as usize;
    RINGS.get(epoch.checked_sub(1)?)?.get()
}

/// This process's pid as the recorder knows it (set at join, refreshed in fork children).
#[inline(always)]
pub fn pid() -> u32 {
    IDENTITY.load(Ordering::Relaxed) as u32
}

/// Who records now (`epoch << 32 | pid`): what a thread's lane is checked against.
#[inline(always)]
pub fn identity() -> u64 {
    IDENTITY.load(Ordering::Relaxed)
}

/// The current epoch (1 for the first join), which salts the per-process sets of strings sent.
#[inline(always)]
pub fn epoch() -> u32 {
    (IDENTITY.load(Ordering::Relaxed) >> 32) as u32
}

/// Sets the pid after a fork; returns the previous one (the parent's).
pub(super) fn replace_pid(pid: u32) -> u32 {
    let old = IDENTITY.load(Ordering::Relaxed);
    IDENTITY.store((old & !0xffff_ffff) | pid as u64, Ordering::Relaxed);
    old as u32
}

/// The effective uid the process joined with.
pub fn uid() -> u32 {
    UID.load(Ordering::Relaxed)
}

/// This process image's nonce.
pub fn image() -> u64 {
    IMAGE.load(Ordering::Relaxed)
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

/// Whether the ring's capture gate lets calls be recorded now (see `mlprof_format::ring`'s
/// `capture`): two dependent loads and a branch, before any other work of a hook.
#[inline(always)]
pub fn capturing() -> bool {
    // Safety: `GATE` points at a static or at the header of a ring, whose memory stays mapped
    // for the life of the process (see `GATE`).
    let gate = unsafe { &*GATE.load(Ordering::Relaxed) };
    gate.load(Ordering::Relaxed) & mlprof_format::ring::CAPTURE_PAUSED == 0
}

/// Whether this process records (joined a ring), without trying to join.
#[inline(always)]
pub fn is_active_quick() -> bool {
    STATE.load(Ordering::Acquire) == ACTIVE
}

/// Whether a join should be tried now: never tried, or waiting for the session's next
/// collector and the retry interval has passed.
#[inline(always)]
pub(super) fn may_join() -> bool {
    match STATE.load(Ordering::Acquire) {
        UNJOINED => true,
        WAITING => clock::coarse_ns() >= NEXT_ATTEMPT.load(Ordering::Relaxed),
        _ => false,
    }
}

/// Whether a call made now may be recorded: the process records, or a join is due. A hook that
/// does work of its own before `Span::begin` (dlopen's routing) tests this first, as
/// `Span::begin` does, so a process that does not record only pays a load and a branch.
#[inline(always)]
pub fn may_record() -> bool {
    is_active_quick() || may_join()
}

/// What a call of [`join`] found or did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Join {
    /// This call joined a ring: calls are recorded, and the caller announces the process to
    /// the collector (`lifecycle::join`).
    JustJoined,
    /// Calls are recorded: the process had joined already.
    Recording,
    /// Calls are not recorded (no collector now, recording off, or another thread is joining).
    NotRecording,
}

/// Joins the session named by the environment; `back` backs the slots of a lane this process
/// owns (see `RingView::with_backing`). Runs with the guard held. Allocates nothing and
/// registers nothing (see `RINGS`; the fork and exit handlers are registered by the
/// constructor).
#[cold]
pub(super) fn join(back: BackFn) -> Join {
    let previous = STATE.load(Ordering::Acquire);
    if !matches!(previous, UNJOINED | WAITING)
        || STATE.compare_exchange(previous, JOINING, Ordering::Acquire, Ordering::Acquire).is_err()
    {
        return if STATE.load(Ordering::Acquire) == ACTIVE { Join::Recording } else { Join::NotRecording };
    }
    let saved_errno = guard::errno();
    let outcome = try_join(previous == UNJOINED, back);
    guard::set_errno(saved_errno);
    let next = match outcome {
        Joined::Yes => ACTIVE,
        Joined::Later => {
            NEXT_ATTEMPT.store(clock::coarse_ns().saturating_add(RETRY_NS), Ordering::Relaxed);
            WAITING
        }
        Joined::Never => OFF,
    };
    STATE.store(next, Ordering::Release);
    if next == ACTIVE { Join::JustJoined } else { Join::NotRecording }
}

enum Joined {
    Yes,
    /// No collector now; a session's next collector may come.
    Later,
    /// Never (disabled, a launcher's run that is over, no epochs left).
    Never,
}

fn try_join(first: bool, back: BackFn) -> Joined {
    let uid = sys::geteuid();
    UID.store(uid, Ordering::Relaxed);
    let config = Config::from_env(uid);
    if config.disabled {
        return Joined::Never;
    }
    let not_now = if config.launcher { Joined::Never } else { Joined::Later };
    CLOCK_EVENTS.store(config.clock_events, Ordering::Relaxed);
    TIMING_MASK.store(config.clock_timing_every as u64 - 1, Ordering::Relaxed);
    super::sites::configure();
    // Said once, at the first try: a process waiting for its session's next collector is quiet.
    let say = |why: &[u8]| {
        if first && !config.quiet {
            sys::log_line(&[
                b"mlprof: no session to join at ",
                config.shm_path(),
                b" (",
                why,
                b"); running without profiling",
            ]);
        }
    };
    let Some(path) = config.shm_path_c() else { return Joined::Never };
    let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC;
    let fd = match rustix::fs::open(path, flags, rustix::fs::Mode::empty()) {
        Ok(fd) => sys::Fd::new(fd),
        Err(rustix::io::Errno::NOENT) => {
            say(b"start mlprof-collect first");
            return not_now;
        }
        Err(_) => {
            say(b"cannot open it");
            return not_now;
        }
    };
    let Ok(stat) = rustix::fs::fstat(fd.borrow()) else {
        return not_now;
    };
    if stat.st_uid != uid {
        say(b"it belongs to another user");
        return Joined::Never;
    }
    let size = stat.st_size as usize;
    if size < mlprof_format::ring::HEADER_BYTES {
        say(b"segment too small");
        return not_now;
    }
    let Some(slot) = (EPOCH.load(Ordering::Relaxed) as usize).checked_add(1) else { return Joined::Never };
    if slot > MAX_EPOCHS {
        say(b"joined too many sessions");
        return Joined::Never;
    }
    // Safety: a fresh shared mapping of the whole segment; released only by `release`.
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
            return not_now;
        }
    };
    // Safety: the mapping is at least HEADER_BYTES long and page aligned.
    let header = unsafe { &*(base as *const RingHeader) };
    let refusal = match validate_header(header, size as u64) {
        Err(why) => Some(why),
        Ok(_) if header.state.load(Ordering::Acquire) != RING_SERVING => Some("its collector has finished"),
        Ok(_) if !sys::process_exists(header.collector_pid) => Some("its collector has exited"),
        Ok(geometry) => {
            clock::set_use_tsc(header.clock_source == CLOCK_TSC);
            // Safety: the header was validated against the mapping size; the mapping stays
            // valid memory for good (see `release`).
            let view = unsafe { RingView::new(base, geometry) }.with_backing(back);
            adopt(slot, view, header);
            None
        }
    };
    match refusal {
        None => Joined::Yes,
        Some(why) => {
            // Safety: our own mapping, not published to any thread.
            let _ = unsafe { rustix::mm::munmap(base as *mut core::ffi::c_void, size) };
            say(why.as_bytes());
            not_now
        }
    }
}

/// Makes `view` (of `header`) the ring of epoch `slot`.
fn adopt(slot: usize, view: RingView, header: &RingHeader) {
    if IMAGE.load(Ordering::Relaxed) == 0 {
        IMAGE.store(draw_image_nonce(), Ordering::Relaxed);
    }
    let period = header.check_period.max(1);
    CHECK_PERIOD.store(period, Ordering::Relaxed);
    NEXT_CHECK.store(clock::now().saturating_add(period), Ordering::Relaxed);
    if let Some(entry) = RINGS.get(slot - 1) {
        let _ = entry.set(view);
    }
    GATE.store(&header.capture as *const AtomicU32 as *mut AtomicU32, Ordering::Relaxed);
    IDENTITY.store((slot as u64) << 32 | sys::getpid() as u64, Ordering::Relaxed);
    EPOCH.store(slot as u32, Ordering::Release);
}

/// A nonce that tells this process image from any other image of the same pid.
fn draw_image_nonce() -> u64 {
    let mut nonce = [0u8; 8];
    if rustix::rand::getrandom(&mut nonce, rustix::rand::GetRandomFlags::NONBLOCK).is_err() {
        // No entropy source: the time of the join and the pid still differ from image to image.
        return clock::monotonic_ns() ^ (sys::getpid() as u64) << 40 | 1;
    }
    u64::from_le_bytes(nonce) | 1
}

/// Wakes the collector if it sleeps (a thread found no free lane: the collector offers more
/// when it runs). One system call, on that rare path only.
#[cold]
pub fn wake_collector(ring: &RingView) {
    let header = ring.header();
    header.wake.fetch_add(1, Ordering::Release);
    if header.sleeping.load(Ordering::Acquire) != 0 {
        let _ = rustix::thread::futex::wake(&header.wake, rustix::thread::futex::Flags::empty(), 1);
    }
}

/// Wakes the collector, which sleeps while a lane filled to half (see `LaneWriter::push`).
#[cold]
pub fn wake_sleeping_collector(writer: &mlprof_format::ring::LaneWriter) {
    if let Some(word) = writer.wake_word() {
        let _ = rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), 1);
    }
}

/// Looks at the ring when `now` (ring clock, from a record) passes the next check time: a ring
/// its collector closed or abandoned is released. One thread at a time does it.
#[inline(always)]
pub fn check(now: u64) {
    if now >= NEXT_CHECK.load(Ordering::Relaxed) {
        check_now(now);
    }
}

#[cold]
fn check_now(now: u64) {
    let due = NEXT_CHECK.load(Ordering::Relaxed);
    let period = CHECK_PERIOD.load(Ordering::Relaxed);
    if now < due
        || NEXT_CHECK
            .compare_exchange(due, now.saturating_add(period), Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let Some(ring) = ring() else { return };
    let header = ring.header();
    let closed = header.state.load(Ordering::Acquire) == RING_CLOSED;
    // A collector that misses its heartbeat for 20 periods (~2 s) is asked about; a stopped one
    // (SIGSTOP) is still there and keeps its ring.
    let silent = now.saturating_sub(header.heartbeat.load(Ordering::Relaxed)) > period.saturating_mul(20);
    if closed || (silent && !sys::process_exists(header.collector_pid)) {
        release(ring);
    }
}

/// Lets go of `ring`: the process stops recording into it, its memory is replaced by anonymous
/// memory of the same size (so a thread still writing a record into it writes there, harmlessly,
/// and the segment's pages are no longer pinned by us), and the process waits for the session's
/// next collector (or, for a launcher's run, stays off).
#[cold]
fn release(ring: &RingView) {
    if STATE.compare_exchange(ACTIVE, JOINING, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return;
    }
    let size = ring.geometry().total_bytes() as usize;
    let base = ring.header() as *const RingHeader as *mut core::ffi::c_void;
    // Safety: replaces our own mapping of the segment in place; the address range stays valid
    // memory for every view of it (MAP_FIXED over it, private and anonymous, reserved lazily).
    let _ = unsafe {
        rustix::mm::mmap_anonymous(
            base,
            size,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::FIXED | rustix::mm::MapFlags::NORESERVE,
        )
    };
    NEXT_CHECK.store(u64::MAX, Ordering::Relaxed);
    let launcher = Config::from_env(UID.load(Ordering::Relaxed)).launcher;
    NEXT_ATTEMPT.store(clock::coarse_ns(), Ordering::Relaxed);
    STATE.store(if launcher { OFF } else { WAITING }, Ordering::Release);
}

/// Joins `ring` directly, as a process whose environment named it would (unit tests, with a
/// ring in ordinary memory).
#[cfg(test)]
pub(crate) fn join_for_test(ring: RingView) {
    if STATE.compare_exchange(UNJOINED, JOINING, Ordering::Acquire, Ordering::Acquire).is_ok() {
        // Safety: the header lives in the test's leaked memory, as long as the view.
        let header = unsafe { &*(ring.header() as *const RingHeader) };
        adopt(1, ring, header);
        STATE.store(ACTIVE, Ordering::Release);
    }
}
