//! The ITT collector entry points (see `mlprof_preload_core::itt`). The static part finds them through
//! `__itt_api_init`, which fills its function table from [`ENTRY_POINTS`].

use core::ffi::{CStr, c_char, c_int, c_void};
use core::sync::atomic::Ordering;

use mlprof_format::func::Func;
use mlprof_format::ring::Trigger;
use mlprof_preload_core::recorder::capture;

use crate::itt::{self, CHAIN, IttDomain, IttGlobal, IttId, IttStringHandle};
use crate::real::as_fn;

/// Called by each static part once it loaded us (one per library that embeds ittnotify).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_api_init(global: *mut IttGlobal, init_groups: c_int) {
    // Safety: the static part passes its own __itt_global; only the API list is written.
    let Some(global) = (unsafe { global.as_mut() }) else { return };
    // Safety: `global` is the static part's own, valid for the call.
    unsafe { itt::load_chain(global, init_groups) };
    let mut entry = global.api_list_ptr;
    // Safety: the list ends with a null name; each func_ptr points to the static part's slot.
    unsafe {
        while let Some(api) = entry.as_ref()
            && !api.name.is_null()
        {
            let name = CStr::from_ptr(api.name).to_bytes();
            let ours = ENTRY_POINTS.iter().find(|(n, _)| n.to_bytes() == name).map(|(_, f)| f.0);
            if !api.func_ptr.is_null() {
                *api.func_ptr = ours.unwrap_or(api.null_func);
            }
            entry = entry.add(1);
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_api_fini(_global: *mut IttGlobal) {}

/// An entry point's address kept as data in a static table.
pub struct Entry(*mut c_void);

// Safety: a function's address is immutable, shareable data.
unsafe impl Sync for Entry {}

macro_rules! entries {
    ($($name:literal => $f:ident,)*) => {
        pub static ENTRY_POINTS: &[(&CStr, Entry)] = &[$(($name, Entry($f as *mut c_void)),)*];
    };
}

entries! {
    c"__itt_domain_create" => __itt_domain_create,
    c"__itt_string_handle_create" => __itt_string_handle_create,
    c"__itt_task_begin" => __itt_task_begin,
    c"__itt_task_begin_fn" => __itt_task_begin_fn,
    c"__itt_task_end" => __itt_task_end,
    c"__itt_frame_begin_v3" => __itt_frame_begin_v3,
    c"__itt_frame_end_v3" => __itt_frame_end_v3,
    c"__itt_marker" => __itt_marker,
    c"__itt_pause" => __itt_pause,
    c"__itt_resume" => __itt_resume,
    c"__itt_detach" => __itt_detach,
    c"__itt_thread_set_name" => __itt_thread_set_name,
}

/// The address the static part binds for `__itt_task_begin` when it bound us.
pub fn itt_task_begin_address() -> usize {
    __itt_task_begin as *const () as usize
}

/// Calls the chained collector's function in `slot`, if one is loaded.
/// Calls the chained collector's function in `slot`, if one is loaded and not stopped. The
/// collector's own libc calls (its log file, say) are ours: they pass through unrecorded and
/// unstamped (stamping them would call back into it in the middle of its own call).
macro_rules! forward {
    ($slot:ident, $ty:ty, ($($arg:expr),*)) => {{
        let f = CHAIN.$slot.load(Ordering::Relaxed);
        if f != 0 && itt::chained() {
            // Safety: the chained collector's entry point of this prototype.
            itt::as_internal(|| unsafe { as_fn::<$ty>(f)($($arg),*) });
        }
    }};
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_domain_create(name: *const c_char) -> *mut IttDomain {
    // Safety: the static part passes a NUL-terminated name (or null).
    unsafe { itt::domain(name) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_string_handle_create(name: *const c_char) -> *mut IttStringHandle {
    // Safety: the static part passes a NUL-terminated name (or null).
    unsafe { itt::string_handle(name) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_task_begin(
    domain: *const IttDomain,
    id: IttId,
    parent: IttId,
    name: *mut IttStringHandle,
) {
    if itt::chained() {
        // Safety: the static part passes objects from a `__itt_*_create` (or null).
        let (d, h) = unsafe { (itt::chained_domain(domain), itt::chained_handle(name)) };
        forward!(
            task_begin,
            unsafe extern "C" fn(*mut c_void, IttId, IttId, *mut c_void),
            (d, id, parent, h)
        );
    }
    // Safety: as above.
    unsafe { itt::task_begin(domain, id, parent, name) };
}

/// A task named by a function address: named after its symbol when there is one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_task_begin_fn(
    domain: *const IttDomain,
    id: IttId,
    parent: IttId,
    function: *mut c_void,
) {
    let mut name: *const c_char = c"function".as_ptr();
    // Safety: dladdr only reads the loader's tables.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(function, &mut info) != 0 && !info.dli_sname.is_null() {
            name = info.dli_sname;
        }
    }
    // Safety: `name` is a symbol name from dladdr or a literal; the domain is the caller's.
    unsafe { __itt_task_begin(domain, id, parent, itt::string_handle(name)) };
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_task_end(domain: *const IttDomain) {
    if itt::chained() {
        // Safety: the static part passes a domain from `__itt_domain_create` (or null).
        let d = unsafe { itt::chained_domain(domain) };
        forward!(task_end, unsafe extern "C" fn(*mut c_void), (d));
    }
    itt::task_end();
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_frame_begin_v3(domain: *const IttDomain, id: *mut IttId) {
    if itt::chained() {
        // Safety: the static part passes a domain from `__itt_domain_create` (or null).
        let d = unsafe { itt::chained_domain(domain) };
        forward!(frame_begin_v3, unsafe extern "C" fn(*mut c_void, *mut IttId), (d, id));
    }
    // Safety: as above; `id` is null or the caller's id.
    unsafe { itt::frame_begin(domain, id) };
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_frame_end_v3(domain: *const IttDomain, id: *mut IttId) {
    if itt::chained() {
        // Safety: the static part passes a domain from `__itt_domain_create` (or null).
        let d = unsafe { itt::chained_domain(domain) };
        forward!(frame_end_v3, unsafe extern "C" fn(*mut c_void, *mut IttId), (d, id));
    }
    itt::frame_end();
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_marker(
    domain: *const IttDomain,
    id: IttId,
    name: *mut IttStringHandle,
    scope: c_int,
) {
    if itt::chained() {
        // Safety: the static part passes objects from a `__itt_*_create` (or null).
        let (d, h) = unsafe { (itt::chained_domain(domain), itt::chained_handle(name)) };
        forward!(marker, unsafe extern "C" fn(*mut c_void, IttId, *mut c_void, c_int), (d, id, h, scope));
    }
    // Safety: as above.
    unsafe { itt::instant(Func::IttMarker, domain, name, id.d1) };
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_pause() {
    forward!(pause, unsafe extern "C" fn(), ());
    // Safety: null objects are allowed.
    unsafe { itt::instant(Func::IttPause, core::ptr::null(), core::ptr::null(), 0) };
    // `--capture-range=itt`: the range closes after the instant, which it holds.
    capture::flip(Trigger::IttPause);
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_resume() {
    forward!(resume, unsafe extern "C" fn(), ());
    // `--capture-range=itt`: the range opens before the instant, which it holds.
    capture::flip(Trigger::IttResume);
    // Safety: null objects are allowed.
    unsafe { itt::instant(Func::IttResume, core::ptr::null(), core::ptr::null(), 0) };
}

/// `__itt_detach`: the tool is told to stop for good; with `--capture-range=itt` it closes the
/// range like `__itt_pause` (a chained collector is not told: the chain has no slot for it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_detach() {
    capture::flip(Trigger::IttDetach);
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __itt_thread_set_name(name: *const c_char) {
    forward!(thread_set_name, unsafe extern "C" fn(*const c_char), (name));
}
