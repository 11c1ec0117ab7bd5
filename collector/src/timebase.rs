//! Converts producer timestamps to CLOCK_MONOTONIC ns. With the TSC, the collector keeps an
//! anchor pair (tsc, monotonic ns) that it refreshes as the run goes, and a slope measured from
//! the first anchor to the latest: the estimate only gets better with run length.

use mlprof_format::ring::{CLOCK_MONOTONIC, CLOCK_TSC};

pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: valid clock id and out pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether the TSC can stamp events across CPUs and processes: invariant, and trusted by the
/// kernel as its own clocksource.
pub fn tsc_usable() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let flags_ok = std::fs::read_to_string("/proc/cpuinfo")
        .map(|info| {
            info.lines().find(|l| l.starts_with("flags")).is_some_and(|l| {
                l.split_whitespace().any(|f| f == "constant_tsc")
                    && l.split_whitespace().any(|f| f == "nonstop_tsc")
            })
        })
        .unwrap_or(false);
    let kernel_uses_tsc =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .map(|s| s.trim() == "tsc")
            .unwrap_or(false);
    flags_ok && kernel_uses_tsc
}

#[cfg(target_arch = "x86_64")]
fn rdtsc() -> u64 {
    // Safety: rdtsc has no preconditions.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtsc() -> u64 {
    monotonic_ns()
}

/// One (tsc, monotonic) pair, taken where the two reads were closest together.
fn anchor() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..5 {
        let before = rdtsc();
        let mono = monotonic_ns();
        let after = rdtsc();
        let width = after.wrapping_sub(before);
        if width < best.0 {
            best = (width, before + width / 2, mono);
        }
    }
    (best.1, best.2)
}

pub struct Timebase {
    source: u32,
    first: (u64, u64),
    latest: (u64, u64),
    ns_per_tick: f64,
}

impl Timebase {
    pub fn new(use_tsc: bool) -> Timebase {
        if !use_tsc {
            return Timebase { source: CLOCK_MONOTONIC, first: (0, 0), latest: (0, 0), ns_per_tick: 1.0 };
        }
        let first = anchor();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let latest = anchor();
        let mut timebase = Timebase { source: CLOCK_TSC, first, latest, ns_per_tick: 1.0 };
        timebase.update_slope();
        timebase
    }

    pub fn source(&self) -> u32 {
        self.source
    }

    pub fn source_name(&self) -> &'static str {
        if self.source == CLOCK_TSC { "tsc" } else { "clock_monotonic" }
    }

    fn update_slope(&mut self) {
        let ticks = self.latest.0.saturating_sub(self.first.0);
        if ticks > 0 {
            self.ns_per_tick = self.latest.1.saturating_sub(self.first.1) as f64 / ticks as f64;
        }
    }

    /// Takes a new anchor (call every ~100 ms).
    pub fn refresh(&mut self) {
        if self.source == CLOCK_TSC {
            self.latest = anchor();
            self.update_slope();
        }
    }

    /// Now, in the ring's clock units (what producers stamp records with).
    pub fn now(&self) -> u64 {
        if self.source == CLOCK_TSC { rdtsc() } else { monotonic_ns() }
    }

    /// `ns` nanoseconds in the ring's clock units.
    pub fn ticks_for_ns(&self, ns: u64) -> u64 {
        if self.source != CLOCK_TSC || self.ns_per_tick <= 0.0 {
            return ns;
        }
        (ns as f64 / self.ns_per_tick) as u64
    }

    pub fn to_ns(&self, ticks: u64) -> u64 {
        if self.source != CLOCK_TSC {
            return ticks;
        }
        let delta = ticks as i128 - self.latest.0 as i128;
        let ns = self.latest.1 as i128 + (delta as f64 * self.ns_per_tick) as i128;
        ns.max(0) as u64
    }

    pub fn duration_ns(&self, ticks: u64) -> u64 {
        if self.source != CLOCK_TSC {
            return ticks;
        }
        (ticks as f64 * self.ns_per_tick) as u64
    }
}
