//! The next definition of each hooked symbol ("the real function"), resolved on first use: hooks
//! can run before our constructor, so nothing here may depend on it.

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
        // Lookups by handle go to glibc's dlsym directly: through our own dlsym hook, a lookup
        // of a wrapped driver symbol would hand back our wrapper as its own "real" function.
        for library in self.libraries {
            if addr != 0 {
                break;
            }
            // Safety: RTLD_NOLOAD only finds an already loaded library; the extra reference
            // it takes is dropped again right away.
            unsafe {
                let handle = libc::dlopen(library.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
                if !handle.is_null() {
                    addr = crate::exports::glibc_dlsym(handle, self.name.as_ptr()) as usize;
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

/// A `&'static CStr` from a NUL-terminated literal, checked at compile time.
pub const fn cstr(bytes: &'static [u8]) -> &'static CStr {
    match CStr::from_bytes_with_nul(bytes) {
        Ok(name) => name,
        Err(_) => panic!("symbol name must end with exactly one NUL"),
    }
}
