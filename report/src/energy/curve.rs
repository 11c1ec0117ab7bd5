//! A device's cumulative energy as a function of time, from its samples.
//!
//! **Knots.** The energy is known at the counter's updates ("knots"): a sample whose value
//! differs from the one before. A counter sampled faster than it updates (NVML's, about every
//! 100 ms) repeats values; its update happened between the last sample that showed the old
//! value and the first that shows the new one, and the knot is put halfway (timing
//! uncertainty: half that gap). A counter read more sparsely than it updates (the collector
//! spaces reads of a counter that is expensive to read, ~1 s apart on an H200) never repeats a
//! value: each reading's value dates from an update in the [`COUNTER_UPDATE_NS`] before it, so
//! its knot is put half that before the reading, with half of it as timing uncertainty. A
//! source at least as fresh as its sampling (RAPL, integrated power) has a knot at every
//! sample. Between knots energy is interpolated linearly; before the first and after the last
//! knot it is extrapolated with the nearest segment's power.
//!
//! **Uncertainty of E(t).** Inside a segment of duration Δ and mean power P: ¼·Δ·|ΔP| (the
//! largest error of linear interpolation when power steps by ΔP somewhere in the segment; ΔP is
//! the largest difference to the neighbouring segments' mean powers) plus P × the knots' timing
//! uncertainty; outside the knots, the extrapolated time × ΔP of the nearest segment, plus the
//! same timing term. An interval [a, b] has E(b) − E(a) ± (u(a) + u(b)), or for a short
//! interval (b − a) × ΔP when that is smaller.
//!
//! Units: times in ns, energies in µJ (so powers are µJ/ns = kW).

/// How often an energy counter is taken to update when its samples are too sparse to show it:
/// NVML's moves about every 100 ms (seen on an H200, tests/gpu/nvml_cost.py).
pub const COUNTER_UPDATE_NS: f64 = 100_000_000.0;

/// A point where the energy is known.
struct Knot {
    t: f64,
    e: f64,
    /// Timing uncertainty of `t`, ns.
    h: f64,
}

/// Piecewise-linear cumulative energy through the knots.
pub struct EnergyCurve {
    knots: Vec<Knot>,
    /// Mean power of each segment (knots[i]..knots[i+1]), µJ/ns.
    power: Vec<f64>,
}

impl EnergyCurve {
    /// From a device's samples in time order; `None` when they do not give two knots.
    pub fn new(samples: &[(u64, u64)], counter: bool) -> Option<EnergyCurve> {
        let mut knots: Vec<Knot> = Vec::new();
        if !counter {
            // A source at least as fresh as its sampling (RAPL, integrated power): every sample
            // is a knot.
            for &(t, e) in samples {
                if knots.last().is_none_or(|k| (t as f64) > k.t) {
                    let e = knots.last().map_or(e as f64, |k| k.e.max(e as f64));
                    knots.push(Knot { t: t as f64, e, h: 0.0 });
                }
            }
        }
        let repeats = samples.windows(2).any(|w| w[0].1 == w[1].1);
        if counter && !repeats {
            // Sparse readings: every one changed, each dates from an update within
            // COUNTER_UPDATE_NS before it.
            let half = COUNTER_UPDATE_NS / 2.0;
            for &(t, e) in samples {
                let t = t as f64 - half;
                if knots.last().is_none_or(|k| t > k.t && e as f64 >= k.e) {
                    knots.push(Knot { t, e: e as f64, h: half });
                }
            }
        }
        let mut previous: Option<(u64, u64, bool)> = None; // (time, value, that sample changed)
        for &(t, e) in samples.iter().filter(|_| counter && repeats) {
            match previous {
                None => previous = Some((t, e, false)),
                Some((pt, pe, pchanged)) => {
                    if t <= pt {
                        continue;
                    }
                    let changed = e != pe;
                    if changed && e > pe {
                        let knot = if pchanged {
                            Knot { t: t as f64, e: e as f64, h: 0.0 }
                        } else {
                            let gap = (t - pt) as f64;
                            Knot { t: pt as f64 + gap / 2.0, e: e as f64, h: gap / 2.0 }
                        };
                        knots.push(knot);
                    }
                    previous = Some((t, e.max(pe), changed));
                }
            }
        }
        if counter
            && repeats
            && knots.len() >= 2
            && let Some(&(t0, e0)) = samples.first()
        {
            // The first reading's value dates from the update before it: with updates every
            // `period`, one period before the first change seen (and no later than the reading).
            let mut gaps: Vec<f64> = knots.windows(2).map(|w| w[1].t - w[0].t).collect();
            gaps.sort_by(f64::total_cmp);
            let period = gaps[gaps.len() / 2];
            let t = (knots[0].t - period).min(t0 as f64);
            if t < knots[0].t && (e0 as f64) < knots[0].e {
                knots.insert(0, Knot { t, e: e0 as f64, h: knots[0].h.max(1.0) });
            }
        }
        if knots.len() < 2 {
            return None;
        }
        let power = knots.windows(2).map(|w| (w[1].e - w[0].e) / (w[1].t - w[0].t).max(1.0)).collect();
        Some(EnergyCurve { knots, power })
    }

    /// The segment holding `t` (clamped to the first/last).
    fn segment(&self, t: f64) -> usize {
        let after = self.knots.partition_point(|k| k.t <= t);
        after.saturating_sub(1).min(self.power.len() - 1)
    }

    /// How much power changes around segment `j`: the largest difference between its mean
    /// power and its neighbours', µJ/ns.
    fn power_change(&self, j: usize) -> f64 {
        let p = self.power[j];
        let prev = if j > 0 { (p - self.power[j - 1]).abs() } else { 0.0 };
        let next = if j + 1 < self.power.len() { (p - self.power[j + 1]).abs() } else { 0.0 };
        prev.max(next)
    }

    /// Uncertainty of the energy of [a, b]: the two ends' uncertainties, or for a short
    /// interval (b − a) × the power change around it, whichever is smaller.
    pub fn interval_uncertainty(&self, a: f64, b: f64, ua: f64, ub: f64) -> f64 {
        let short = (b - a) * self.power_change(self.segment(a)).max(self.power_change(self.segment(b)));
        (ua + ub).min(short.max(0.0))
    }

    /// Cumulative energy at `t`, µJ, and its uncertainty.
    pub fn at(&self, t: f64) -> (f64, f64) {
        let first = &self.knots[0];
        let last = &self.knots[self.knots.len() - 1];
        if t <= first.t {
            let p = self.power[0];
            let extra = first.t - t;
            return (first.e - p * extra, extra * self.power_change(0) + p * first.h);
        }
        if t >= last.t {
            let j = self.power.len() - 1;
            let p = self.power[j];
            let extra = t - last.t;
            return (last.e + p * extra, extra * self.power_change(j) + p * last.h);
        }
        let j = self.segment(t);
        let (a, b) = (&self.knots[j], &self.knots[j + 1]);
        let p = self.power[j];
        let e = a.e + p * (t - a.t);
        let interp = (b.t - a.t) / 4.0 * self.power_change(j);
        // At a knot the value is exact but its time is not.
        (e, interp + p * a.h.max(b.h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples of a constant power `watts` every `step` ns over `span` ns, as a counter
    /// updated every `update` ns would report them (µJ).
    fn counter_samples(watts: u64, step: u64, update: u64, span: u64, phase: u64) -> Vec<(u64, u64)> {
        (0..=span / step)
            .map(|i| {
                let t = i * step + phase;
                (t, (t / update) * update * watts / 1000)
            })
            .collect()
    }

    #[test]
    fn counter_knots_interpolate() {
        // 100 W constant (0.1 µJ/ns), counter updated every 100 ms, sampled every 10 ms.
        let samples = counter_samples(100, 10_000_000, 100_000_000, 1_000_000_000, 3_000_000);
        let curve = EnergyCurve::new(&samples, true).unwrap();
        let (a, _) = curve.at(200_000_000.0);
        let (b, u) = curve.at(700_000_000.0);
        let joules = (b - a) / 1e6;
        assert!((joules - 50.0).abs() < 0.6, "{joules}");
        assert!(u > 0.0);
    }

    #[test]
    fn sparse_counter_readings_date_from_the_update_before_them() {
        // 100 W, counter updated every 100 ms, read every 800 ms (a costly counter): each
        // reading changed, so no repeat shows the update times.
        let samples = counter_samples(100, 800_000_000, 100_000_000, 4_000_000_000, 30_000_000);
        let curve = EnergyCurve::new(&samples, true).unwrap();
        // Readings are 0–100 ms stale: knots 50 ms before them make E(t) unbiased; the error
        // left is within the stated uncertainty.
        for t in [500_000_000.0, 1_700_000_000.0, 3_900_000_000.0] {
            let (e, u) = curve.at(t);
            let truth = 0.1 * t;
            assert!((e - truth).abs() <= u + 1.0, "t {t}: {e} vs {truth} ± {u}");
            assert!(u <= 0.1 * COUNTER_UPDATE_NS, "uncertainty {u}");
        }
    }

    #[test]
    fn direct_samples_are_exact_knots() {
        // RAPL-like: every sample is a knot, with no timing uncertainty; constant power makes
        // the interpolation exact and the uncertainty zero.
        let samples: Vec<(u64, u64)> = (0..=10u64).map(|i| (i * 1_000, i * 500)).collect();
        let curve = EnergyCurve::new(&samples, false).unwrap();
        assert_eq!(curve.at(2_500.0), (1_250.0, 0.0));
        // Outside the knots: extrapolated with the nearest segment's power.
        assert_eq!(curve.at(12_000.0).0, 6_000.0);
        assert_eq!(curve.at(-1_000.0).0, -500.0);
    }

    #[test]
    fn a_power_step_makes_interpolation_uncertain() {
        // 1 µJ/ns, then 3 µJ/ns from t = 2000: the middle segment's power differs from its
        // neighbours, so E(t) inside it is uncertain by ¼·Δ·ΔP.
        let samples = [(0, 0), (1_000, 1_000), (2_000, 2_000), (3_000, 5_000), (4_000, 8_000)];
        let curve = EnergyCurve::new(&samples, false).unwrap();
        let (e, u) = curve.at(2_500.0);
        assert_eq!(e, 3_500.0);
        assert_eq!(u, 1_000.0 / 4.0 * 2.0);
        // An interval shorter than its ends' uncertainties: length × ΔP instead.
        assert_eq!(curve.interval_uncertainty(2_400.0, 2_500.0, u, u), 100.0 * 2.0);
    }

    #[test]
    fn too_few_knots_give_no_curve() {
        assert!(EnergyCurve::new(&[], false).is_none());
        assert!(EnergyCurve::new(&[(5, 10)], false).is_none());
        // A counter that never changes has no knot at all.
        assert!(EnergyCurve::new(&[(0, 7), (10, 7), (20, 7)], true).is_none());
    }

    #[test]
    fn counter_energy_never_decreases() {
        // A counter read that goes back (a wrap or a glitch) is not a knot.
        let samples = [(0, 0), (100, 100), (200, 50), (300, 300)];
        let curve = EnergyCurve::new(&samples, false).unwrap();
        assert!(curve.at(200.0).0 >= curve.at(100.0).0);
    }
}
