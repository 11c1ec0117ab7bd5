//! The recorder: what a hook calls to record one intercepted call into this thread's lane of
//! the collector's ring.
//!
//! * [`session`]: joining and releasing the collector's ring (once per process, lazily), epochs;
//! * [`strings`]: the per-process sets of strings and symbols already sent;
//! * [`lane`]: this thread's lane (claimed on first use, backed as it grows, retired at thread
//!   exit) and strings sent once per process;
//! * [`lifecycle`]: joining and announcing the process, fork, exit, vfork;
//! * [`stamp`]: where ITT stamping is plugged in;
//! * [`capture`]: capture ranges' triggers flipping the ring's gate (over `session` and the
//!   lane API of this file).
//!
//! Each imports only those listed above it: `session` nothing of the recorder (the lane backer
//! is an argument of its `join`, and announcing the process is left to the caller,
//! `lifecycle::join`); `strings` imports `session`; `lane` imports `session` and `strings`;
//! `lifecycle` imports `lane` and `session`, and only this file imports `lifecycle`; `stamp`
//! imports none. So a join reads downwards: `lifecycle::join`, then `session::join`.
//!
//! A hook does `Span::begin(func)` (or `None`: pass straight through), calls the real function,
//! and finishes the span with the record's fields.

pub mod capture;
pub mod lane;
pub mod lifecycle;
pub mod session;
pub mod sites;
pub mod stamp;
pub mod strings;

use mlprof_format::func::Func;
use mlprof_format::record::{Event, FLAG_CORRELATED, FLAG_ERROR, FLAG_NESTED, GpuCall};
use mlprof_format::ring::{AggSlot, LaneWriter, Pushed, RingView};

use crate::clock;
use crate::guard::{self, ThreadRef, ThreadState};
use crate::user_memory;

pub use lifecycle::{
    after_raw_fork_in_child, note_vfork, record_process_exit, set_before_exit, set_thread_device,
};
pub use session::clock_events;

/// From the library's constructor: registers the fork and exit handlers (here, where no
/// preloaded malloc can be in the middle of its own work, since registering may allocate) and
/// joins early (hooks also join lazily, since other libraries' constructors can call them
/// first). Returns whether the process records.
pub fn init_from_constructor() -> bool {
    let Some(state) = guard::current() else { return false };
    if state.in_hook.get() {
        return false;
    }
    state.foreign(lifecycle::register_process_hooks);
    session::is_active_quick() || (session::may_join() && state.foreign(lifecycle::join))
}

/// Whether this process records, joining its session on first use, or again once its
/// collector went away and a retry is due (with the guard held: see `lifecycle::join`).
#[inline(always)]
fn records(state: &ThreadRef) -> bool {
    session::is_active_quick() || (session::may_join() && join_now(state))
}

/// Joins from a hook, with the guard held. Joining calls no hooked function (raw system
/// calls only, no allocation), so a call arriving meanwhile is a signal handler's, and counts.
#[cold]
fn join_now(state: &ThreadRef) -> bool {
    state.in_hook.set(true);
    let joined = lifecycle::join();
    state.in_hook.set(false);
    joined
}

/// The calling thread when its call is to be recorded; `None` when it must pass through: our
/// own calls (reentrancy; a signal handler's is counted), no session, or a vfork child running
/// on its parent's memory.
///
/// The capture gate is tested first: outside a capture range a hook passes straight through
/// (two dependent loads and a branch: no lane, no clock, no count). Then the process-wide
/// state: a process that does not record never touches its thread's state.
#[inline(always)]
fn recording_thread() -> Option<ThreadRef> {
    if !session::capturing() {
        return None;
    }
    if !session::is_active_quick() {
        return thread_that_may_join();
    }
    recording_now(guard::current()?)
}

/// `state` when its thread's call is to be recorded in a process that records: not our own
/// call (a signal handler's is counted), not a vfork child running on its parent's memory.
#[inline(always)]
fn recording_now(state: ThreadRef) -> Option<ThreadRef> {
    if state.in_hook.get() {
        state.reentered();
        return None;
    }
    if state.vfork_pending.get() && !lifecycle::vfork_parent_resumed(&state) {
        return None;
    }
    Some(state)
}

/// Not recording: join now if the process never tried, or if it waits for its session's next
/// collector and a retry is due.
#[cold]
fn thread_that_may_join() -> Option<ThreadRef> {
    if !session::may_join() {
        return None;
    }
    let state = guard::current()?;
    // A process that just joined a paused ring passes through like the others.
    if state.in_hook.get() || !join_now(&state) || !session::capturing() {
        return None;
    }
    if state.vfork_pending.get() && !lifecycle::vfork_parent_resumed(&state) {
        return None;
    }
    Some(state)
}

/// This thread's lane in the current ring (`ring`, index, writer), claiming one if needed;
/// `None` (the record counted as dropped) when none can be had.
#[inline(always)]
fn thread_lane(state: &ThreadRef) -> Option<(&'static RingView, u32, LaneWriter)> {
    let ring = session::ring()?;
    let owner = session::identity();
    let lane = state.lane.get();
    if lane != 0 && state.lane_owner.get() == owner {
        return Some((ring, lane - 1, state.lane_writer.get()));
    }
    state.in_hook.set(true);
    let claimed = lane::lane_of(ring, state, owner);
    state.in_hook.set(false);
    Some((ring, claimed?, state.lane_writer.get()))
}

/// The site number of a call about to be made on `thread` (see [`sites`]), with the guard
/// held (what may touch errno keeps it: the call has not run yet).
#[inline(never)]
fn site_of(thread: &ThreadState, ring: &'static RingView, lane: u32) -> u32 {
    thread.in_hook.set(true);
    let site = sites::current(ring, lane, thread);
    thread.in_hook.set(false);
    site
}

/// `--sites`: the record carries the site's number (0: none) in its pid slot, flagged; the
/// collector puts the lane owner's pid back.
#[inline(always)]
fn carry_site(event: &mut Event, site: u32) {
    if site != 0 {
        event.pid = site;
        event.flags |= mlprof_format::site::FLAG_SITE;
    }
}

/// An intercepted call in progress.
pub struct Span {
    thread: ThreadRef,
    ring: &'static RingView,
    /// The thread's lane (claimed before the call, so that a call the thread is cancelled in
    /// is counted at its exit).
    lane: u32,
    writer: LaneWriter,
    start: u64,
    /// An ITT task was opened for this call (see [`stamp`]).
    stamped: bool,
    /// The call's site number (`--sites`; 0: none).
    site: u32,
}

impl Span {
    /// Starts timing a call, or `None` when it must pass through unrecorded: our own calls
    /// (reentrancy), no session, a vfork child running on its parent's memory, or a thread
    /// that found no lane (its record is counted as dropped).
    #[inline(always)]
    pub fn begin(func: Func) -> Option<Span> {
        let thread = recording_thread()?;
        let (ring, lane, writer) = thread_lane(&thread)?;
        // Our ITT calls (and whatever a chained collector does in them) are not recorded.
        let stamped = stamp::enabled() && thread.internal(|| guard::keeping_errno(|| stamp::begin(func)));
        // `--sites`: the Python line, read before the real call, while everything the frames
        // point to is still there (a call can free the frame it is made from: CPython unmaps a
        // data-stack chunk while its last frame is still the thread's current one).
        let site = if sites::enabled() { site_of(&thread, ring, lane) } else { 0 };
        thread.in_flight.set(true);
        Some(Span { thread, ring, lane, writer, start: clock::now(), stamped, site })
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

    /// Ends a call that reports failure by returning an error number and leaves errno alone
    /// (`posix_fallocate`, `posix_fadvise`): the record's errno is `error`, and the thread's
    /// errno stays what the caller had.
    #[inline(always)]
    pub fn finish_with_error(self, mut event: Event, func: Func, error: i32) {
        let end = clock::now();
        event.errno = error;
        if error == 0 {
            self.write(end, event, func, false);
        } else {
            let kept = guard::errno();
            self.write(end, event, func, true);
            guard::set_errno(kept);
        }
    }

    /// Starts timing a system call trapped in complete mode (from the SIGSYS handler), or
    /// `None` when it is not to be recorded: no session (a signal handler does not join), or
    /// the call is our own (the guard is held: a system call made by our bookkeeping, or by
    /// libc on our behalf). No ITT
    /// stamp: a trapped call is below the libc call that may be stamped already.
    #[inline(always)]
    pub fn begin_trapped() -> Option<Span> {
        if !session::capturing() || !session::is_active_quick() {
            return None;
        }
        let thread = guard::current()?;
        if thread.in_hook.get() {
            return None;
        }
        // `vfork_pending` is left alone: a vfork child never traps (the stub does not turn
        // trapping on in it), so this is the parent, and the call may be the vfork itself,
        // after which the mark must still be there for the child's hooked calls.
        let (ring, lane, writer) = thread_lane(&thread)?;
        Some(Span { thread, ring, lane, writer, start: clock::now(), stamped: false, site: 0 })
    }

    /// Ends a trapped system call: `number` (kept in `extra`), its first two arguments (`fd`
    /// and `arg`), and the kernel's return value (`-errno` on failure, which sets the error
    /// flag and `errno`). `at_once`: a call the handler does not make itself (it returns twice,
    /// or never), recorded with no duration when it is made.
    #[inline(always)]
    pub fn finish_trapped(self, number: u32, args: [u64; 2], ret: i64, at_once: bool) {
        let end = if at_once { self.start } else { clock::now() };
        let failed = (-4095..0).contains(&ret);
        let event = Event {
            fd: args[0] as i32,
            arg: args[1],
            ret,
            errno: if failed { -ret as i32 } else { 0 },
            extra: number,
            ..Event::default()
        };
        self.write(end, event, Func::TrappedSyscall, failed);
    }

    /// The calling thread's state.
    pub fn thread(&self) -> &ThreadState {
        &self.thread
    }

    /// Ends a GPU API call (CUDA runtime/driver, NCCL) that ended at `end` (a [`clock::now`]
    /// taken right after the real call, so that work done since, such as naming a kernel, is
    /// not its time) and writes its record; errno is not touched (these APIs report through
    /// their return value). `correlation`: the call's CUPTI correlation id (0: unknown), which
    /// the ring record carries in its `tid` (flagged [`FLAG_CORRELATED`]) for the collector to
    /// turn into a link to the GPU work.
    #[inline(always)]
    pub fn finish_gpu(self, end: u64, mut call: GpuCall, func: Func, failed: bool, correlation: u32) {
        if call.device == 0 {
            call.device = self.thread.device.get();
        }
        if self.thread.gpu_depth.get() > 0 {
            call.flags |= FLAG_NESTED;
        }
        if correlation != 0 {
            call.flags |= FLAG_CORRELATED;
            self.write_as(end, call.into_event(), func, failed, Some(correlation));
        } else {
            self.write(end, call.into_event(), func, failed);
        }
    }

    /// What every finish shares: closes the ITT stamp, fills in identity, times and the error
    /// flag, pushes the record, and adds the calls a signal handler made meanwhile to the lane's
    /// drops (see `ThreadState::reentered`).
    #[inline(always)]
    fn write(self, end: u64, event: Event, func: Func, failed: bool) {
        self.write_as(end, event, func, failed, None);
    }

    /// [`Span::write`], with `tid` in the ring record's tid instead of the thread's (a GPU
    /// call's correlation id; `None` at every other caller, folded away).
    #[inline(always)]
    fn write_as(self, end: u64, mut event: Event, func: Func, failed: bool, tid: Option<u32>) {
        let state = self.thread;
        // A hooked call marked itself in flight in `begin` and clears the mark; a trapped
        // system call's span did not mark (it lies inside the libc call that did) and leaves
        // the mark alone. `func` is a constant at every caller, so this test is folded away.
        if func != Func::TrappedSyscall {
            state.in_flight.set(false);
        }
        if self.stamped {
            state.internal(|| guard::keeping_errno(stamp::end));
        }
        state.in_hook.set(true);
        event.kind = func as u16;
        event.pid = session::pid();
        event.tid = tid.unwrap_or_else(|| state.tid.get());
        // A trapped system call has no site: its handler may have interrupted the interpreter
        // mid-update.
        carry_site(&mut event, self.site);
        event.start = self.start;
        event.dur = end.wrapping_sub(self.start);
        if failed {
            event.flags |= FLAG_ERROR;
        }
        push_record(&state, self.ring, self.lane, &self.writer, &event);
        // With the guard held: in complete mode a system call made here is ours, not the
        // application's.
        session::check(end);
        state.in_hook.set(false);
    }

    /// Names GPU function `handle` for the collector, once per handle per process: `resolve`
    /// writes the name into the buffer and returns its length (0 = unknown). Runs with the
    /// guard held, so CUDA calls made by `resolve` are not recorded.
    pub fn define_symbol(&self, handle: u64, resolve: impl FnOnce(&mut [u8]) -> usize) {
        if handle == 0 || strings::symbol_was_defined(handle) {
            return;
        }
        let (state, ring, lane) = (self.thread, self.ring, self.lane);
        let pid = session::pid();
        let mut name = [0u8; 1024];
        let len = state.foreign(|| guard::keeping_errno(|| resolve(&mut name))).min(name.len());
        let name = name.get(..len).unwrap_or_default();
        state.in_hook.set(true);
        if name.is_empty() {
            // No name to be had (the driver refuses the handle): asking again at every launch
            // would cost a driver call each time for nothing. The tools show its address.
            strings::mark_symbol_defined(handle);
        } else {
            let id = mlprof_format::string_id(name);
            if lane::send_string(ring, lane, pid, state.tid.get(), id, name) {
                let definition = Event {
                    kind: mlprof_format::record::KIND_SYMBOL_DEF,
                    pid,
                    tid: state.tid.get(),
                    arg: handle,
                    arg2: id,
                    ..Event::default()
                };
                if ring.push(lane, &definition) {
                    strings::mark_symbol_defined(handle);
                }
            }
        }
        state.in_hook.set(false);
    }

    /// Like `finish`, for calls that name a path: the path is sent once, then referenced by id.
    /// A path that cannot be read (the call failed with `EFAULT`, say) is left out, never
    /// faulted on: see [`crate::user_memory`].
    ///
    /// # Safety
    /// `path` is what the application passed to the real call (any value, even invalid).
    pub unsafe fn finish_with_path(
        self,
        mut event: Event,
        func: Func,
        failed: bool,
        path: *const libc::c_char,
    ) {
        let end = clock::now();
        let errno = if failed { guard::errno() } else { 0 };
        if !path.is_null() {
            let state = self.thread;
            state.in_hook.set(true);
            let sent = if !failed || user_memory::errno_proves_path_read(errno) {
                // Safety: the real call read the path (see `errno_proves_path_read`).
                unsafe { user_memory::c_string_in_place(path) }.and_then(|bytes| self.send_string(bytes))
            } else {
                self.send_unproven_path(path)
            };
            state.in_hook.set(false);
            match sent {
                Some(Sent::Id(id)) => event.arg2 = id,
                Some(Sent::NoRoom) => {
                    // No room in the lane for the path: the call is dropped (and counted).
                    state.in_flight.set(false);
                    self.ring.count_drop(self.lane);
                    guard::set_errno(errno);
                    return;
                }
                // An unreadable path: the record goes without it.
                None => {}
            }
        }
        event.errno = errno;
        self.write(end, event, func, failed);
        if failed {
            guard::set_errno(errno);
        }
    }

    /// Sends string `bytes` on the span's lane unless this process did already.
    fn send_string(&self, bytes: &[u8]) -> Option<Sent> {
        let id = mlprof_format::string_id(bytes);
        let sent = lane::send_string(self.ring, self.lane, session::pid(), self.thread.tid.get(), id, bytes);
        Some(if sent { Sent::Id(id) } else { Sent::NoRoom })
    }

    /// A path the real call did not prove readable: copied with a read that cannot fault, on a
    /// stack buffer that only this rare path pays for. `None` when unreadable.
    #[cold]
    #[inline(never)]
    fn send_unproven_path(&self, path: *const libc::c_char) -> Option<Sent> {
        let mut copy = [0u8; user_memory::PATH_BYTES];
        user_memory::c_string_copy(path, &mut copy).and_then(|bytes| self.send_string(bytes))
    }
}

/// What became of a string a record needs.
enum Sent {
    /// Sent (now or before): the record refers to it by this id.
    Id(u64),
    /// The lane had no room for it.
    NoRoom,
}

/// An aggregated call (a clock read) in progress. The call is counted exactly; its duration is
/// measured on one call in `MLPROF_CLOCK_TIMING` (64 by default), because two timestamps cost
/// more than the ~20 ns vDSO call they would measure. Reports scale the measured time to the
/// exact count and say how many calls were timed.
pub struct AggregateCall {
    counters: &'static AggSlot,
    start: u64,
}

impl AggregateCall {
    /// Counts a call in this thread's aggregate `slot`; `None` when it passes through.
    #[inline(always)]
    pub fn begin(slot: usize) -> Option<AggregateCall> {
        if !session::capturing() {
            return None;
        }
        let state = if session::is_active_quick() {
            let state = guard::current()?;
            if state.in_hook.get() {
                count_reentered_clock_read(&state, slot);
                return None;
            }
            if state.vfork_pending.get() && !lifecycle::vfork_parent_resumed(&state) {
                return None;
            }
            state
        } else {
            thread_that_may_join()?
        };
        let (ring, lane, writer) = thread_lane(&state)?;
        let nested = state.take_nested();
        if nested != 0 {
            ring.count_interrupted(lane, nested as u64);
        }
        let counters = writer.lane()?.aggregates.get(slot)?;
        let count = counters.count_call();
        let start = if count & session::timing_mask() == 0 { clock::now() } else { 0 };
        Some(AggregateCall { counters, start })
    }

    /// Adds the call's duration when it was one of the timed ones.
    #[inline(always)]
    pub fn finish(self) {
        if self.start != 0 {
            let end = clock::now();
            self.counters.add_timing(end.wrapping_sub(self.start));
            session::check(end);
        }
    }
}

/// A clock read that arrived while this thread held the guard: a signal handler's (our own
/// code reads the clock without the hook). Counted in the thread's aggregate all the same when
/// the thread has a lane: the counters are added to by single instructions, so the handler's
/// count cannot tear the interrupted one; without a lane it counts as interrupted.
#[cold]
fn count_reentered_clock_read(state: &ThreadRef, slot: usize) {
    if state.internal.get() {
        return;
    }
    let lane = state.lane.get();
    match session::ring().filter(|_| lane != 0 && state.lane_owner.get() == session::identity()) {
        Some(ring) => {
            if let Some(counters) = ring.aggregate_slot(lane - 1, slot) {
                counters.count_call();
            }
        }
        None => state.reentered(),
    }
}

/// Writes one record that carries its own timing (an ITT task or frame, at its end), made by
/// `make(pid, tid)`, the way a hooked call's record is written: through the lane's cached
/// writer, waking a sleeping collector at the lane's watermark. False when nothing can be
/// recorded (no session, our own call, a vfork child, no lane) or the lane was full (counted).
/// `state` is the calling thread's (`guard::current()`, which the caller had at hand).
#[inline(always)]
pub fn push_timed(state: ThreadRef, make: impl FnOnce(u32, u32) -> Event) -> bool {
    let recording = if session::is_active_quick() { recording_now(state) } else { thread_that_may_join() };
    let Some(state) = recording else { return false };
    let Some((ring, lane, writer)) = thread_lane(&state) else { return false };
    // `--sites`: an op's span ends in the C++ code its Python line called (the line that made
    // the op).
    let site = if sites::enabled() { site_of(&state, ring, lane) } else { 0 };
    state.in_hook.set(true);
    let mut event = make(session::pid(), state.tid.get());
    carry_site(&mut event, site);
    let pushed = push_record(&state, ring, lane, &writer, &event);
    state.in_hook.set(false);
    pushed != Pushed::Dropped
}

/// What writing a record takes, with the guard held: the push through the lane's writer (a
/// full lane drops and counts), waking a sleeping collector at the lane's watermark, and adding
/// the calls a signal handler made meanwhile to the lane's drops (see `ThreadState::reentered`).
#[inline(always)]
fn push_record(
    state: &ThreadState,
    ring: &RingView,
    lane: u32,
    writer: &LaneWriter,
    event: &Event,
) -> Pushed {
    let pushed = writer.push(event);
    if pushed == Pushed::WrittenWakeCollector {
        session::wake_sleeping_collector(writer);
    }
    let nested = state.take_nested();
    if nested != 0 {
        ring.count_interrupted(lane, nested as u64);
    }
    pushed
}

/// Runs `f` with this thread's lane, outside the hot path (ITT annotations, which carry their
/// own timing): `f` gets the ring, the lane, the pid and the thread state, with the guard held.
/// Returns false when nothing can be recorded (no session, our own call, a vfork child).
pub fn with_lane(f: impl FnOnce(&RingView, u32, u32, &ThreadState)) -> bool {
    let Some(state) = guard::current() else { return false };
    if state.in_hook.get() {
        state.reentered();
        return false;
    }
    records(&state) && on_lane(&state, f)
}

/// Runs `f` with this thread's lane for records that are not calls (GPU activities, written
/// by CUPTI's buffer callback): like [`with_lane`], except that a guard our own code holds
/// (marked internal: the library flushing CUPTI at exit, or starting it) is no reason to
/// refuse, since CUPTI calls the callback from inside such a flush. Never joins a session.
pub fn with_lane_for_activity(f: impl FnOnce(&RingView, u32, u32, &ThreadState)) -> bool {
    let Some(state) = guard::current() else { return false };
    if state.in_hook.get() && !state.internal.get() {
        state.reentered();
        return false;
    }
    session::is_active_quick() && on_lane(&state, f)
}

/// What [`with_lane`] and [`with_lane_for_activity`] share, in a process that records: `f` on
/// this thread's lane (claimed if needed) with the guard held, then the guard as it was; false
/// for a vfork child or when no lane can be had.
fn on_lane(state: &ThreadState, f: impl FnOnce(&RingView, u32, u32, &ThreadState)) -> bool {
    let held = state.in_hook.replace(true);
    let recorded = (|| {
        if state.vfork_pending.get() && !lifecycle::vfork_parent_resumed(state) {
            return false;
        }
        let Some(ring) = session::ring() else { return false };
        let Some(lane) = lane::lane_of(ring, state, session::identity()) else { return false };
        f(ring, lane, session::pid(), state);
        true
    })();
    state.in_hook.set(held);
    recorded
}

#[cfg(test)]
mod tests;
