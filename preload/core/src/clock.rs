//! The timestamp source of ring records. The collector chooses it (the TSC where it is invariant,
//! else CLOCK_MONOTONIC) and converts to CLOCK_MONOTONIC ns on the way into `run.bin`; two TSC
//! reads cost ~20 ns here against ~47 ns for two vDSO clock reads, which is what makes the
//! per-call budget reachable.
//!
//! CLOCK_MONOTONIC is read through glibc's own `clock_gettime` (found with `dlvsym`, so never
//! through our hook), which uses the vDSO where there is one: rustix's vDSO wrapper asserts
//! (panics) when the vDSO lacks the symbol or the call fails, and nothing in a hook may panic.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static USE_TSC: AtomicBool = AtomicBool::new(false);

/// Makes [`now`] read the TSC (only honoured on x86_64).
pub fn set_use_tsc(on: bool) {
    USE_TSC.store(on && cfg!(target_arch = "x86_64"), Ordering::Relaxed);
}

/// A ring timestamp: TSC ticks or CLOCK_MONOTONIC ns, as the collector chose.
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

type ClockGettime = unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int;

/// glibc's `clock_gettime`; 0 until resolved.
static GLIBC_CLOCK_GETTIME: AtomicUsize = AtomicUsize::new(0);

/// CLOCK_MONOTONIC in ns (0 if no clock answers, which Linux never does).
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let ok = match GLIBC_CLOCK_GETTIME.load(Ordering::Relaxed) {
        0 => read_without_glibc(&mut ts),
        // Safety: only `resolve` stores here, the address of glibc's clock_gettime.
        f => unsafe { core::mem::transmute::<usize, ClockGettime>(f)(libc::CLOCK_MONOTONIC, &mut ts) == 0 },
    };
    if !ok {
        return 0;
    }
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// CLOCK_MONOTONIC_COARSE in ns: a memory read in the vDSO, a few ns, for decisions that need
/// only about a millisecond of precision (when to try joining again).
#[inline]
pub fn coarse_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let ok = match GLIBC_CLOCK_GETTIME.load(Ordering::Relaxed) {
        0 => read_without_glibc(&mut ts),
        // Safety: only `resolve` stores here, the address of glibc's clock_gettime.
        f => unsafe {
            core::mem::transmute::<usize, ClockGettime>(f)(libc::CLOCK_MONOTONIC_COARSE, &mut ts) == 0
        },
    };
    if !ok {
        return 0;
    }
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// First use: resolves glibc's `clock_gettime` for next time and reads the clock with the
/// system call meanwhile.
#[cold]
fn read_without_glibc(ts: &mut libc::timespec) -> bool {
    resolve();
    // Safety: a plain system call writing into `ts`.
    unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, ts as *mut libc::timespec) == 0 }
}

fn resolve() {
    for version in [c"GLIBC_2.17", c"GLIBC_2.2.5"] {
        // Safety: dlvsym (not hooked) with RTLD_NEXT and NUL-terminated strings; RTLD_NEXT from
        // this library finds the definition after ours, glibc's.
        let addr = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"clock_gettime".as_ptr(), version.as_ptr()) };
        if !addr.is_null() {
            GLIBC_CLOCK_GETTIME.store(addr as usize, Ordering::Relaxed);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_time_advances() {
        let a = super::monotonic_ns();
        let b = super::monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
