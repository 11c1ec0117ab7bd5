//! The overlap rule that turns device energy into per-span energy. The run is cut at every
//! span boundary; each piece's energy is shared equally by the spans active in it (spans
//! overlapping on different threads share in proportion to their overlap); pieces with no span
//! are unattributed. A span's uncertainty is its share of u(t) at its two ends.

use std::borrow::Borrow;

use mlprof_format::energy::DEVICE_GPU;

use super::curve::EnergyCurve;
use super::load::Device;

/// Energy attributed to something, J: its total, split by device kind, and its squared
/// uncertainty (variances add when independent shares are summed).
#[derive(Default, Clone, Copy)]
pub(super) struct Figure {
    pub(crate) energy: f64,
    /// Squared uncertainty, J².
    pub(crate) var: f64,
    pub(crate) gpu: f64,
    pub(crate) cpu: f64,
}

impl Figure {
    pub(crate) fn uncertainty(&self) -> f64 {
        self.var.sqrt()
    }

    pub(crate) fn add(&mut self, other: &Figure) {
        self.energy += other.energy;
        self.var += other.var;
        self.gpu += other.gpu;
        self.cpu += other.cpu;
    }
}

/// What [`share`] gives out.
pub(super) struct Sharing {
    /// Per interval, in the order given.
    pub(crate) per_interval: Vec<Figure>,
    /// Energy of the pieces at least one interval covers, J.
    pub(crate) attributed: f64,
}

/// Shares each device's energy among `intervals` (start, end ns) by the overlap rule: the
/// energy of each piece between consecutive boundaries goes in equal parts to the intervals
/// active in it. A prefix sum of "energy per active interval" over the boundaries makes each
/// interval's share a difference of two entries, not a walk over its pieces.
pub(super) fn share<C: Borrow<EnergyCurve>>(intervals: &[(u64, u64)], curves: &[(&Device, C)]) -> Sharing {
    let mut points: Vec<(u64, i32)> = Vec::with_capacity(intervals.len() * 2);
    for &(s, e) in intervals {
        points.push((s, 1));
        points.push((e, -1));
    }
    points.sort_unstable();
    // Distinct boundary times and the number of intervals active right after each.
    let mut times: Vec<u64> = Vec::new();
    let mut active_after: Vec<i64> = Vec::new();
    let mut active = 0i64;
    for (t, d) in points {
        if times.last() != Some(&t) {
            times.push(t);
            active_after.push(active);
        }
        active += d as i64;
        if let Some(last) = active_after.last_mut() {
            *last = active;
        }
    }
    let mut per_interval = vec![Figure::default(); intervals.len()];
    let mut attributed = 0.0;
    for (device, curve) in curves {
        let curve: &EnergyCurve = curve.borrow();
        let gpu = device.info.kind == DEVICE_GPU;
        let values: Vec<(f64, f64)> = times.iter().map(|&t| curve.at(t as f64)).collect();
        // prefix[i] = energy shared out per active interval up to times[i], J.
        let mut prefix = vec![0.0f64; times.len()];
        for i in 1..times.len() {
            let k = active_after[i - 1];
            let de = (values[i].0 - values[i - 1].0) / 1e6;
            prefix[i] = prefix[i - 1] + if k > 0 { de / k as f64 } else { 0.0 };
            if k > 0 {
                attributed += de;
            }
        }
        for (figure, &(s, e)) in per_interval.iter_mut().zip(intervals) {
            let i = times.partition_point(|&t| t < s);
            let j = times.partition_point(|&t| t < e);
            if i >= times.len() || j >= times.len() {
                continue;
            }
            let energy = prefix[j] - prefix[i];
            let k_start = active_after[i].max(1) as f64;
            let k_end = if j > 0 { active_after[j - 1].max(1) as f64 } else { 1.0 };
            let u =
                curve.interval_uncertainty(s as f64, e as f64, values[i].1 / k_start, values[j].1 / k_end)
                    / 1e6;
            figure.energy += energy;
            figure.var += u * u;
            if gpu {
                figure.gpu += energy;
            } else {
                figure.cpu += energy;
            }
        }
    }
    Sharing { per_interval, attributed }
}

#[cfg(test)]
mod tests {
    use mlprof_format::energy::EnergyDevice;

    use super::*;

    /// 1 W (1e-3 µJ/ns) from 0 to 10 s on one GPU.
    fn one_watt() -> (Device, EnergyCurve) {
        let device = Device {
            info: EnergyDevice { kind: DEVICE_GPU.into(), in_run: true, ..Default::default() },
            samples: Vec::new(),
            notes: Vec::new(),
        };
        let samples = [(0u64, 0u64), (10_000_000_000, 10_000_000)];
        (device, EnergyCurve::new(&samples, false).unwrap())
    }

    #[test]
    fn overlap_sharing() {
        let (device, curve) = one_watt();
        let curves = vec![(&device, curve)];
        // A: 0..4 s, B: 2..6 s: A = 2 + 1, B = 1 + 2, coverage 6 J.
        let sharing = share(&[(0, 4_000_000_000), (2_000_000_000, 6_000_000_000)], &curves);
        assert!((sharing.per_interval[0].energy - 3.0).abs() < 1e-9);
        assert!((sharing.per_interval[1].energy - 3.0).abs() < 1e-9);
        assert!((sharing.attributed - 6.0).abs() < 1e-9);
    }

    #[test]
    fn nested_intervals_split_the_overlap_and_gaps_stay_unattributed() {
        let (device, curve) = one_watt();
        let curves = vec![(&device, curve)];
        // Outer 1..5 s holds inner 2..3 s; 5..10 s has no span.
        let sharing = share(&[(1_000_000_000, 5_000_000_000), (2_000_000_000, 3_000_000_000)], &curves);
        let (outer, inner) = (&sharing.per_interval[0], &sharing.per_interval[1]);
        assert!((outer.energy - 3.5).abs() < 1e-9 && (inner.energy - 0.5).abs() < 1e-9);
        assert!((outer.gpu - outer.energy).abs() < 1e-12 && outer.cpu == 0.0);
        assert!((sharing.attributed - 4.0).abs() < 1e-9);
    }
}
