//! Power per device over the run's time axis, from its energy curve: the mean power in each
//! slice is the energy the curve gives the slice over the slice's length.

use super::BINS;
use crate::energy::EnergyRun;

/// One device's mean power per slice.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PowerSeries {
    /// `GPU 0: NAME`, `CPU package 0`, with ` (not in run)` for a device the run did not use.
    pub(crate) device: String,
    /// W per slice of the run's axis ([`BINS`] slices from its start).
    pub(crate) watts: Vec<f64>,
    /// The slices' width, s.
    pub(crate) bin_s: f64,
}

/// Every device whose samples give a curve.
pub(crate) fn timeline(run: &EnergyRun) -> Vec<PowerSeries> {
    let (start, end) = (run.start_ns as f64, run.end_ns as f64);
    let bin = (end - start) / BINS as f64;
    if bin <= 0.0 {
        return Vec::new();
    }
    run.devices
        .iter()
        .filter_map(|device| {
            let curve = EnergyRun::curve(device)?;
            let info = &device.info;
            let name = if info.kind == mlprof_format::energy::DEVICE_GPU {
                format!("GPU {}: {}", info.index, info.name)
            } else {
                info.name.clone()
            };
            let watts = (0..BINS)
                .map(|i| {
                    let (a, _) = curve.at(start + i as f64 * bin);
                    let (b, _) = curve.at(start + (i + 1) as f64 * bin);
                    (b - a) / 1e6 / (bin / 1e9)
                })
                .collect();
            let device = if info.in_run { name } else { format!("{name} (not in run)") };
            Some(PowerSeries { device, watts, bin_s: bin / 1e9 })
        })
        .collect()
}
