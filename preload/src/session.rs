//! Joining the collector's session (once per process, lazily), process identity across fork and
//! exec, and the begin/finish helpers every hook uses.

use core::ffi::{CStr, c_void};
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use mlprof_format::func::Func;
use mlprof_format::record::{
    Event, FLAG_ERROR, FLAG_NESTED, GpuCall, KIND_PROCESS_EXIT, KIND_PROCESS_START, PROC_FORKED,
};
use mlprof_format::ring::{AggSlot, CLOCK_TSC, RING_SERVING, RingHeader, validate_header};

use crate::clock;
use crate::config::Config;
use crate::guard::{self, THREAD, ThreadState};
use mlprof_format::ring::RingView;

use crate::lane;
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

pub fn uid() -> u32 {
    UID.load(Ordering::Relaxed)
}
static CLOCK_EVENTS: AtomicBool = AtomicBool::new(false);
/// Clock reads whose count has these bits clear are timed (every 64th by default).
static TIMING_MASK: AtomicU64 = AtomicU64::new(63);
/// pthread key whose destructor retires the thread's lane; u32::MAX = none.
static LANE_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

pub fn init_from_constructor() {
    guard::with_guard(|state| {
        state.internal(|| {
            if join() {
                crate::itt_stamp::init();
            }
        })
    });
}

/// Whether calls are being recorded; joins on first use.
#[inline(always)]
fn is_active() -> bool {
    match STATE.load(Ordering::Acquire) {
        ACTIVE => true,
        UNJOINED => join(),
        _ => false,
    }
}

pub fn clock_events() -> bool {
    CLOCK_EVENTS.load(Ordering::Relaxed)
}

/// Joins the session named by the environment. Runs with the reentrancy guard held.
#[cold]
fn join() -> bool {
    if STATE.compare_exchange(UNJOINED, JOINING, Ordering::Acquire, Ordering::Acquire).is_err() {
        return STATE.load(Ordering::Acquire) == ACTIVE;
    }
    let saved_errno = guard::errno();
    let joined = try_join();
    guard::set_errno(saved_errno);
    STATE.store(if joined { ACTIVE } else { OFF }, Ordering::Release);
    if joined {
        send_process_start(0, false);
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
    let name_len = config.shm_name().len();
    name[..name_len].copy_from_slice(config.shm_name());
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
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => {
            say(b"start mlprof-collect first");
            return false;
        }
        Err(_) => {
            say(b"cannot open it");
            return false;
        }
    };
    let Ok(stat) = rustix::fs::fstat(&fd) else {
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
            &fd,
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
    // Safety: the header was validated against the mapping size.
    let _ = RING.set(unsafe { RingView::new(base, geometry) });
    PID.store(sys::getpid(), Ordering::Relaxed);
    register_process_hooks();
    true
}

fn register_process_hooks() {
    let mut key: libc::pthread_key_t = 0;
    // Safety: plain libc calls with valid arguments; done once per process image (atfork
    // handlers and keys are inherited by fork children).
    unsafe {
        if libc::pthread_key_create(&mut key, Some(retire_lane_at_thread_exit)) == 0 {
            LANE_KEY.store(key, Ordering::Relaxed);
        }
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
    }
}

/// Registers the pthread-key destructor that retires a lane when its thread exits.
pub fn remember_lane_for_thread_exit(index: u32) {
    let key = LANE_KEY.load(Ordering::Relaxed);
    if key != u32::MAX {
        // Safety: the key was created by `register_process_hooks`; the value is an integer.
        unsafe { libc::pthread_setspecific(key, (index as usize + 1) as *const c_void) };
    }
}

extern "C" fn retire_lane_at_thread_exit(value: *mut c_void) {
    let Some(ring) = RING.get() else { return };
    let _ = THREAD.try_with(|thread| {
        let index = (value as usize).wrapping_sub(1) as u32;
        ring.retire(index, PID.load(Ordering::Relaxed), thread.tid.get());
        if thread.lane.get() == index + 1 {
            thread.lane.set(0);
            thread.lane_pid.set(0);
        }
    });
}

extern "C" fn after_fork_in_child() {
    if STATE.load(Ordering::Acquire) != ACTIVE {
        return;
    }
    let parent = PID.swap(sys::getpid(), Ordering::Relaxed);
    guard::with_guard(|_| send_process_start(parent, true));
}

/// Called by the `_Fork` hook in its child (no atfork handlers run there).
pub fn after_raw_fork_in_child() {
    after_fork_in_child();
}

/// Announces this process image (command line, parent) to the collector.
fn send_process_start(parent: u32, forked: bool) {
    let Some(ring) = RING.get() else { return };
    let pid = PID.load(Ordering::Relaxed);
    let ppid = if forked { parent } else { sys::getppid() };
    let _ = THREAD.try_with(|thread| {
        let Some(lane) = lane::lane_of(ring, thread, pid) else {
            return;
        };
        let mut cmdline = [0u8; mlprof_format::record::MAX_STRING_BYTES];
        let len = sys::read_small_file("/proc/self/cmdline", &mut cmdline);
        let cmdline = &cmdline[..len];
        let id = mlprof_format::string_id(cmdline);
        if !lane::send_string(ring, lane, pid, thread.tid.get(), id, cmdline) {
            return;
        }
        ring.push(
            lane,
            &Event {
                kind: KIND_PROCESS_START,
                pid,
                tid: thread.tid.get(),
                start: clock::now(),
                arg: ppid as u64,
                arg2: id,
                extra: if forked { PROC_FORKED } else { 0 },
                ..Event::default()
            },
        );
    });
}

/// Records the exit status a process passes to exit/_exit.
pub fn record_process_exit(status: i32) {
    if !is_active_quick() {
        return;
    }
    let Some(ring) = RING.get() else { return };
    let pid = PID.load(Ordering::Relaxed);
    let _ = guard::with_guard(|thread| {
        if thread.vfork_pending.get() && sys::getpid() != pid {
            return;
        }
        if let Some(lane) = lane::lane_of(ring, thread, pid) {
            ring.push(
                lane,
                &Event {
                    kind: KIND_PROCESS_EXIT,
                    pid,
                    tid: thread.tid.get(),
                    start: clock::now(),
                    ret: status as i64,
                    ..Event::default()
                },
            );
        }
    });
}

fn is_active_quick() -> bool {
    STATE.load(Ordering::Acquire) == ACTIVE
}

/// The calling thread's state when its call is to be recorded; `None` when it must pass
/// through: our own calls (reentrancy; a signal handler's is counted), no session, or a vfork
/// child running on its parent's memory.
#[inline(always)]
fn recording_thread() -> Option<*const ThreadState> {
    let thread = THREAD.try_with(|t| t as *const ThreadState).ok()?;
    // Safety: the thread-local outlives this call on this thread.
    let state = unsafe { &*thread };
    if state.in_hook.get() {
        state.reentered();
        return None;
    }
    if STATE.load(Ordering::Acquire) != ACTIVE && !state.internal(is_active) {
        return None;
    }
    if state.vfork_pending.get() && !vfork_parent_resumed(state) {
        return None;
    }
    Some(thread)
}

/// An intercepted call in progress.
pub struct Span {
    thread: *const ThreadState,
    start: u64,
    /// An ITT task was opened for this call (see `itt_stamp`).
    stamped: bool,
}

impl Span {
    /// Starts timing a call, or `None` when it must pass through unrecorded: our own calls
    /// (reentrancy), no session, or a vfork child running on its parent's memory.
    #[inline(always)]
    pub fn begin(func: Func) -> Option<Span> {
        let thread = recording_thread()?;
        // Safety: the thread-local outlives this call on this thread.
        let state = unsafe { &*thread };
        // Our ITT calls (and whatever a chained collector does in them) are not recorded.
        let stamped = crate::itt_stamp::enabled() && state.internal(|| crate::itt_stamp::begin(func));
        Some(Span { thread, start: clock::now(), stamped })
    }

    /// Ends the call and writes its record. `event` carries the function's own fields; pid, tid,
    /// times, errno and flags are filled in here. Must run right after the real call so errno is
    /// still the call's.
    #[inline(always)]
    pub fn finish(self, mut event: Event, func: Func, failed: bool) {
        let end = clock::now();
        let errno = if failed { guard::errno() } else { 0 };
        event.errno = errno;
        self.write(end, event, func, failed);
        if failed {
            guard::set_errno(errno);
        }
    }

    /// The calling thread's state.
    pub fn thread(&self) -> &ThreadState {
        // Safety: see `begin`.
        unsafe { &*self.thread }
    }

    /// Ends a GPU API call (CUDA runtime/driver, NCCL) and writes its record; errno is not
    /// touched (these APIs report through their return value).
    #[inline(always)]
    pub fn finish_gpu(self, mut call: GpuCall, func: Func, failed: bool) {
        let end = clock::now();
        let state = self.thread();
        if call.device == 0 {
            call.device = state.device.get();
        }
        if state.gpu_depth.get() > 0 {
            call.flags |= FLAG_NESTED;
        }
        self.write(end, call.into_event(), func, failed);
    }

    /// What every finish shares: closes the ITT stamp, fills in identity, times and the error
    /// flag, pushes the record, and adds the calls a signal handler made meanwhile to the lane's
    /// drops (see `ThreadState::reentered`).
    #[inline(always)]
    fn write(self, end: u64, mut event: Event, func: Func, failed: bool) {
        // Safety: see `begin`.
        let state = unsafe { &*self.thread };
        if self.stamped {
            state.internal(crate::itt_stamp::end);
        }
        let Some(ring) = RING.get() else { return };
        let pid = PID.load(Ordering::Relaxed);
        state.in_hook.set(true);
        if let Some(lane) = lane::lane_of(ring, state, pid) {
            event.kind = func as u16;
            event.pid = pid;
            event.tid = state.tid.get();
            event.start = self.start;
            event.dur = end.wrapping_sub(self.start);
            if failed {
                event.flags |= FLAG_ERROR;
            }
            ring.push(lane, &event);
            let nested = state.take_nested();
            if nested != 0 {
                ring.count_drops(lane, nested as u64);
            }
        }
        state.in_hook.set(false);
    }

    /// Names GPU function `handle` for the collector, once per handle per process: `resolve`
    /// writes the name into the buffer and returns its length (0 = unknown). Runs with the
    /// guard held, so CUDA calls made by `resolve` are not recorded.
    pub fn define_symbol(&self, handle: u64, resolve: impl FnOnce(&mut [u8]) -> usize) {
        if handle == 0 || crate::strings::symbol_was_defined(handle) {
            return;
        }
        // Safety: see `begin`.
        let state = unsafe { &*self.thread };
        let Some(ring) = RING.get() else { return };
        let pid = PID.load(Ordering::Relaxed);
        let mut name = [0u8; 1024];
        let len = state.internal(|| resolve(&mut name)).min(name.len());
        state.in_hook.set(true);
        if len > 0
            && let Some(lane) = lane::lane_of(ring, state, pid)
        {
            let id = mlprof_format::string_id(&name[..len]);
            if lane::send_string(ring, lane, pid, state.tid.get(), id, &name[..len]) {
                let definition = Event {
                    kind: mlprof_format::record::KIND_SYMBOL_DEF,
                    pid,
                    tid: state.tid.get(),
                    arg: handle,
                    arg2: id,
                    ..Event::default()
                };
                if ring.push(lane, &definition) {
                    crate::strings::mark_symbol_defined(handle);
                }
            }
        }
        state.in_hook.set(false);
    }

    /// Like `finish`, for calls that name a path: the path is sent once, then referenced by id.
    pub fn finish_with_path(self, mut event: Event, func: Func, failed: bool, path: *const libc::c_char) {
        if !path.is_null() {
            let errno = guard::errno();
            // Safety: the application passed a NUL-terminated path to a libc function that reads
            // it the same way.
            let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
            let id =
                mlprof_format::string_id(&bytes[..bytes.len().min(mlprof_format::record::MAX_STRING_BYTES)]);
            // Safety: see `begin`.
            let state = unsafe { &*self.thread };
            let pid = PID.load(Ordering::Relaxed);
            if let Some(ring) = RING.get() {
                state.in_hook.set(true);
                let sent = lane::lane_of(ring, state, pid)
                    .map(|lane| (lane, lane::send_string(ring, lane, pid, state.tid.get(), id, bytes)));
                state.in_hook.set(false);
                if let Some((lane, false)) = sent {
                    ring.count_drop(lane);
                    guard::set_errno(errno);
                    return;
                }
            }
            event.arg2 = id;
            guard::set_errno(errno);
        }
        self.finish(event, func, failed);
    }
}

/// An aggregated call (a clock read) in progress. The call is counted exactly; its duration is
/// measured on one call in `MLPROF_CLOCK_TIMING` (64 by default), because two timestamps cost
/// more than the ~20 ns vDSO call they would measure. Reports scale the measured time to the
/// exact count and say how many calls were timed.
pub struct AggregateCall {
    counters: *const AggSlot,
    start: u64,
}

impl AggregateCall {
    #[inline(always)]
    pub fn begin(slot: usize) -> Option<AggregateCall> {
        let thread = recording_thread()?;
        // Safety: the thread-local outlives this call on this thread.
        let state = unsafe { &*thread };
        let ring = RING.get()?;
        state.in_hook.set(true);
        let lane = lane::lane_of(ring, state, PID.load(Ordering::Relaxed));
        state.in_hook.set(false);
        let counters = ring.aggregate_slot(lane?, slot)?;
        let count = counters.count_call();
        let start = if count & TIMING_MASK.load(Ordering::Relaxed) == 0 { clock::now() } else { 0 };
        Some(AggregateCall { counters, start })
    }

    #[inline(always)]
    pub fn finish(self) {
        if self.start != 0 {
            let ticks = clock::now().wrapping_sub(self.start);
            // Safety: the counters live in the ring mapping, which is never unmapped.
            unsafe { &*self.counters }.add_timing(ticks);
        }
    }
}

/// After this thread called vfork: in the child (another pid, same memory) pass through; back in
/// the parent, clear the mark. Costs one getpid, only after a vfork.
#[cold]
fn vfork_parent_resumed(state: &ThreadState) -> bool {
    if sys::getpid() == PID.load(Ordering::Relaxed) {
        state.vfork_pending.set(false);
        true
    } else {
        false
    }
}

/// Marks the calling thread as having called vfork (see `exports::vfork`).
pub fn note_vfork() {
    let _ = THREAD.try_with(|state| state.vfork_pending.set(true));
}

/// Remembers the CUDA device this thread selected (recorded on its later GPU calls).
pub fn set_thread_device(device: i32) {
    let _ = THREAD.try_with(|state| state.device.set(device));
}

/// Runs `f` with this thread's lane, outside the hot path (ITT annotations, which carry their
/// own timing): `f` gets the ring, the lane, the pid and the thread state, with the guard held.
/// Returns false when nothing can be recorded (no session, our own call, a vfork child).
pub fn with_lane(f: impl FnOnce(&RingView, u32, u32, &ThreadState)) -> bool {
    let Ok(thread) = THREAD.try_with(|t| t as *const ThreadState) else { return false };
    // Safety: the thread-local outlives this call on this thread.
    let state = unsafe { &*thread };
    if state.in_hook.get() {
        state.reentered();
        return false;
    }
    state.in_hook.set(true);
    let recorded = (|| {
        if !is_active() {
            return false;
        }
        if state.vfork_pending.get() && !vfork_parent_resumed(state) {
            return false;
        }
        let Some(ring) = RING.get() else { return false };
        let pid = PID.load(Ordering::Relaxed);
        let Some(lane) = lane::lane_of(ring, state, pid) else { return false };
        f(ring, lane, pid, state);
        true
    })();
    state.in_hook.set(false);
    recorded
}
