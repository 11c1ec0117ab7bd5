//! Energy records of `run.bin` (since format 1.2): the device table, the samples and the notes
//! that `mlprof-collect` writes from its energy sampler (NVML for GPUs, Linux powercap/RAPL for
//! CPU packages). Postcard-encoded like every metadata frame; fields are only ever appended.

use serde::{Deserialize, Serialize};

/// [`EnergyDevice::kind`]: an NVIDIA GPU, sampled through NVML.
pub const DEVICE_GPU: &str = "gpu";
/// [`EnergyDevice::kind`]: a CPU package's RAPL zone (powercap `intel-rapl:N`).
pub const DEVICE_CPU_PACKAGE: &str = "cpu_package";
/// [`EnergyDevice::kind`]: a package's DRAM RAPL sub-zone.
pub const DEVICE_CPU_DRAM: &str = "cpu_dram";

/// [`EnergyDevice::energy_source`]: NVML's total-energy counter (mJ since driver load),
/// differenced from the first sample.
pub const SOURCE_NVML_COUNTER: &str = "nvml_counter";
/// [`EnergyDevice::energy_source`]: NVML power readings integrated (trapezoids) by the
/// collector: no energy counter.
pub const SOURCE_POWER_INTEGRATION: &str = "power_integration";
/// [`EnergyDevice::energy_source`]: Linux powercap `energy_uj`, unwrapped at
/// `max_energy_range_uj`.
pub const SOURCE_RAPL: &str = "rapl";
/// [`EnergyDevice::energy_source`]: the device is listed but gives no energy figure.
pub const SOURCE_NONE: &str = "none";

/// Ids of CPU zones start here; GPU ids are their NVML index.
pub const CPU_DEVICE_ID_BASE: u32 = 256;

/// One sampled device, written once before its samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EnergyDevice {
    /// Unique in the file: the NVML index for GPUs, [`CPU_DEVICE_ID_BASE`] + k for CPU zones.
    pub id: u32,
    /// [`DEVICE_GPU`], [`DEVICE_CPU_PACKAGE`] or [`DEVICE_CPU_DRAM`].
    pub kind: String,
    /// NVML index, or the RAPL package number.
    pub index: u32,
    /// GPU UUID (`GPU-…`); for CPU zones the powercap zone (`intel-rapl:0`).
    pub uuid: String,
    /// For people: NVML's product name, or `CPU package N` / `CPU N DRAM`.
    pub name: String,
    /// Whether the device belongs to the run: every CPU zone, and the GPUs that
    /// `CUDA_VISIBLE_DEVICES` of the profiled command leaves visible (all when unset).
    pub in_run: bool,
    /// How `EnergySample::energy_uj` is obtained (`SOURCE_*`).
    pub energy_source: String,
    /// Sampling interval asked for, ns.
    pub interval_ns: u64,
}

/// One reading of one device, stamped with CLOCK_MONOTONIC ns like the events.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EnergySample {
    /// [`EnergyDevice::id`] of the device read.
    pub device: u32,
    /// CLOCK_MONOTONIC ns of the reading.
    pub time_ns: u64,
    /// Cumulative energy since the device's first sample, µJ. A counter that updates less
    /// often than it is sampled repeats its value between updates.
    pub energy_uj: Option<u64>,
    /// NVML power reading (the driver's average), mW.
    pub power_mw: Option<u32>,
    /// GPU utilization (NVML: share of the last sample period a kernel ran), %.
    pub gpu_util: Option<u8>,
    /// Memory utilization (NVML: share of the period device memory was read or written), %.
    pub mem_util: Option<u8>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Option<u32>,
    /// Device memory in use (NVML, all processes), bytes.
    pub mem_used_bytes: Option<u64>,
    /// GPU temperature, °C.
    pub temperature_c: Option<u32>,
}

/// Something the sampler has to say: a device lost, an unreadable source, its own cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EnergyNote {
    /// The device concerned; `None` for the sampler as a whole.
    pub device: Option<u32>,
    /// CLOCK_MONOTONIC ns when the note was made.
    pub time_ns: u64,
    /// `error` (the device is no longer sampled), `warning` or `info`.
    pub level: String,
    /// The note, for the user.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runfile::{Frame, RunEnd, RunInfo, RunReader, RunWriter};

    #[test]
    fn energy_frames_round_trip() {
        let device = EnergyDevice {
            id: 1,
            kind: DEVICE_GPU.into(),
            index: 1,
            uuid: "GPU-x".into(),
            name: "Test GPU".into(),
            in_run: true,
            energy_source: SOURCE_NVML_COUNTER.into(),
            interval_ns: 10_000_000,
        };
        let sample = EnergySample {
            device: 1,
            time_ns: 5,
            energy_uj: Some(7),
            power_mw: Some(9),
            ..Default::default()
        };
        let note = EnergyNote { device: Some(1), time_ns: 6, level: "error".into(), message: "lost".into() };
        let mut w = RunWriter::new(Vec::new(), &RunInfo::default()).unwrap();
        w.write_energy_device(&device).unwrap();
        w.write_energy_samples(std::slice::from_ref(&sample)).unwrap();
        w.write_energy_note(&note).unwrap();
        let bytes = w.finish(&RunEnd::default()).unwrap();
        let mut r = RunReader::new(&bytes[..]).unwrap();
        let mut seen = 0;
        while let Some(frame) = r.next_frame().unwrap() {
            match frame {
                Frame::EnergyDevice(d) => assert_eq!(d, device),
                Frame::EnergySamples(s) => assert_eq!(s, vec![sample.clone()]),
                Frame::EnergyNote(n) => assert_eq!(n, note),
                _ => continue,
            }
            seen += 1;
        }
        assert_eq!(seen, 3);
    }
}
