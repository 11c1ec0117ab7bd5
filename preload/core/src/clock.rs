//! The timestamp source of ring records. The collector chooses it (the TSC where it is invariant,
//! else CLOCK_MONOTONIC) and converts to CLOCK_MONOTONIC ns on the way into `run.bin`; two TSC
//! reads cost ~20 ns here against ~47 ns for two vDSO clock reads, which is what makes the
//! per-call budget reachable.

use core::sync::atomic::{AtomicBool, Ordering};

static USE_TSC: AtomicBool = AtomicBool::new(false);

pub fn set_use_tsc(on: bool) {
    USE_TSC.store(on && cfg!(target_arch = "x86_64"), Ordering::Relaxed);
}

#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if USE_TSC.load(Ordering::Relaxed) {
        // Safety: rdtsc has no preconditions; the collector only selects it on CPUs whose TSC is
        // invariant (constant_tsc + nonstop_tsc).
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    monotonic_ns()
}

/// CLOCK_MONOTONIC through the vDSO (rustix calls it directly, not through our hook).
#[inline]
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
