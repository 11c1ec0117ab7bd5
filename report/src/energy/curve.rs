//! A device's cumulative energy as a function of time, from its samples.
//!
//! **Knots.** The energy is known at the counter's updates ("knots"): a sample whose value
//! differs from the one before. A counter sampled faster than it updates (NVML's, about every
//! 100 ms) repeats values; its update happened between the last sample that showed the old
//! value and the first that shows the new one, and the knot is put halfway (timing
//! uncertainty: half that gap). A counter read more sparsely than it updates (the collector
//! spaces reads of a counter that is expensive to read, ~1 s apart on an H200; the median gap
//! between readings tells) cannot show when it updated: each reading's value dates from an
//! update in the [`COUNTER_UPDATE_NS`] before it, so its knot is put half that before the
//! reading, with half of it as timing uncertainty; a reading that repeats the one before (the
//! last one, taken at the end of the run just after a regular one) adds nothing. A
//! source at least as fresh as its sampling (RAPL, integrated power) has a knot at every
//! sample. Between knots energy is interpolated linearly; before the first and after the last
//! knot it is extrapolated with the nearest segment's power. Between sparse counter knots
//! (~1 s apart) the device's power readings, where it has them (instantaneous, every 100 ms),
//! shape the interpolation instead: the segment's energy, which the knots fix, is spread in
//! proportion to the readings' integral ([`EnergyCurve::shaped_by`]).
//!
//! **Uncertainty of E(t).** Inside a segment of duration Δ and mean power P: ¼·Δ·|ΔP| (the
//! largest error of linear interpolation when power steps by ΔP somewhere in the segment; ΔP is
//! the largest difference to the neighbouring segments' mean powers) plus P × the knots' timing
//! uncertainty; outside the knots, the extrapolated time × ΔP of the nearest segment, plus the
//! same timing term. In a segment shaped by power readings the first term is instead what
//! joining the readings by straight lines can miss: ¼ · gap · power change, summed over the
//! segment's gaps between readings, in the segment's scale. An interval [a, b] has
//! E(b) − E(a) ± (u(a) + u(b)), or for a short interval (b − a) × ΔP when that is smaller.
//!
//! Units: times in ns, energies in µJ (so powers are µJ/ns = kW).

/// How often an energy counter is taken to update when its samples are too sparse to show it:
/// NVML's moves about every 100 ms (seen on an H200, tests/gpu/nvml_cost.py).
pub(crate) const COUNTER_UPDATE_NS: f64 = 100_000_000.0;

/// A point where the energy is known.
struct Knot {
    t: f64,
    e: f64,
    /// Timing uncertainty of `t`, ns.
    h: f64,
}

/// Piecewise-linear cumulative energy through the knots.
pub(crate) struct EnergyCurve {
    knots: Vec<Knot>,
    /// Mean power of each segment (`knots[i]..knots[i+1]`), µJ/ns.
    power: Vec<f64>,
    /// The knots come from a counter read more sparsely than it updates.
    sparse: bool,
    /// Power readings that shape the energy between sparse knots, and per segment what they
    /// give (computed once: every span end asks).
    shape: Option<Shaped>,
}

/// The readings that shape a curve, with each segment's scale (the knots' energy per unit of
/// the readings' integral; `None` where the readings are flat at zero) and resolution (what
/// joining its readings by straight lines can miss, µJ, before scaling).
struct Shaped {
    readings: PowerShape,
    scale: Vec<Option<f64>>,
    resolution: Vec<f64>,
}

/// The median time between consecutive `times` (in order), ns; `None` with fewer than two.
fn median_gap(times: impl Iterator<Item = f64>) -> Option<f64> {
    let times: Vec<f64> = times.collect();
    let mut gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_by(f64::total_cmp);
    gaps.get(gaps.len() / 2).copied()
}

/// The mean power of each segment between consecutive knots, µJ/ns.
fn segment_powers(knots: &[Knot]) -> Vec<f64> {
    knots.windows(2).map(|w| (w[1].e - w[0].e) / (w[1].t - w[0].t).max(1.0)).collect()
}

/// Knots of a source at least as fresh as its sampling (RAPL, integrated power): every sample.
fn direct_knots(samples: &[(u64, u64)]) -> Vec<Knot> {
    let mut knots: Vec<Knot> = Vec::new();
    for &(t, e) in samples {
        if knots.last().is_none_or(|k| (t as f64) > k.t) {
            let e = knots.last().map_or(e as f64, |k| k.e.max(e as f64));
            knots.push(Knot { t: t as f64, e, h: 0.0 });
        }
    }
    knots
}

/// Knots of a counter read more sparsely than it updates: each reading dates from an update
/// within COUNTER_UPDATE_NS before it; a repeated value adds nothing.
fn sparse_knots(samples: &[(u64, u64)]) -> Vec<Knot> {
    let half = COUNTER_UPDATE_NS / 2.0;
    let mut knots: Vec<Knot> = Vec::new();
    for &(t, e) in samples {
        let t = t as f64 - half;
        if knots.last().is_none_or(|k| t > k.t && e as f64 > k.e) {
            knots.push(Knot { t, e: e as f64, h: half });
        }
    }
    knots
}

/// Knots of a counter read faster than it updates: each change, halfway between the readings
/// around it; the first reading's value one update period before the first change.
fn dense_knots(samples: &[(u64, u64)]) -> Vec<Knot> {
    let mut knots: Vec<Knot> = Vec::new();
    let mut previous: Option<(u64, u64, bool)> = None; // (time, value, that sample changed)
    for &(t, e) in samples {
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
    if let (Some(period), Some(&(t0, e0))) = (median_gap(knots.iter().map(|k| k.t)), samples.first()) {
        // The first reading's value dates from the update before it: with updates every
        // `period`, one period before the first change seen (and no later than the reading).
        let t = (knots[0].t - period).min(t0 as f64);
        if t < knots[0].t && (e0 as f64) < knots[0].e {
            knots.insert(0, Knot { t, e: e0 as f64, h: knots[0].h.max(1.0) });
        }
    }
    knots
}

/// Power readings joined linearly and integrated: the shape of the energy in time.
struct PowerShape {
    /// Reading times, ns.
    t: Vec<f64>,
    /// Readings, µJ/ns.
    p: Vec<f64>,
    /// Integral from the first reading to each, µJ.
    w: Vec<f64>,
}

impl PowerShape {
    /// From readings in mW in time order; `None` with fewer than two.
    fn new(readings: &[(u64, u32)]) -> Option<PowerShape> {
        let (mut t, mut p, mut w) = (Vec::new(), Vec::new(), Vec::new());
        for &(time, mw) in readings {
            let (time, power) = (time as f64, mw as f64 * 1e-6);
            match (t.last(), p.last(), w.last()) {
                (Some(&t0), Some(&p0), Some(&w0)) if time > t0 => {
                    w.push(w0 + (p0 + power) / 2.0 * (time - t0));
                }
                (None, _, _) => w.push(0.0),
                _ => continue,
            }
            t.push(time);
            p.push(power);
        }
        (t.len() >= 2).then_some(PowerShape { t, p, w })
    }

    /// How far the integral over [from, to] can be off for joining the readings by straight
    /// lines: ¼ · gap · power change, summed over the gaps between readings that it touches,
    /// µJ (a step of power inside a gap is the worst case of each).
    fn resolution(&self, from: f64, to: f64) -> f64 {
        let first = self.t.partition_point(|&t| t <= from).saturating_sub(1);
        let end = self.t.partition_point(|&t| t < to).min(self.t.len() - 1);
        (first..end).map(|k| (self.t[k + 1] - self.t[k]) / 4.0 * (self.p[k + 1] - self.p[k]).abs()).sum()
    }

    /// The integral of the readings from the first to `time` (held flat outside them), µJ.
    fn integral(&self, time: f64) -> f64 {
        let after = self.t.partition_point(|&t| t <= time);
        if after == 0 {
            return self.p[0] * (time - self.t[0]);
        }
        let i = after - 1;
        if i + 1 == self.t.len() {
            return self.w[i] + self.p[i] * (time - self.t[i]);
        }
        let share = (time - self.t[i]) / (self.t[i + 1] - self.t[i]);
        let p_at = self.p[i] + (self.p[i + 1] - self.p[i]) * share;
        self.w[i] + (self.p[i] + p_at) / 2.0 * (time - self.t[i])
    }
}

impl EnergyCurve {
    /// From a device's samples in time order; `None` when they do not give two knots.
    pub(crate) fn new(samples: &[(u64, u64)], counter: bool) -> Option<EnergyCurve> {
        let sparse = counter
            && median_gap(samples.iter().map(|&(t, _)| t as f64)).is_some_and(|gap| gap >= COUNTER_UPDATE_NS);
        let knots = match (counter, sparse) {
            (false, _) => direct_knots(samples),
            (true, true) => sparse_knots(samples),
            (true, false) => dense_knots(samples),
        };
        if knots.len() < 2 {
            return None;
        }
        Some(EnergyCurve { power: segment_powers(&knots), knots, sparse, shape: None })
    }

    /// Shapes the energy between sparse counter knots by the device's power readings (time,
    /// mW), in time order. Dense knots (or none from a counter) already follow the energy
    /// closely: they are left alone.
    pub(crate) fn shaped_by(mut self, readings: &[(u64, u32)]) -> EnergyCurve {
        if !self.sparse {
            return self;
        }
        // Readings sparser than the counter's own updates (slow metrics spaced out because
        // they are costly) would blur more than they shape.
        if median_gap(readings.iter().map(|&(t, _)| t as f64)).is_none_or(|gap| gap > 1.5 * COUNTER_UPDATE_NS)
        {
            return self;
        }
        let Some(readings) = PowerShape::new(readings) else { return self };
        self.date_updates(&readings);
        let (mut scale, mut resolution) = (Vec::new(), Vec::new());
        for w in self.knots.windows(2) {
            let (wa, wb) = (readings.integral(w[0].t), readings.integral(w[1].t));
            scale.push((wb - wa > 0.0).then(|| (w[1].e - w[0].e) / (wb - wa)));
            resolution.push(readings.resolution(w[0].t, w[1].t));
        }
        self.shape = Some(Shaped { readings, scale, resolution });
        self
    }

    /// Dates each sparse reading's update from the power readings. The counter updates every
    /// COUNTER_UPDATE_NS on a fixed phase φ, so a reading at `t` holds the energy up to
    /// `t - ((t - φ) mod U)`; the φ (1 ms steps) whose updates make the counter's increments
    /// best match the readings' integral (scaled by a least-squares factor: the two sensors
    /// may differ by a few percent) dates them all, to within a few ms instead of ±50 ms.
    fn date_updates(&mut self, shape: &PowerShape) {
        if self.knots.len() < 3 {
            return;
        }
        let update = COUNTER_UPDATE_NS;
        let read_times: Vec<f64> = self.knots.iter().map(|k| k.t + update / 2.0).collect();
        let dated = |phase: f64| -> Vec<f64> {
            read_times.iter().map(|&t| t - (t - phase).rem_euclid(update)).collect()
        };
        let misfit = |times: &[f64]| -> f64 {
            let pairs: Vec<(f64, f64)> = self
                .knots
                .windows(2)
                .zip(times.windows(2))
                .map(|(k, t)| (k[1].e - k[0].e, shape.integral(t[1]) - shape.integral(t[0])))
                .collect();
            let (vw, ww) = pairs.iter().fold((0.0, 0.0), |(vw, ww), &(v, w)| (vw + v * w, ww + w * w));
            let scale = if ww > 0.0 { vw / ww } else { 1.0 };
            pairs.iter().map(|&(v, w)| (v - scale * w).powi(2)).sum()
        };
        let step = 1_000_000.0;
        let best = (0..(update / step) as u32)
            .map(|i| i as f64 * step)
            .map(|phase| (misfit(&dated(phase)), phase))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((_, phase)) = best else { return };
        let times = dated(phase);
        if times.windows(2).any(|w| w[1] <= w[0]) {
            return;
        }
        for (knot, t) in self.knots.iter_mut().zip(times) {
            knot.t = t;
            knot.h = step;
        }
        self.power = segment_powers(&self.knots);
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
    /// interval what is known of the power inside it, whichever is smaller: (b − a) × the
    /// change of mean power around its segments, or where power readings shape the segment,
    /// what joining the readings inside [a, b] by straight lines can miss. (The segments' mean
    /// powers say nothing of the power inside a shaped segment: with one segment their change
    /// is zero, and a call's energy came out ± 0.)
    pub(crate) fn interval_uncertainty(&self, a: f64, b: f64, ua: f64, ub: f64) -> f64 {
        let j = self.segment(a);
        let short = match self.shaped_segment(j) {
            Some((shape, scale)) => scale * shape.readings.resolution(a, b),
            None => (b - a) * self.power_change(j).max(self.power_change(self.segment(b))),
        };
        (ua + ub).min(short.max(0.0))
    }

    /// Cumulative energy at `t`, µJ, and its uncertainty.
    pub(crate) fn at(&self, t: f64) -> (f64, f64) {
        let first = &self.knots[0];
        let last = &self.knots[self.knots.len() - 1];
        if t <= first.t {
            let p = self.power[0];
            let extra = first.t - t;
            let e = self.shaped(0, first, t).unwrap_or(first.e - p * extra);
            return (e, extra * self.power_change(0) + p * first.h);
        }
        if t >= last.t {
            let j = self.power.len() - 1;
            let p = self.power[j];
            let extra = t - last.t;
            let e = self.shaped(j, last, t).unwrap_or(last.e + p * extra);
            return (e, extra * self.power_change(j) + p * last.h);
        }
        let j = self.segment(t);
        let (a, b) = (&self.knots[j], &self.knots[j + 1]);
        let p = self.power[j];
        // At a knot the value is exact but its time is not.
        let timing = p * a.h.max(b.h);
        match (self.shaped(j, a, t), self.shaped_segment(j)) {
            // Along the readings, E(t) is as uncertain as joining the segment's readings by
            // straight lines makes their integral, in the segment's scale.
            (Some(e), Some((shape, scale))) => (e, scale * shape.resolution[j] + timing),
            _ => (a.e + p * (t - a.t), (b.t - a.t) / 4.0 * self.power_change(j) + timing),
        }
    }

    /// The readings and the scale of segment `j`, where readings shape it.
    fn shaped_segment(&self, j: usize) -> Option<(&Shaped, f64)> {
        let shape = self.shape.as_ref()?;
        Some((shape, shape.scale[j]?))
    }

    /// E(t) from knot `from` along the power readings, scaled so that segment `j` holds the
    /// energy its knots give (also outside the knots, with the nearest segment's scale);
    /// `None` without readings or where they are flat at zero.
    fn shaped(&self, j: usize, from: &Knot, t: f64) -> Option<f64> {
        let (shape, scale) = self.shaped_segment(j)?;
        Some(from.e + scale * (shape.readings.integral(t) - shape.readings.integral(from.t)))
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
        let mut samples = counter_samples(100, 800_000_000, 100_000_000, 4_000_000_000, 30_000_000);
        // The last reading, at the end of the run, 20 ms after a regular one: same value.
        let &(t_last, e_last) = samples.last().unwrap();
        samples.push((t_last + 20_000_000, e_last));
        let curve = EnergyCurve::new(&samples, true).unwrap();
        assert!(curve.sparse && curve.knots.len() == 6, "{} knots", curve.knots.len());
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
    fn power_readings_shape_the_energy_between_sparse_knots() {
        // 100 W until t = 0.95 s, then 300 W; counter updated every 100 ms, read every 800 ms;
        // instantaneous power read every 100 ms (the step halfway between two readings, where
        // joining them puts it).
        let watts = |t: u64| if t < 950_000_000 { 100.0 } else { 300.0 };
        let energy = |t: u64| -> f64 {
            // µJ = W × ns / 1000
            if t < 950_000_000 { 0.1 * t as f64 } else { 0.95e8 + 0.3 * (t - 950_000_000) as f64 }
        };
        let update = 100_000_000;
        let samples: Vec<(u64, u64)> = (0..=5u64)
            .map(|i| i * 800_000_000 + 30_000_000)
            .map(|t| (t, energy(t / update * update) as u64))
            .collect();
        let readings: Vec<(u64, u32)> =
            (0..=40u64).map(|i| i * 100_000_000).map(|t| (t, (watts(t) * 1000.0) as u32)).collect();
        let linear = EnergyCurve::new(&samples, true).unwrap();
        let shaped = EnergyCurve::new(&samples, true).unwrap().shaped_by(&readings);
        // Inside one segment (knots at 0.78 s and 1.58 s), away from the step the readings
        // blurs over their 100 ms: [0.80, 0.90] s at 100 W and [1.10, 1.50] s at 300 W.
        for (a, b) in [(800_000_000u64, 900_000_000u64), (1_100_000_000, 1_500_000_000)] {
            let truth = energy(b) - energy(a);
            let of = |c: &EnergyCurve| c.at(b as f64).0 - c.at(a as f64).0;
            let (lin, shp) = (of(&linear), of(&shaped));
            assert!((shp - truth).abs() < 0.05 * truth, "[{a}, {b}]: shaped {shp} vs {truth}");
            // The stated uncertainty covers the error and is below the linear one's.
            let stated = |c: &EnergyCurve| {
                let ((_, ua), (_, ub)) = (c.at(a as f64), c.at(b as f64));
                c.interval_uncertainty(a as f64, b as f64, ua, ub)
            };
            assert!((shp - truth).abs() <= stated(&shaped), "[{a}, {b}]: ± {}", stated(&shaped));
            assert!(stated(&shaped) < stated(&linear), "{} vs {}", stated(&shaped), stated(&linear));
            assert!((lin - truth).abs() > 0.1 * truth, "[{a}, {b}]: linear {lin} vs {truth}");
        }
        // The readings also date the counter's updates (on 100 ms boundaries here): each knot
        // moves to its update, 30 ms before its reading, instead of the 50 ms assumed.
        for (knot, &(t, e)) in shaped.knots.iter().zip(&samples) {
            assert!((knot.t - (t as f64 - 30_000_000.0)).abs() <= 1_000_000.0, "{} vs {t}", knot.t);
            assert_eq!(knot.e, e as f64);
        }
        // Dense knots are not reshaped.
        let dense = counter_samples(100, 10_000_000, 100_000_000, 1_000_000_000, 3_000_000);
        assert!(EnergyCurve::new(&dense, true).unwrap().shaped_by(&readings).shape.is_none());
    }

    #[test]
    fn a_shaped_interval_is_as_uncertain_as_its_readings() {
        // Two sparse readings (one segment: no neighbouring mean power to compare with), power
        // readings every 100 ms, 100 W then 300 W from 0.45 s.
        let energy =
            |t: u64| if t < 450_000_000 { 0.1 * t as f64 } else { 0.45e8 + 0.3 * (t - 450_000_000) as f64 };
        let samples = [(30_000_000, 0), (830_000_000, energy(800_000_000) as u64)];
        let readings: Vec<(u64, u32)> = (0..=9u64)
            .map(|i| i * 100_000_000)
            .map(|t| (t, if t < 450_000_000 { 100_000 } else { 300_000 }))
            .collect();
        let curve = EnergyCurve::new(&samples, true).unwrap().shaped_by(&readings);
        let (a, b) = (350_000_000.0, 650_000_000.0);
        let ((ea, ua), (eb, ub)) = (curve.at(a), curve.at(b));
        let stated = curve.interval_uncertainty(a, b, ua, ub);
        let error = (eb - ea - (energy(650_000_000) - energy(350_000_000))).abs();
        assert!(stated > 0.0 && stated >= error, "± {stated}, error {error}");
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
