//! Per-thread state: the reentrancy guard and this thread's ring lane.
//!
//! It lives in an initial-exec TLS block defined in C (`thread_state.c`): two instructions to
//! reach, where a Rust `thread_local!` in a shared library costs a `__tls_get_addr` call on
//! every hook. It is zero-filled, needs no initialization and has no destructor, so touching
//! it never allocates (which could recurse into hooks). [`current`] is the one way to reach it;
//! the [`ThreadRef`] it returns can be kept across the real call of a hook.

use core::cell::Cell;
use core::marker::PhantomData;

/// Everything the library keeps per thread. All-zero bytes are its initial value
/// ([`ThreadState::new`]): that is how the TLS block starts.
#[repr(C)]
pub struct ThreadState {
    /// This thread's lane, ready to write (`LaneWriter::NONE` until it claims one).
    pub lane_writer: Cell<mlprof_format::ring::LaneWriter>,
    /// Inside one of our hooks (or our own bookkeeping): calls pass straight through.
    pub in_hook: Cell<bool>,
    /// Claimed lane index + 1; 0 = none yet.
    pub lane: Cell<u32>,
    /// The lane's generation at the claim (what the thread retires it with).
    pub lane_generation: Cell<u32>,
    /// Who the lane was claimed as (`session::identity()`: epoch and pid): a fork child sees
    /// another pid, a process that joined a new collector another epoch, and both claim anew.
    pub lane_owner: Cell<u64>,
    pub tid: Cell<u32>,
    /// This thread called vfork: until proven otherwise, we may be running in the vfork child,
    /// which shares this memory and must pass through.
    pub vfork_pending: Cell<bool>,
    /// A lane claim failed: the thread drops its records until the collector offers a lane.
    pub no_lane: Cell<bool>,
    /// The ring's `lanes_offered` when the claim failed: the thread tries again once it moved.
    pub no_lane_offered: Cell<u32>,
    /// A recorded call is in progress (between `Span::begin` and its record): still set when
    /// the thread exits means it was cancelled inside the call (`pthread_cancel`), which is
    /// then counted as interrupted at thread exit.
    pub in_flight: Cell<bool>,
    /// The start routine of a fork-like `clone` this thread is making: the child runs on a
    /// copy of this memory and finds it here (see `exports::clone`).
    pub clone_start: Cell<usize>,
    /// The CUDA device this thread last selected with cudaSetDevice.
    pub device: Cell<i32>,
    /// Depth of recorded CUDA runtime calls in progress (driver calls inside are nested).
    pub gpu_depth: Cell<u32>,
    /// CUPTI's correlation id of the outermost CUDA API call this thread is in, as CUPTI's
    /// callback told it (0: none yet): what links the call to the GPU work it issued.
    pub gpu_correlation: Cell<u32>,
    /// Set (with `in_hook`) around our own cold paths that may call hooked functions (joining,
    /// claiming a lane, naming a kernel, ITT stamping): calls made there are ours, not lost.
    pub internal: Cell<bool>,
    /// Calls a signal handler made while this thread was writing a record: they cannot be
    /// recorded (the lane has one writer), so they are counted as dropped. Atomic because the
    /// handler and the interrupted code share it.
    pub nested: core::sync::atomic::AtomicU32,
    /// Complete mode: the application asked to block SIGSYS, which is never really blocked
    /// (a trapped system call with SIGSYS blocked would kill the process): what it is told
    /// its mask holds (see `trap::signals`).
    pub trap_sigsys_blocked: Cell<bool>,
    /// The address of this thread's ITT task stack (`itt::tasks`), 0 until its first task: a
    /// Rust thread-local in a shared library costs a `__tls_get_addr` call at every reach, two
    /// per ITT range, so it is reached through here.
    pub itt_tasks: Cell<usize>,
    /// `--sites` in a process where no interpreter was found yet: calls until this thread looks
    /// for one again (a per-thread countdown: no shared counter on the hook path).
    pub site_looks: Cell<u32>,
}

unsafe extern "C" {
    /// The calling thread's state block (thread_state.c): what `thread_block` reads inline on
    /// x86_64 (a unit test checks that both agree).
    #[cfg(any(test, not(target_arch = "x86_64")))]
    fn mlprof_thread_state() -> *mut core::ffi::c_void;
    /// Its size, checked against `ThreadState` by a unit test.
    #[cfg(test)]
    fn mlprof_thread_state_bytes() -> core::ffi::c_ulong;
}

/// The C block's size and alignment (thread_state.c) must hold a `ThreadState`.
const _: () = assert!(core::mem::size_of::<ThreadState>() <= 256);
const _: () = assert!(core::mem::align_of::<ThreadState>() <= 64);

/// The calling thread's [`ThreadState`], held for the duration of a hook.
///
/// It cannot leave the thread: it is neither `Send` nor `Sync`, so it can only live in this
/// thread's stack frames or thread-locals, and those end with the thread, while the state it
/// points to lives in the thread's TLS block until the thread is gone (it has no destructor,
/// so it is never torn down earlier, even while pthread key destructors run at thread exit).
#[derive(Clone, Copy)]
pub struct ThreadRef {
    state: &'static ThreadState,
    _not_send: PhantomData<*const ()>,
}

impl core::ops::Deref for ThreadRef {
    type Target = ThreadState;

    #[inline(always)]
    fn deref(&self) -> &ThreadState {
        self.state
    }
}

/// This thread's state; `None` only where the thread-local cannot be reached at all.
#[inline(always)]
pub fn current() -> Option<ThreadRef> {
    // Safety: `thread_block` is this thread's static TLS block, 256 bytes aligned to 64,
    // zero-filled at thread start, which is a valid ThreadState (see `ThreadState::new`); it
    // outlives every place a ThreadRef can be kept (see `ThreadRef`). Only this thread uses
    // it, through `Cell`s and atomics.
    let state = unsafe { &*(thread_block() as *const ThreadState) };
    Some(ThreadRef { state, _not_send: PhantomData })
}

/// The address of the calling thread's state block: the thread pointer plus the block's offset
/// in the static TLS area, which the loader wrote into the GOT (what the C accessor compiles to,
/// without the call: every hook and ITT call reaches the block once or twice).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn thread_block() -> *mut core::ffi::c_void {
    let address: usize;
    // Safety: two loads, of the thread control block's self pointer (`%fs:0`, which glibc keeps
    // on x86_64) and of a GOT entry; nothing is written. `pure`: the result is the same for
    // every call on a thread.
    unsafe {
        core::arch::asm!(
            "mov {address}, qword ptr fs:[0]",
            "add {address}, qword ptr [rip + mlprof_thread_block@GOTTPOFF]",
            address = out(reg) address,
            options(pure, readonly, nostack),
        )
    };
    address as *mut core::ffi::c_void
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn thread_block() -> *mut core::ffi::c_void {
    // Safety: the C accessor, a plain function returning this thread's block.
    unsafe { mlprof_thread_state() }
}

/// Runs one of our cold paths (fork and exit bookkeeping) with the guard held, unless it is
/// held already (then returns `None`). The path must not call hooked functions itself: a call
/// that arrives meanwhile is a signal handler's, and is counted (see `ThreadState::reentered`).
#[inline(always)]
pub fn with_guard<R>(f: impl FnOnce(ThreadRef) -> R) -> Option<R> {
    let state = current()?;
    if state.in_hook.get() {
        return None;
    }
    state.in_hook.set(true);
    let result = f(state);
    state.in_hook.set(false);
    Some(result)
}

/// Runs `f` and puts the calling thread's errno back as it was: our own work (a chained ITT
/// collector's, say) must never change what the application sees.
#[inline(always)]
pub fn keeping_errno<R>(f: impl FnOnce() -> R) -> R {
    let saved = errno();
    let result = f();
    set_errno(saved);
    result
}

/// The calling thread's errno.
#[inline(always)]
pub fn errno() -> i32 {
    // Safety: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() }
}

#[inline(always)]
pub fn set_errno(value: i32) {
    // Safety: as in `errno`.
    unsafe { *libc::__errno_location() = value }
}

impl Default for ThreadState {
    fn default() -> ThreadState {
        ThreadState::new()
    }
}

impl ThreadState {
    /// A thread that has recorded nothing yet.
    pub const fn new() -> ThreadState {
        ThreadState {
            lane_writer: Cell::new(mlprof_format::ring::LaneWriter::NONE),
            in_hook: Cell::new(false),
            lane: Cell::new(0),
            lane_generation: Cell::new(0),
            lane_owner: Cell::new(0),
            tid: Cell::new(0),
            vfork_pending: Cell::new(false),
            no_lane: Cell::new(false),
            no_lane_offered: Cell::new(0),
            in_flight: Cell::new(false),
            clone_start: Cell::new(0),
            device: Cell::new(0),
            gpu_depth: Cell::new(0),
            gpu_correlation: Cell::new(0),
            internal: Cell::new(false),
            nested: core::sync::atomic::AtomicU32::new(0),
            trap_sigsys_blocked: Cell::new(false),
            itt_tasks: Cell::new(0),
            site_looks: Cell::new(0),
        }
    }

    /// A hooked call found the guard held: ours (pass through silently), or a signal handler's
    /// that interrupted our bookkeeping (count it, to be added to the lane's drops).
    #[cold]
    pub fn reentered(&self) {
        if !self.internal.get() {
            self.nested.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Runs `f`, one of our cold paths that calls code we do not control (the loader, malloc,
    /// CUDA) which may call hooked functions: with the guard held and marked internal, so those
    /// calls pass through as ours, and with every asynchronous signal blocked, so that no
    /// signal handler's call can be mistaken for ours (pending signals arrive right after, and
    /// their handlers' calls are recorded then). Synchronous signals (SIGSEGV, SIGBUS, SIGILL,
    /// SIGFPE, SIGTRAP, SIGSYS) stay unblocked: blocking them would turn a fault into a kill.
    pub fn foreign<R>(&self, f: impl FnOnce() -> R) -> R {
        let block = crate::sys::async_signals();
        let mut previous = crate::sys::empty_sigset();
        // Safety: valid signal sets; pthread_sigmask only changes this thread's mask.
        let blocked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut previous) } == 0;
        let result = self.internal(f);
        if blocked {
            // Safety: restores the mask saved above.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, core::ptr::null_mut()) };
        }
        result
    }

    /// Runs `f` with the guard held and marked internal: calls it makes into hooked functions
    /// pass through as ours. Without blocking signals, so a signal handler's call arriving
    /// meanwhile passes through uncounted: only for forwarding to a chained ITT collector (per
    /// call, where two system calls would cost too much); everything else uses
    /// [`ThreadState::foreign`].
    #[inline]
    pub fn internal<R>(&self, f: impl FnOnce() -> R) -> R {
        let (was_in_hook, was_internal) = (self.in_hook.get(), self.internal.get());
        self.in_hook.set(true);
        self.internal.set(true);
        let result = f();
        self.internal.set(was_internal);
        self.in_hook.set(was_in_hook);
        result
    }

    /// Takes the calls counted by `reentered` (the caller adds them to its lane's drops).
    #[inline(always)]
    pub fn take_nested(&self) -> u32 {
        let n = self.nested.load(core::sync::atomic::Ordering::Relaxed);
        if n != 0 {
            self.nested.fetch_sub(n, core::sync::atomic::Ordering::Relaxed);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_is_not_reentrant_and_restores_itself() {
        let outer = with_guard(|state| {
            assert!(state.in_hook.get() && !state.internal.get());
            with_guard(|_| ()).is_none()
        });
        assert_eq!(outer, Some(true), "a nested with_guard finds the guard held");
        let state = current().unwrap();
        assert!(!state.in_hook.get() && !state.internal.get());
    }

    #[test]
    fn foreign_code_runs_with_asynchronous_signals_blocked() {
        let state = current().unwrap();
        let blocked = |signal| {
            let mut mask = crate::sys::empty_sigset();
            // Safety: reads this thread's mask.
            unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, core::ptr::null(), &mut mask) };
            // Safety: a valid set.
            unsafe { libc::sigismember(&mask, signal) == 1 }
        };
        let inside = state.foreign(|| {
            assert!(state.in_hook.get() && state.internal.get());
            (blocked(libc::SIGALRM), blocked(libc::SIGUSR1), blocked(libc::SIGSEGV))
        });
        assert_eq!(inside, (true, true, false));
        assert!(!blocked(libc::SIGALRM), "the mask is restored");
        assert!(!state.in_hook.get() && !state.internal.get());
    }

    #[test]
    fn only_calls_from_outside_our_bookkeeping_count_as_reentered() {
        let state = current().unwrap();
        state.internal(|| state.reentered());
        assert_eq!(state.take_nested(), 0);
        state.reentered();
        state.reentered();
        assert_eq!(state.take_nested(), 2);
        assert_eq!(state.take_nested(), 0);
    }

    #[test]
    fn the_initial_state_is_all_zero_bytes_and_fits_the_tls_block() {
        // The C block starts zero-filled: zero bytes must read as the initial state.
        // Safety: every field is a Cell or atomic of an integer, bool or raw pointer, for which
        // zero is a valid value.
        let zero: ThreadState = unsafe { core::mem::zeroed() };
        let fresh = ThreadState::new();
        let writer = |s: &ThreadState| format!("{:?}", s.lane_writer.get());
        assert_eq!(writer(&zero), writer(&fresh));
        let fields = |s: &ThreadState| {
            (
                (s.in_hook.get(), s.lane.get(), s.lane_generation.get(), s.lane_owner.get(), s.tid.get()),
                (s.vfork_pending.get(), s.no_lane.get(), s.no_lane_offered.get(), s.in_flight.get()),
                (s.clone_start.get(), s.device.get(), s.gpu_depth.get(), s.internal.get(), s.itt_tasks.get()),
                s.nested.load(core::sync::atomic::Ordering::Relaxed),
            )
        };
        assert_eq!(fields(&zero), fields(&fresh));
        // Safety: a plain C function.
        let block = unsafe { mlprof_thread_state_bytes() } as usize;
        assert!(core::mem::size_of::<ThreadState>() <= block);
        let a = current().unwrap();
        let here = &*a as *const ThreadState as usize;
        let other =
            std::thread::spawn(|| &*current().unwrap() as *const ThreadState as usize).join().unwrap();
        assert_ne!(here, other, "one block per thread");
        assert_eq!(here % 64, 0);
        // Safety: a plain C function.
        assert_eq!(here, unsafe { mlprof_thread_state() } as usize, "the inline read finds the C block");
    }

    #[test]
    fn errno_round_trips() {
        set_errno(libc::EAGAIN);
        assert_eq!(errno(), libc::EAGAIN);
    }
}
