//! The next definition of each hooked symbol ("the real function"), resolved on first use: hooks
//! can run before our constructor, so nothing here may depend on it.

use core::ffi::{CStr, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

/// A lazily resolved function address.
pub struct Real {
    addr: AtomicUsize,
    name: &'static CStr,
}

impl Real {
    pub const fn new(name: &'static CStr) -> Real {
        Real { addr: AtomicUsize::new(0), name }
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
        let addr = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
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
