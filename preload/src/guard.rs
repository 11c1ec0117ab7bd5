//! Per-thread state: the reentrancy guard and this thread's ring lane.
//!
//! One const-initialized thread-local without `Drop`: it needs no lazy initialization and
//! registers no destructor, so touching it never allocates (which could recurse into hooks).

use core::cell::Cell;

pub struct ThreadState {
    /// Inside one of our hooks (or our own bookkeeping): calls pass straight through.
    pub in_hook: Cell<bool>,
    /// Claimed lane index + 1; 0 = none yet.
    pub lane: Cell<u32>,
    /// The pid the lane was claimed for: a fork child (even one made by `_Fork` or `clone`,
    /// which skip atfork handlers) sees a different process pid and claims its own lane.
    pub lane_pid: Cell<u32>,
    pub tid: Cell<u32>,
    /// This thread called vfork: until proven otherwise, we may be running in the vfork child,
    /// which shares this memory and must pass through.
    pub vfork_pending: Cell<bool>,
    /// After a failed lane claim: records to drop before trying again.
    pub no_lane_skips: Cell<u32>,
    /// The CUDA device this thread last selected with cudaSetDevice.
    pub device: Cell<i32>,
    /// Depth of recorded CUDA runtime calls in progress (driver calls inside are nested).
    pub gpu_depth: Cell<u32>,
}

thread_local! {
    pub static THREAD: ThreadState = const {
        ThreadState {
            in_hook: Cell::new(false),
            lane: Cell::new(0),
            lane_pid: Cell::new(0),
            tid: Cell::new(0),
            vfork_pending: Cell::new(false),
            no_lane_skips: Cell::new(0),
            device: Cell::new(0),
            gpu_depth: Cell::new(0),
        }
    };
}

/// Runs `f` with the guard held unless it is held already (then returns `None` and the caller
/// passes the call through). TLS that is already torn down (thread exit) also passes through.
#[inline(always)]
pub fn with_guard<R>(f: impl FnOnce(&ThreadState) -> R) -> Option<R> {
    THREAD
        .try_with(|state| {
            if state.in_hook.get() {
                return None;
            }
            state.in_hook.set(true);
            let result = f(state);
            state.in_hook.set(false);
            Some(result)
        })
        .ok()
        .flatten()
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
