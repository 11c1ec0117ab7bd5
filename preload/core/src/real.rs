//! The next definition of each hooked symbol ("the real function"), resolved on first use: hooks
//! can run before our constructor, so nothing here may depend on it. Also glibc's own `dlsym`,
//! which our lookups by handle use: through the library's `dlsym` hook, a lookup of a wrapped
//! driver symbol would hand back our wrapper as its own "real" function.

use core::ffi::{CStr, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

/// A lazily resolved function address.
pub struct Real {
    addr: AtomicUsize,
    name: &'static CStr,
    /// Libraries to search by handle when `RTLD_NEXT` finds nothing: a library loaded
    /// `RTLD_LOCAL` (libcudart under a Python extension) is invisible to `RTLD_NEXT`.
    libraries: &'static [&'static CStr],
}

pub const CUDA_RUNTIME: &[&CStr] =
    &[c"libcudart.so.13", c"libcudart.so.12", c"libcudart.so.11.0", c"libcudart.so"];
pub const CUDA_DRIVER: &[&CStr] = &[c"libcuda.so.1", c"libcuda.so"];
pub const NCCL: &[&CStr] = &[c"libnccl.so.2", c"libnccl.so"];
pub const CUPTI: &[&CStr] = &[c"libcupti.so.13", c"libcupti.so.12", c"libcupti.so"];

impl Real {
    pub const fn new(name: &'static CStr) -> Real {
        Real { addr: AtomicUsize::new(0), name, libraries: &[] }
    }

    pub const fn in_libraries(name: &'static CStr, libraries: &'static [&'static CStr]) -> Real {
        Real { addr: AtomicUsize::new(0), name, libraries }
    }

    pub fn name(&self) -> &'static CStr {
        self.name
    }

    /// Adopts an address another lookup path found (dlsym on a handle, cuGetProcAddress),
    /// unless one is known already.
    pub fn offer(&self, addr: usize) {
        let _ = self.addr.compare_exchange(0, addr, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The address, or `None` when no later object defines the symbol (the hook then fails the
    /// call with ENOSYS instead of crashing).
    #[inline(always)]
    pub fn get(&self) -> Option<usize> {
        match self.addr.load(Ordering::Relaxed) {
            0 => self.resolve(),
            addr => Some(addr),
        }
    }

    #[cold]
    fn resolve(&self) -> Option<usize> {
        // Safety: dlsym with RTLD_NEXT and a NUL-terminated name has no other preconditions. A
        // benign race: two threads may both resolve and store the same address.
        let mut addr = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        // Lookups by handle go to glibc's dlsym directly (see the module comment).
        for library in self.libraries {
            if addr != 0 {
                break;
            }
            // Safety: RTLD_NOLOAD only finds an already loaded library; the extra reference
            // it takes is dropped again right away.
            unsafe {
                let handle = libc::dlopen(library.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
                if !handle.is_null() {
                    addr = glibc_dlsym(handle, self.name.as_ptr()) as usize;
                    libc::dlclose(handle);
                }
            }
        }
        if addr == 0 {
            return None;
        }
        self.addr.store(addr, Ordering::Relaxed);
        Some(addr)
    }
}

/// Casts a resolved address to the hook's function-pointer type.
///
/// # Safety
/// `F` must be the C signature of the symbol the address was resolved for.
#[inline(always)]
pub unsafe fn as_fn<F: Copy>(addr: usize) -> F {
    debug_assert_eq!(core::mem::size_of::<F>(), core::mem::size_of::<*const c_void>());
    // Safety: guaranteed by the caller; function pointers and usize have the same size here.
    unsafe { core::mem::transmute_copy::<usize, F>(&addr) }
}

/// glibc's own `dlsym` (found with `dlvsym`, which the library does not hook); a stand-in that
/// finds nothing when no version of it is found. `extern "C"` because the `dlsym` trampoline
/// calls it by symbol.
pub extern "C" fn real_dlsym() -> usize {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    let known = REAL.load(Ordering::Relaxed);
    if known != 0 {
        return known;
    }
    let mut addr = 0;
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
        // Safety: dlvsym with RTLD_NEXT and NUL-terminated strings.
        addr = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) } as usize;
        if addr != 0 {
            break;
        }
    }
    if addr == 0 {
        return dlsym_unavailable as *const () as usize;
    }
    REAL.store(addr, Ordering::Relaxed);
    addr
}

extern "C" fn dlsym_unavailable(_handle: *mut c_void, _name: *const core::ffi::c_char) -> *mut c_void {
    core::ptr::null_mut()
}

/// glibc's `dlsym`, bypassing the library's hook (for our own lookups by handle).
///
/// # Safety
/// As for `dlsym`: `handle` is a live handle from `dlopen` (or a pseudo-handle) and `name` a
/// NUL-terminated string.
pub unsafe fn glibc_dlsym(handle: *mut c_void, name: *const core::ffi::c_char) -> *mut c_void {
    type Dlsym = unsafe extern "C" fn(*mut c_void, *const core::ffi::c_char) -> *mut c_void;
    // Safety: real_dlsym returns glibc's dlsym (or a stand-in with the same prototype).
    unsafe { as_fn::<Dlsym>(real_dlsym())(handle, name) }
}

/// A `&'static CStr` from a NUL-terminated literal, checked at compile time.
// Evaluated in the initializers of statics only, so a bad name fails the build, never a process.
#[allow(clippy::panic)]
pub const fn cstr(bytes: &'static [u8]) -> &'static CStr {
    match CStr::from_bytes_with_nul(bytes) {
        Ok(name) => name,
        Err(_) => panic!("symbol name must end with exactly one NUL"),
    }
}
