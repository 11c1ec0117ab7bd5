//! Stamping: every interval the hooks record is also emitted as an ITT task (domain `mlprof`,
//! task named after the function) through the ittnotify static part from `ittapi-sys`, so
//! VTune or any ITT collector shows mlprof's intervals. Domain and string handles are created
//! once in the constructor (the first ITT call loads the collector, which must not happen
//! inside a hook). Without a collector the cost per hook is one load and a branch.
//!
//! When the collector the static part bound is mlprof itself and nothing is chained behind it,
//! stamping is switched off: mlprof already recorded the call. Otherwise [`begin`] and [`end`]
//! are installed into the recorder (`recorder::stamp`), which calls them around each call.

use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use mlprof_format::func::Func;
use mlprof_preload_core::recorder::stamp::{self, DOMAIN};

static DOMAIN_PTR: AtomicPtr<ittapi_sys::__itt_domain> = AtomicPtr::new(core::ptr::null_mut());
/// `__itt_task_begin` / `__itt_task_end` of the bound collector; 0 = stamping off.
static TASK_BEGIN: AtomicUsize = AtomicUsize::new(0);
static TASK_END: AtomicUsize = AtomicUsize::new(0);
/// One string handle per function id (ids < 1024).
static HANDLES: [AtomicPtr<ittapi_sys::__itt_string_handle>; 1024] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; 1024];

type TaskBegin = unsafe extern "C" fn(
    *const ittapi_sys::__itt_domain,
    ittapi_sys::__itt_id,
    ittapi_sys::__itt_id,
    *mut ittapi_sys::__itt_string_handle,
);
type TaskEnd = unsafe extern "C" fn(*const ittapi_sys::__itt_domain);

unsafe extern "C" {
    /// The static part's initialization (loads the collector named by INTEL_LIBITTNOTIFY64 and
    /// binds its function table); linked from ittapi-sys's static library, not exported.
    fn __itt_init_ittlib(
        lib_name: *const core::ffi::c_char,
        init_groups: core::ffi::c_int,
    ) -> core::ffi::c_int;
}

/// `__itt_group_all`.
const ALL_GROUPS: core::ffi::c_int = -1;

/// Creates the domain and handles, and decides whether stamping is worth it. Called from the
/// constructor, with the reentrancy guard held.
pub fn init() {
    // Safety: initializing the static part here, outside any hook, means no later ITT call
    // from a hook can trigger the collector's loading; its function pointers are plain globals
    // written only by that initialization.
    unsafe {
        __itt_init_ittlib(core::ptr::null(), ALL_GROUPS);
        let Some(domain_create) =
            core::ptr::read_volatile(&raw const ittapi_sys::__itt_domain_create_ptr__3_0)
        else {
            return;
        };
        let domain = domain_create(DOMAIN.as_ptr());
        if domain.is_null() {
            return;
        }
        let Some(handle_create) =
            core::ptr::read_volatile(&raw const ittapi_sys::__itt_string_handle_create_ptr__3_0)
        else {
            return;
        };
        for &func in Func::ALL {
            // A NUL-terminated copy of the name, cut at 63 bytes.
            let mut name = [0u8; 64];
            mlprof_preload_core::sys::copy_prefix(
                name.get_mut(..63).unwrap_or_default(),
                func.name().as_bytes(),
            );
            let handle = handle_create(name.as_ptr() as *const core::ffi::c_char);
            if let Some(slot) = HANDLES.get(func as usize) {
                slot.store(handle, Ordering::Relaxed);
            }
        }
        let begin = core::ptr::read_volatile(&raw const ittapi_sys::__itt_task_begin_ptr__3_0);
        let end = core::ptr::read_volatile(&raw const ittapi_sys::__itt_task_end_ptr__3_0);
        let (Some(begin), Some(end)) = (begin, end) else { return };
        let ours = crate::exports::itt_task_begin_address();
        if begin as usize == ours && !crate::itt::chained() {
            return;
        }
        DOMAIN_PTR.store(domain, Ordering::Relaxed);
        TASK_END.store(end as usize, Ordering::Relaxed);
        TASK_BEGIN.store(begin as usize, Ordering::Release);
    }
    stamp::install(self::begin, self::end);
}

/// Opens the ITT task for a call of `func`; returns whether one was opened. The recorder calls
/// it with the guard held (as internal).
fn begin(func: Func) -> bool {
    let begin = TASK_BEGIN.load(Ordering::Relaxed);
    if begin == 0 {
        return false;
    }
    let handle = HANDLES.get(func as usize).map_or(core::ptr::null_mut(), |h| h.load(Ordering::Relaxed));
    let null = ittapi_sys::__itt_id { d1: 0, d2: 0, d3: 0 };
    // Safety: `begin` is the bound collector's __itt_task_begin; the domain and handle were
    // created by the same static part.
    unsafe { crate::real::as_fn::<TaskBegin>(begin)(DOMAIN_PTR.load(Ordering::Relaxed), null, null, handle) };
    true
}

/// Closes the task [`begin`] opened.
fn end() {
    let end = TASK_END.load(Ordering::Relaxed);
    if end != 0 {
        // Safety: as in `stamp_begin`.
        unsafe { crate::real::as_fn::<TaskEnd>(end)(DOMAIN_PTR.load(Ordering::Relaxed)) };
    }
}
