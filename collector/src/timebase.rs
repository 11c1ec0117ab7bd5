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
    /// `ns_per_tick` in 64.64 fixed point: every record's two stamps are converted, and the
    /// float <-> i128 conversions this replaces were a third of the collector's own CPU at
    /// 1 M records/s (`perf record -e cpu-clock`: `__floattidf`, `__fixdfti`). 64 fraction bits
    /// keep an hour of 3 GHz ticks exact to the nanosecond (32 would drift by ~1 µs).
    ns_per_tick_q64: u128,
}

/// `ticks` × a 64.64 fixed-point factor, saturating.
fn scale_q64(ticks: u64, factor_q64: u128) -> u64 {
    // Whole and fraction parts multiplied separately: neither partial product can overflow
    // a u128, and only the sum can exceed u64 (saturated).
    let whole = (factor_q64 >> 64) as u64;
    let fraction = factor_q64 as u64;
    let from_fraction = (u128::from(ticks) * u128::from(fraction)) >> 64;
    let from_whole = u128::from(ticks) * u128::from(whole);
    u64::try_from(from_whole + from_fraction).unwrap_or(u64::MAX)
}

impl Timebase {
    pub fn new(use_tsc: bool) -> Timebase {
        if !use_tsc {
            return Timebase {
                source: CLOCK_MONOTONIC,
                first: (0, 0),
                latest: (0, 0),
                ns_per_tick: 1.0,
                ns_per_tick_q64: 1 << 64,
            };
        }
        let first = anchor();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let latest = anchor();
        let mut timebase =
            Timebase { source: CLOCK_TSC, first, latest, ns_per_tick: 1.0, ns_per_tick_q64: 1 << 64 };
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
            // A float to integer cast saturates; any real TSC's slope is far inside the range.
            self.ns_per_tick_q64 = (self.ns_per_tick * 18_446_744_073_709_551_616.0).round() as u128;
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
        let (anchor_ticks, anchor_ns) = self.latest;
        if ticks >= anchor_ticks {
            anchor_ns.saturating_add(scale_q64(ticks - anchor_ticks, self.ns_per_tick_q64))
        } else {
            anchor_ns.saturating_sub(scale_q64(anchor_ticks - ticks, self.ns_per_tick_q64))
        }
    }

    pub fn duration_ns(&self, ticks: u64) -> u64 {
        if self.source != CLOCK_TSC {
            return ticks;
        }
        scale_q64(ticks, self.ns_per_tick_q64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3 GHz TSC timebase (3 ticks per ns) anchored at `latest` (ticks, ns).
    fn three_ghz(latest: (u64, u64)) -> Timebase {
        let mut timebase = Timebase {
            source: CLOCK_TSC,
            first: (latest.0 - 3_000_000_000, latest.1 - 1_000_000_000),
            latest,
            ns_per_tick: 1.0,
            ns_per_tick_q64: 1 << 64,
        };
        timebase.update_slope();
        timebase
    }

    #[test]
    fn ticks_convert_on_both_sides_of_the_anchor_within_a_nanosecond() {
        let timebase = three_ghz((9_000_000_000, 5_000_000_000));
        let cases = [
            (9_000_000_000u64, 5_000_000_000u64),
            (9_000_000_300, 5_000_000_100),
            (8_999_999_700, 4_999_999_900),
        ];
        for (ticks, want) in cases {
            assert!(timebase.to_ns(ticks).abs_diff(want) <= 1, "{ticks} -> {}", timebase.to_ns(ticks));
        }
        // An hour after the anchor, the fixed-point slope is still exact to the nanosecond.
        let hour = 3_600_000_000_000u64;
        assert!(timebase.to_ns(9_000_000_000 + 3 * hour).abs_diff(5_000_000_000 + hour) <= 1);
        assert!(timebase.duration_ns(3_000).abs_diff(1_000) <= 1);
    }

    #[test]
    fn conversions_saturate_instead_of_wrapping() {
        let timebase = three_ghz((9_000_000_000, 5_000_000_000));
        assert!(timebase.to_ns(0).abs_diff(2_000_000_000) <= 1);
        let early = three_ghz((3_000_000_000, 1_000_000_000));
        // Ticks long before the anchor's ns zero clamp to 0.
        let mut before_zero = early;
        before_zero.latest = (u64::MAX / 2, 10);
        assert_eq!(before_zero.to_ns(0), 0);
        assert_eq!(
            before_zero.to_ns(u64::MAX),
            10 + scale_q64(u64::MAX - u64::MAX / 2, before_zero.ns_per_tick_q64)
        );
        assert_eq!(scale_q64(u64::MAX, u128::MAX), u64::MAX);
        assert_eq!(scale_q64(u64::MAX, 1 << 64), u64::MAX);
    }
}
