//! Helpers the energy module's unit tests share.

use mlprof_format::energy::{DEVICE_GPU, EnergyDevice, EnergySample, SOURCE_RAPL};

use super::load::Device;

/// A GPU of the run (device 0) whose energy counter read `knots` (time ns, energy µJ).
pub(crate) fn gpu(knots: &[(u64, u64)]) -> Device {
    let samples = knots
        .iter()
        .map(|&(time_ns, energy_uj)| EnergySample {
            device: 0,
            time_ns,
            energy_uj: Some(energy_uj),
            ..Default::default()
        })
        .collect();
    Device {
        info: EnergyDevice {
            kind: DEVICE_GPU.into(),
            in_run: true,
            energy_source: SOURCE_RAPL.into(),
            ..Default::default()
        },
        samples,
        notes: Vec::new(),
    }
}
