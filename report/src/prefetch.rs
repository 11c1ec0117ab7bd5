//! A cache hint for lookups whose addresses are known ahead: tables of a run's paths and
//! strings are larger than the caches, and a lookup per event waits on memory unless the line
//! was asked for a few events before.

/// Asks the cache for the line at `p` without waiting for it.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // Safety: a prefetch never faults, whatever the address, and reads nothing the program sees.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
