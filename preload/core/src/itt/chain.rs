//! Chaining to another ITT collector: when the user had pointed `INTEL_LIBITTNOTIFY64` at one
//! (VTune's), the launcher passes it on in `MLPROF_ITT_CHAIN`; we load it, let its
//! `__itt_api_init` fill a shadow table of ours, and forward every call to it, so it keeps
//! working beside mlprof.

use core::ffi::{CStr, c_char, c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use super::abi::{ApiInfo, IttDomain, IttGlobal, IttStringHandle};
use super::intern::name_bytes;

// ---- chaining to another collector ---------------------------------------------------------

/// The chained collector's functions, filled by its `__itt_api_init` through our shadow table.
pub struct Chain {
    pub domain_create: AtomicUsize,
    pub string_handle_create: AtomicUsize,
    pub task_begin: AtomicUsize,
    pub task_end: AtomicUsize,
    pub frame_begin_v3: AtomicUsize,
    pub frame_end_v3: AtomicUsize,
    pub marker: AtomicUsize,
    pub pause: AtomicUsize,
    pub resume: AtomicUsize,
    pub thread_set_name: AtomicUsize,
}

pub static CHAIN: Chain = Chain {
    domain_create: AtomicUsize::new(0),
    string_handle_create: AtomicUsize::new(0),
    task_begin: AtomicUsize::new(0),
    task_end: AtomicUsize::new(0),
    frame_begin_v3: AtomicUsize::new(0),
    frame_end_v3: AtomicUsize::new(0),
    marker: AtomicUsize::new(0),
    pause: AtomicUsize::new(0),
    resume: AtomicUsize::new(0),
    thread_set_name: AtomicUsize::new(0),
};

static CHAIN_LOADED: AtomicBool = AtomicBool::new(false);

/// Whether a chained collector is active.
pub fn chained() -> bool {
    CHAIN.task_begin.load(Ordering::Relaxed) != 0 && !CHAIN_STOPPED.load(Ordering::Relaxed)
}

/// Set when the process starts exiting: a chained collector tears itself down in its own
/// atexit handler (Intel's reference collector closes its log and frees its objects there), so
/// nothing may be forwarded to it, nor stamped, from then on.
static CHAIN_STOPPED: AtomicBool = AtomicBool::new(false);

extern "C" fn stop_chain() {
    CHAIN_STOPPED.store(true, Ordering::Release);
    crate::recorder::stamp::uninstall();
}

/// Runs `f` (a call into the chained collector) with this thread's guard held as internal.
pub fn as_internal<R>(f: impl FnOnce() -> R) -> R {
    match crate::guard::current() {
        Some(state) => state.internal(f),
        None => f(),
    }
}

/// The chained collector's domain for `domain` (created on first use).
///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn chained_domain(domain: *const IttDomain) -> *mut c_void {
    // Safety: as in `domain_identity`.
    match unsafe { domain.as_ref() } {
        Some(d) => chained_object(&d.extra2, d.name_a, &CHAIN.domain_create),
        None => core::ptr::null_mut(),
    }
}

/// The chained collector's string handle for `handle` (created on first use).
///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn chained_handle(handle: *const IttStringHandle) -> *mut c_void {
    // Safety: as in `domain_identity`.
    match unsafe { handle.as_ref() } {
        Some(h) => chained_object(&h.extra2, h.str_a, &CHAIN.string_handle_create),
        None => core::ptr::null_mut(),
    }
}

/// The chained collector's object for one of ours, kept in our object's `extra2`: made once by
/// the chained collector's `create(name)` (`__itt_domain_create` or
/// `__itt_string_handle_create`, same prototype).
fn chained_object(slot: &AtomicPtr<c_void>, name: *const c_char, create: &AtomicUsize) -> *mut c_void {
    let known = slot.load(Ordering::Acquire);
    if !known.is_null() {
        return known;
    }
    let create = create.load(Ordering::Relaxed);
    if create == 0 {
        return core::ptr::null_mut();
    }
    // Safety: the chained collector's create function, `(const char*) -> object*`.
    let theirs =
        unsafe { crate::real::as_fn::<unsafe extern "C" fn(*const c_char) -> *mut c_void>(create)(name) };
    slot.store(theirs, Ordering::Release);
    theirs
}

/// Loads the collector named by `MLPROF_ITT_CHAIN` (once) and lets it fill our shadow table.
///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn load_chain(template: *const IttGlobal, groups: c_int) {
    if CHAIN_LOADED.swap(true, Ordering::AcqRel) {
        return;
    }
    // Safety: getenv without allocation; the value is only read here.
    let path = unsafe { libc::getenv(c"MLPROF_ITT_CHAIN".as_ptr()) };
    if path.is_null() || name_bytes(path).is_empty() {
        return;
    }
    // Safety: dlopen/dlsym of the library the user named; errors leave the chain empty.
    let lib = unsafe { libc::dlopen(path, libc::RTLD_LAZY) };
    if lib.is_null() {
        crate::sys::log_line(&[b"mlprof: cannot load the chained ITT collector ", name_bytes(path)]);
        return;
    }
    // Safety: `lib` was just returned by dlopen; the name is a C string literal.
    let init = unsafe { crate::real::glibc_dlsym(lib, c"__itt_api_init".as_ptr()) };
    if init.is_null() {
        crate::sys::log_line(&[
            b"mlprof: the chained ITT collector has no __itt_api_init: ",
            name_bytes(path),
        ]);
        return;
    }
    let slots: [(&CStr, &AtomicUsize); 10] = [
        (c"__itt_domain_create", &CHAIN.domain_create),
        (c"__itt_string_handle_create", &CHAIN.string_handle_create),
        (c"__itt_task_begin", &CHAIN.task_begin),
        (c"__itt_task_end", &CHAIN.task_end),
        (c"__itt_frame_begin_v3", &CHAIN.frame_begin_v3),
        (c"__itt_frame_end_v3", &CHAIN.frame_end_v3),
        (c"__itt_marker", &CHAIN.marker),
        (c"__itt_pause", &CHAIN.pause),
        (c"__itt_resume", &CHAIN.resume),
        (c"__itt_thread_set_name", &CHAIN.thread_set_name),
    ];
    let mut list: Vec<ApiInfo> = slots
        .iter()
        .map(|(name, slot)| ApiInfo {
            name: name.as_ptr(),
            func_ptr: slot.as_ptr() as *mut *mut c_void,
            init_func: core::ptr::null_mut(),
            null_func: core::ptr::null_mut(),
            group: 0,
        })
        .collect();
    list.push(ApiInfo {
        name: core::ptr::null(),
        func_ptr: core::ptr::null_mut(),
        init_func: core::ptr::null_mut(),
        null_func: core::ptr::null_mut(),
        group: 0,
    });
    // The shadow global: the application's, with our table and the chained library's handle,
    // and an unlocked, uninitialized mutex (the caller holds the original locked).
    // Safety: `template` is the __itt_global the static part handed us; only its identifying
    // head (magic, version) is read. An all-zero pthread mutex is a valid unlocked mutex.
    let mut shadow: IttGlobal = unsafe { core::mem::zeroed() };
    // Safety: see above; a null template is handled by `as_ref`.
    if let Some(template) = unsafe { template.as_ref() } {
        shadow.magic = template.magic;
        shadow.version_major = template.version_major;
        shadow.version_minor = template.version_minor;
        shadow.version_build = template.version_build;
    }
    shadow.api_initialized = 1;
    shadow.lib = lib;
    shadow.api_list_ptr = list.leak().as_mut_ptr();
    let shadow = Box::leak(Box::new(shadow));
    // Safety: the chained collector's __itt_api_init(__itt_global*, __itt_group_id).
    unsafe {
        crate::real::as_fn::<unsafe extern "C" fn(*mut IttGlobal, c_int)>(init as usize)(shadow, groups)
    };
    // Registered after the chained collector's own atexit handlers, so it runs before them.
    // Safety: registering a plain extern "C" function.
    unsafe { libc::atexit(stop_chain) };
}
