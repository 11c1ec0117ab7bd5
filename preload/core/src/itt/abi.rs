//! The ITT ABI this collector speaks (`ittnotify.h`, `ittnotify_config.h`, `#pragma pack(8)`,
//! which leaves every field naturally aligned): the objects a static part hands us, the id
//! passed by value, and the static part's global with its API table.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::AtomicPtr;

/// `__itt_domain` (ittnotify.h; every field naturally aligned, as `#pragma pack(8)` leaves it).
#[repr(C)]
pub struct IttDomain {
    pub flags: c_int,
    pub name_a: *const c_char,
    pub name_w: *const c_void,
    pub extra1: c_int,
    /// Ours: the chained collector's domain for this one.
    pub extra2: AtomicPtr<c_void>,
    pub next: *mut IttDomain,
}

/// `__itt_string_handle`.
#[repr(C)]
pub struct IttStringHandle {
    pub str_a: *const c_char,
    pub str_w: *const c_void,
    pub extra1: c_int,
    /// Ours: the chained collector's handle for this one.
    pub extra2: AtomicPtr<c_void>,
    pub next: *mut IttStringHandle,
}

/// `__itt_id`, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IttId {
    pub d1: u64,
    pub d2: u64,
    pub d3: u64,
}

#[repr(C)]
pub struct ApiInfo {
    pub name: *const c_char,
    pub func_ptr: *mut *mut c_void,
    pub init_func: *mut c_void,
    pub null_func: *mut c_void,
    pub group: c_int,
}

/// The head of `__itt_global` up to the fields a collector uses.
#[repr(C)]
pub struct IttGlobal {
    pub magic: [u8; 8],
    pub version_major: core::ffi::c_ulong,
    pub version_minor: core::ffi::c_ulong,
    pub version_build: core::ffi::c_ulong,
    pub api_initialized: core::ffi::c_long,
    pub mutex_initialized: core::ffi::c_long,
    pub atomic_counter: core::ffi::c_long,
    pub mutex: libc::pthread_mutex_t,
    pub lib: *mut c_void,
    pub error_handler: *mut c_void,
    pub dll_path_ptr: *mut *const c_char,
    pub api_list_ptr: *mut ApiInfo,
    pub next: *mut IttGlobal,
    /// thread, domain and string lists, state, counters…: zero in our shadow copy.
    pub rest: [usize; 8],
}
