//! GPUs through NVML (loaded at run time with nvml-wrapper): the library's check and opening,
//! which GPUs `CUDA_VISIBLE_DEVICES` gives the run, and one GPU's readings each tick (the
//! energy counter spaced by its cost, or the power reading integrated; the slow metrics).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::mpsc;

use mlprof_format::energy::{
    DEVICE_GPU, EnergyDevice, EnergySample, SOURCE_NONE, SOURCE_NVML_COUNTER, SOURCE_POWER_INTEGRATION,
};
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;

use super::schedule::{COUNTER_BUDGET, Spacing, due};
use super::{EnergyConfig, Msg, note, thread_cpu_ns};
use crate::timebase::monotonic_ns;

/// nvml-wrapper calls `nvmlShutdown` without checking that the library has it (the sys crate
/// panics on a missing symbol when called through its plain method; every other call is
/// checked and fails with an error). Check the entry points it needs unchecked before handing
/// the library over.
fn check_nvml_symbols(path: &Path) -> Result<(), String> {
    let cpath = CString::new(path.as_os_str().as_bytes()).map_err(|_| "path holds a NUL byte".to_string())?;
    // Safety: dlopen/dlsym/dlclose with valid C strings; the handle is closed before returning.
    unsafe {
        let handle = libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            let err = libc::dlerror();
            let why = if err.is_null() {
                "cannot be loaded".to_string()
            } else {
                std::ffi::CStr::from_ptr(err).to_string_lossy().into_owned()
            };
            return Err(why);
        }
        let mut missing = Vec::new();
        for symbol in [c"nvmlInit_v2", c"nvmlShutdown"] {
            if libc::dlsym(handle, symbol.as_ptr()).is_null() {
                missing.push(symbol.to_string_lossy().into_owned());
            }
        }
        libc::dlclose(handle);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("not an NVML library (lacks {})", missing.join(", ")))
        }
    }
}

pub(super) fn open_nvml(path: &Path) -> Result<Nvml, String> {
    check_nvml_symbols(path)?;
    Nvml::builder().lib_path(path.as_os_str()).init().map_err(|e| e.to_string())
}

/// Every GPU NVML lists, each announced to the writer as it opens; one that cannot be opened
/// is noted and left out, and a count NVML cannot give goes to `missing`.
pub(super) fn open_gpus<'a>(
    nvml: &'a Nvml,
    config: &EnergyConfig,
    interval_ns: u64,
    tx: &mpsc::Sender<Msg>,
    missing: &mut Vec<String>,
) -> Vec<Gpu<'a>> {
    let mut gpus = Vec::new();
    match nvml.device_count() {
        Ok(0) => missing.push("NVML lists no GPU".to_string()),
        Ok(count) => {
            for index in 0..count {
                match Gpu::open(nvml, index, config, interval_ns) {
                    Ok((gpu, device)) => {
                        let _ = tx.send(Msg::Device(device));
                        gpus.push(gpu);
                    }
                    Err(why) => note(tx, Some(index), "error", format!("GPU {index}: {why}; not sampled")),
                }
            }
        }
        Err(e) => missing.push(format!("NVML cannot count GPUs ({e}), no GPU energy")),
    }
    gpus
}

/// Whether `CUDA_VISIBLE_DEVICES` leaves GPU `index`/`uuid` visible. Entries are NVML indexes
/// (the order of nvidia-smi; CUDA's own order matches with `CUDA_DEVICE_ORDER=PCI_BUS_ID`) or
/// UUID prefixes; like CUDA, the list ends at the first entry that is neither.
pub fn visible(spec: Option<&str>, index: u32, uuid: &str) -> bool {
    let Some(spec) = spec else {
        return true;
    };
    for entry in spec.split(',').map(str::trim) {
        if let Ok(n) = entry.parse::<u32>() {
            if n == index {
                return true;
            }
        } else if entry.starts_with("GPU-") && entry.len() > 4 {
            if uuid.starts_with(entry) {
                return true;
            }
        } else if entry.starts_with("MIG-") {
            // A MIG instance of some GPU: which one is not known here; keep looking.
        } else {
            break;
        }
    }
    false
}

pub(super) struct Gpu<'a> {
    device: nvml_wrapper::Device<'a>,
    id: u32,
    pub(super) counter: bool,
    /// The energy counter's reads, spaced within COUNTER_BUDGET, never closer than the tick.
    pub(super) counter_reads: Spacing,
    /// When the next energy-counter read is due (monotonic ns).
    pub(super) next_counter_ns: u64,
    /// The tick, ns.
    interval_ns: u64,
    /// The counter's spacing has been said in a note (once, when it first exceeds the tick).
    spacing_said: bool,
    /// The driver answers `NVML_FI_DEV_POWER_INSTANT` (else the power reading is
    /// `nvmlDeviceGetPowerUsage`'s).
    instant_power: bool,
    first_mj: Option<u64>,
    /// Power integration: last (time, mW) and the running total, µJ.
    last_power: Option<(u64, u32)>,
    integrated_uj: f64,
    pub(super) lost: bool,
}

impl<'a> Gpu<'a> {
    fn open(
        nvml: &'a Nvml,
        index: u32,
        config: &EnergyConfig,
        interval_ns: u64,
    ) -> Result<(Gpu<'a>, EnergyDevice), String> {
        let device = nvml.device_by_index(index).map_err(|e| e.to_string())?;
        let name = device.name().unwrap_or_else(|_| "unknown GPU".into());
        let uuid = device.uuid().unwrap_or_default();
        let counter = device.total_energy_consumption().is_ok();
        let power = device.power_usage().is_ok();
        let instant_power = instant_power(&device).is_some();
        let source = if counter {
            SOURCE_NVML_COUNTER
        } else if power {
            SOURCE_POWER_INTEGRATION
        } else {
            SOURCE_NONE
        };
        let in_run = visible(config.cuda_visible.as_deref(), index, &uuid);
        let info = EnergyDevice {
            id: index,
            kind: DEVICE_GPU.into(),
            index,
            uuid,
            name,
            in_run,
            energy_source: source.into(),
            interval_ns,
        };
        let gpu = Gpu {
            device,
            id: index,
            counter,
            counter_reads: Spacing::new(COUNTER_BUDGET, interval_ns),
            next_counter_ns: 0,
            interval_ns,
            spacing_said: false,
            instant_power,
            first_mj: None,
            last_power: None,
            integrated_uj: 0.0,
            lost: false,
        };
        Ok((gpu, info))
    }

    /// One tick: the energy counter when its read is due (or `last`), or for a GPU without one
    /// the power reading it integrates; the power reading when `power`, the other slow metrics
    /// when `slow`. A tick with nothing due records nothing.
    pub(super) fn sample(
        &mut self,
        power: bool,
        slow: bool,
        last: bool,
        batch: &mut Vec<EnergySample>,
        tx: &mpsc::Sender<Msg>,
    ) -> u64 {
        if self.lost {
            return 0;
        }
        let before = monotonic_ns();
        let read_counter = self.counter && (last || before >= self.next_counter_ns);
        if self.counter && !read_counter && !slow && !power {
            return 0;
        }
        let cpu_before = if read_counter { thread_cpu_ns() } else { 0 };
        let reading = if read_counter {
            self.device.total_energy_consumption().map(|mj| (Some(mj), None))
        } else if self.counter {
            Ok((None, None))
        } else {
            self.device.power_usage().map(|mw| (None, Some(mw)))
        };
        let after = monotonic_ns();
        if read_counter {
            self.schedule_counter(thread_cpu_ns().saturating_sub(cpu_before), before, tx);
        }
        let time_ns = before + (after - before) / 2;
        let (energy_mj, fast_power) = match reading {
            Ok(r) => r,
            Err(e) => {
                self.lost = true;
                note(
                    tx,
                    Some(self.id),
                    "error",
                    format!("GPU {} stopped answering ({e}); it is no longer sampled", self.id),
                );
                return 0;
            }
        };
        let mut sample = EnergySample { device: self.id, time_ns, ..Default::default() };
        if let Some(mj) = energy_mj {
            let first = *self.first_mj.get_or_insert(mj);
            sample.energy_uj = Some(mj.saturating_sub(first).saturating_mul(1000));
        }
        if let Some(mw) = fast_power {
            if let Some((t0, p0)) = self.last_power {
                // Trapezoid: mW × ns = 1e-6 µJ.
                self.integrated_uj += (p0 as f64 + mw as f64) / 2.0 * time_ns.saturating_sub(t0) as f64 / 1e6;
            }
            self.last_power = Some((time_ns, mw));
            sample.energy_uj = Some(self.integrated_uj.round() as u64);
            sample.power_mw = Some(mw);
        }
        let mut metrics_ns = 0;
        if power || slow {
            let cpu_before = thread_cpu_ns();
            if read_counter {
                // A counter read takes milliseconds on some GPUs: the metrics read after it get
                // a sample of their own, stamped with their own time.
                batch.push(sample);
                sample = EnergySample { device: self.id, time_ns: monotonic_ns(), ..Default::default() };
            }
            if sample.power_mw.is_none() {
                let instant = if self.instant_power { instant_power(&self.device) } else { None };
                sample.power_mw = instant.or_else(|| self.device.power_usage().ok());
            }
            if slow {
                if let Ok(u) = self.device.utilization_rates() {
                    sample.gpu_util = Some(u.gpu.min(100) as u8);
                    sample.mem_util = Some(u.memory.min(100) as u8);
                }
                sample.sm_clock_mhz = self.device.clock_info(Clock::SM).ok();
                sample.mem_used_bytes = self.device.memory_info().ok().map(|m| m.used);
                sample.temperature_c = self.device.temperature(TemperatureSensor::Gpu).ok();
            }
            // What the power reading costs counts too (it is read every 100 ms regardless).
            metrics_ns = thread_cpu_ns().saturating_sub(cpu_before);
        }
        batch.push(sample);
        metrics_ns
    }

    /// Spaces the counter's reads by what they cost (see [`Spacing`]); the first time that
    /// widens them beyond the tick, says so.
    fn schedule_counter(&mut self, cost_ns: u64, started: u64, tx: &mpsc::Sender<Msg>) {
        self.counter_reads.record(cost_ns);
        self.next_counter_ns = due(started, self.counter_reads.gap(), self.interval_ns);
        if let Some((gap, cost)) = self.counter_reads.widened()
            && !self.spacing_said
            && self.first_mj.is_some()
        {
            self.spacing_said = true;
            // A warning, not an info note: it qualifies the resolution of every figure.
            note(
                tx,
                None,
                "warning",
                format!(
                    "GPU {}: one energy-counter read costs {:.2} ms of CPU here (its first \
                     reads: the spacing follows the cost as the run goes); read every {} ms \
                     (not every {} ms) to keep them under {}% of a core; energy between reads \
                     is interpolated",
                    self.id,
                    cost / 1e6,
                    gap / 1_000_000,
                    self.interval_ns / 1_000_000,
                    COUNTER_BUDGET * 100.0
                ),
            );
        }
    }
}

/// NVML's `NVML_FI_DEV_POWER_INSTANT` field (the same number in every field-id scheme).
const FIELD_POWER_INSTANT: u32 = 186;

/// The GPU's instantaneous power, mW, where the driver has the field.
fn instant_power(device: &nvml_wrapper::Device<'_>) -> Option<u32> {
    let values = device.field_values_for(&[FieldId(FIELD_POWER_INSTANT)]).ok()?;
    let FieldValueSample { value, .. } = values.into_iter().next()?.ok()?;
    match value.ok()? {
        SampleValue::U32(mw) => Some(mw),
        SampleValue::U64(mw) => u32::try_from(mw).ok(),
        SampleValue::I64(mw) => u32::try_from(mw).ok(),
        SampleValue::F64(mw) if mw.is_finite() && mw >= 0.0 && mw < u32::MAX as f64 => Some(mw as u32),
        SampleValue::F64(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_visible_devices() {
        let uuid = "GPU-1234-abcd";
        assert!(visible(None, 3, uuid));
        assert!(visible(Some("0,3"), 3, uuid));
        assert!(!visible(Some("0,1"), 3, uuid));
        assert!(visible(Some("GPU-1234"), 3, uuid));
        assert!(!visible(Some(""), 0, uuid));
        assert!(!visible(Some("-1,0"), 0, uuid));
        assert!(!visible(Some("0,junk,3"), 3, uuid));
    }
}
