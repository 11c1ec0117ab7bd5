//! The injection point for ITT stamping: every interval the hooks record can also be emitted
//! as an ITT task to a collector other than mlprof (VTune). The stamper itself lives in the
//! cdylib (it needs Intel's ittnotify static part); it installs its two functions here, so the
//! recorder calls it without importing it. Without a stamper the cost per hook is one load and
//! a branch.

use core::sync::atomic::{AtomicUsize, Ordering};

use mlprof_format::func::Func;

/// The stamping domain's name: reserved, the ITT collector never records tasks in it (mlprof
/// recorded the calls themselves).
pub const DOMAIN: &core::ffi::CStr = c"mlprof";

/// `fn(Func) -> bool` that opens a task (and says whether it did); 0 = stamping off.
static BEGIN: AtomicUsize = AtomicUsize::new(0);
/// `fn()` that closes the task `BEGIN` opened.
static END: AtomicUsize = AtomicUsize::new(0);

/// Turns stamping on with these two functions.
pub fn install(begin: fn(Func) -> bool, end: fn()) {
    END.store(end as usize, Ordering::Relaxed);
    BEGIN.store(begin as usize, Ordering::Release);
}

/// Switches stamping off for good (the process is exiting and the collector behind it may be
/// gone).
pub fn uninstall() {
    BEGIN.store(0, Ordering::Release);
}

/// Whether a stamper is installed.
#[inline(always)]
pub fn enabled() -> bool {
    BEGIN.load(Ordering::Relaxed) != 0
}

/// Opens the ITT task for a call of `func`; returns whether one was opened. Callers check
/// [`enabled`] first and hold the guard (as internal).
#[cold]
pub fn begin(func: Func) -> bool {
    let begin = BEGIN.load(Ordering::Acquire);
    if begin == 0 {
        return false;
    }
    // Safety: only `install` stores here, and it stores a `fn(Func) -> bool`.
    let begin = unsafe { core::mem::transmute::<usize, fn(Func) -> bool>(begin) };
    begin(func)
}

/// Closes the task [`begin`] opened.
#[cold]
pub fn end() {
    let end = END.load(Ordering::Relaxed);
    if end != 0 {
        // Safety: only `install` stores here, and it stores a `fn()`.
        let end = unsafe { core::mem::transmute::<usize, fn()>(end) };
        end();
    }
}
