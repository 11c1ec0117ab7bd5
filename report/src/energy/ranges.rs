//! The energy of a run's capture ranges (issue 38: energy follows the ranges). The devices'
//! curves cover the whole run (energy counters are cumulative, and sampling goes on between
//! ranges), so a range's energy is each in-run device's curve over the range, summed; the
//! run's total stays the whole run's, and the ranges' sum is beside it.

use super::curve::EnergyCurve;
use crate::run::ranges::Capture;

/// One range's energy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RangeEnergy {
    pub(crate) number: u32,
    /// From the run's start, ns.
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) energy_j: f64,
    pub(crate) uncertainty_j: f64,
}

/// The capture ranges' energy: each range's, and their sum.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RangesEnergy {
    /// The capture source (`cudaProfilerApi`, `itt`, `delay`, `steps`, ...).
    pub(crate) source: &'static str,
    pub(crate) ranges: Vec<RangeEnergy>,
    pub(crate) time_s: f64,
    pub(crate) energy_j: f64,
    pub(crate) uncertainty_j: f64,
}

/// The energy of `capture`'s ranges on `curves` (the in-run devices' curves; their times are
/// CLOCK_MONOTONIC ns, the ranges' from `run_start`). `None` for a run without a capture
/// option (one range, the whole run: the total says it).
pub(crate) fn of_ranges<'a>(
    capture: &Capture,
    run_start: u64,
    curves: impl Iterator<Item = &'a EnergyCurve> + Clone,
) -> Option<RangesEnergy> {
    let source = capture.source?;
    let mut ranges = Vec::with_capacity(capture.ranges.len());
    let (mut energy_j, mut var, mut time_ns) = (0.0, 0.0, 0u64);
    for range in &capture.ranges {
        let (a, b) = ((run_start + range.start_ns) as f64, (run_start + range.end_ns) as f64);
        let (mut energy, mut range_var) = (0.0, 0.0);
        for curve in curves.clone() {
            let ((ea, ua), (eb, ub)) = (curve.at(a), curve.at(b));
            let u = curve.interval_uncertainty(a, b, ua, ub) / 1e6;
            energy += (eb - ea) / 1e6;
            range_var += u * u;
        }
        ranges.push(RangeEnergy {
            number: range.number,
            start_ns: range.start_ns,
            end_ns: range.end_ns,
            energy_j: energy,
            uncertainty_j: range_var.sqrt(),
        });
        energy_j += energy;
        var += range_var;
        time_ns += range.duration_ns;
    }
    Some(RangesEnergy { source, ranges, time_s: time_ns as f64 / 1e9, energy_j, uncertainty_j: var.sqrt() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::energy::load::EnergyRun;
    use crate::energy::testing::gpu;
    use crate::run::ranges::Range;

    fn range(number: u32, start_ns: u64, end_ns: u64) -> Range {
        Range {
            number,
            start_ns,
            end_ns,
            duration_ns: end_ns - start_ns,
            opened_by: "itt_resume".into(),
            closed_by: "itt_pause".into(),
            opened_pid: 1,
            closed_pid: 1,
        }
    }

    /// A counter that gains 100 J a second (100 µJ a µs): the ranges [0.2 s, 0.5 s] and
    /// [1.0 s, 1.1 s] of a run that starts at 1 s hold 30 J and 10 J, 40 J in all over 0.4 s;
    /// a run without a capture option has no ranges of its own.
    #[test]
    fn each_range_holds_the_energy_of_its_interval() {
        let knots: Vec<(u64, u64)> = (0..=30).map(|i| (i * 100_000_000, i * 10_000_000)).collect();
        let curve = EnergyRun::curve(&gpu(&knots)).unwrap();
        let capture = Capture {
            source: Some("itt"),
            limit: 0,
            ranges: vec![range(1, 200_000_000, 500_000_000), range(2, 1_000_000_000, 1_100_000_000)],
            recorded_ns: 400_000_000,
            outside_ns: 0,
        };
        let got = of_ranges(&capture, 1_000_000_000, std::iter::once(&curve)).unwrap();
        let energies: Vec<f64> = got.ranges.iter().map(|r| (r.energy_j * 1e3).round() / 1e3).collect();
        assert_eq!(energies, [30.0, 10.0]);
        assert!((got.energy_j - 40.0).abs() < 1e-6 && (got.time_s - 0.4).abs() < 1e-9, "{got:?}");
        assert!(got.uncertainty_j >= 0.0 && got.uncertainty_j < 1.0, "{got:?}");
        let whole = Capture { source: None, ..capture };
        assert_eq!(of_ranges(&whole, 0, std::iter::once(&curve)), None);
    }
}
