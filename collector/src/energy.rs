//! The energy sampler: its own thread reads every GPU through NVML (loaded at run time with
//! nvml-wrapper; no NVIDIA driver needed to build or run) and every CPU package / DRAM zone
//! through Linux powercap (RAPL), stamps each reading with CLOCK_MONOTONIC ns like the events,
//! and hands batches to the drain loop, which writes them into `run.bin`. Nothing here touches
//! the hot path: the profiled processes never see NVML.
//!
//! Per tick (default 10 ms) a GPU costs one NVML call (the energy counter, or the power reading
//! when there is no counter); utilization, SM clock, memory, temperature and the power reading
//! are read every 100 ms. The power reading is the instantaneous one
//! (`NVML_FI_DEV_POWER_INSTANT`, ~2 µs on an H200) where the driver has it: `nvmlDeviceGetPowerUsage`
//! is a one-second average on Ampere and newer GPUs. A source that is missing is said once and
//! recorded as absent: no number is ever made up.
//!
//! **The energy counter's price.** On an H200 (driver 580) one read of the energy counter costs
//! 3–4 ms of CPU, spinning inside the driver (p90 7 ms), against about 2 µs for the power, clock
//! or utilization queries, and the counter moves only every ~100 ms: read every 10 ms it took
//! 37 % of a core (tests/gpu/nvml_cost.py, BENCHMARKS.md). So each GPU measures what its counter
//! reads cost (CPU of this thread) and spaces them to stay within [`COUNTER_BUDGET`] of a core,
//! never closer than the tick nor further apart than [`MAX_GAP_NS`] ([`Spacing`]); the first
//! and the last reading are always taken, so the run's total stays exact, and the reports interpolate
//! between readings with an uncertainty that grows with the gap. With only such counters to
//! read (no RAPL, no GPU read by power), the thread sleeps until the next read or slow metrics
//! are due rather than waking every tick.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use mlprof_format::energy::{
    CPU_DEVICE_ID_BASE, DEVICE_CPU_DRAM, DEVICE_CPU_PACKAGE, DEVICE_GPU, EnergyDevice, EnergyNote,
    EnergySample, SOURCE_NONE, SOURCE_NVML_COUNTER, SOURCE_POWER_INTEGRATION, SOURCE_RAPL,
};
use mlprof_format::runfile::RunWriter;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;

use crate::timebase::monotonic_ns;

/// Default NVML library (what nvml-wrapper loads by default).
pub const DEFAULT_NVML_LIB: &str = "libnvidia-ml.so.1";
pub const DEFAULT_POWERCAP_DIR: &str = "/sys/class/powercap";
/// Slow metrics (utilization, clocks, memory, temperature, power reading) are read this often,
/// or less often where they cost more than SLOW_BUDGET.
const SLOW_EVERY: Duration = Duration::from_millis(100);
/// Samples are handed to the writer this often.
const SEND_EVERY_NS: u64 = 100_000_000;
/// Share of one core that a GPU's energy-counter reads may use (issue 5: the sampler must stay
/// well under 1 % of a core).
const COUNTER_BUDGET: f64 = 0.0025;
/// Share of one core that the slow metrics of all GPUs may use together.
const SLOW_BUDGET: f64 = 0.001;
/// Energy-counter reads (and slow metrics) are never further apart than this, whatever they
/// cost.
const MAX_GAP_NS: u64 = 2_000_000_000;

/// Reads spaced by what they cost: each is due `cost / budget` after the one before (the cost
/// smoothed over ~8 reads, so one slow read — p90 is twice the median on an H200 — does not
/// halve the rate and a lasting change moves it within a few), never sooner than `min_gap`
/// nor later than [`MAX_GAP_NS`]. The energy counters and the slow metrics each have one.
struct Spacing {
    /// Share of one core the reads may use.
    budget: f64,
    min_gap: u64,
    /// CPU time of one read, smoothed (ns), once measured.
    cost_ns: Option<f64>,
}

impl Spacing {
    fn new(budget: f64, min_gap: u64) -> Spacing {
        Spacing { budget, min_gap, cost_ns: None }
    }

    /// Notes what a read cost (CPU ns).
    fn record(&mut self, cost_ns: u64) {
        let cost = cost_ns as f64;
        self.cost_ns = Some(self.cost_ns.map_or(cost, |c| c + (cost - c) / 8.0));
    }

    /// The time between reads, ns.
    fn gap(&self) -> u64 {
        self.cost_ns.map_or(self.min_gap, |c| (c / self.budget) as u64).clamp(self.min_gap, MAX_GAP_NS)
    }

    /// The gap and one read's CPU (ns), where the cost made the gap wider than the minimum.
    fn widened(&self) -> Option<(u64, f64)> {
        let cost = self.cost_ns?;
        (self.gap() > self.min_gap).then_some((self.gap(), cost))
    }
}

/// When something read `gap` after `started` is due: half a tick early, so that with ticks
/// every `tick` it falls on the tick at or after `started + gap`, not the one after that.
fn due(started: u64, gap: u64, tick: u64) -> u64 {
    started + gap.saturating_sub(tick / 2)
}

pub struct EnergyConfig {
    pub interval: Duration,
    pub nvml_lib: PathBuf,
    pub powercap_dir: PathBuf,
    /// `CUDA_VISIBLE_DEVICES` of the profiled command (the launcher's child inherits ours).
    pub cuda_visible: Option<String>,
    pub quiet: bool,
}

enum Msg {
    Device(EnergyDevice),
    Samples(Vec<EnergySample>),
    Note(EnergyNote),
}

/// What the sampler cost, measured on its own thread.
#[derive(Debug, Clone, Default)]
pub struct SamplerCost {
    pub devices: usize,
    pub ticks: u64,
    pub cpu_ns: u64,
    pub wall_ns: u64,
    /// Of `cpu_ns` and `wall_ns`, the start-up: NVML's initialisation and opening the devices
    /// (tens of ms of CPU on an H200, once), which a short run's share of a core overstates.
    pub setup_cpu_ns: u64,
    pub setup_wall_ns: u64,
    /// The widest spacing of energy-counter reads that their cost imposed (ns), with the CPU
    /// one read cost (ns); `None` when every counter was read at every tick.
    pub counter_spacing: Option<(u64, f64)>,
}

impl SamplerCost {
    /// Share of one core, %.
    pub fn core_percent(&self) -> f64 {
        self.cpu_ns as f64 * 100.0 / self.wall_ns.max(1) as f64
    }

    /// Share of one core after the start-up, %: what a long run costs.
    pub fn running_core_percent(&self) -> f64 {
        self.cpu_ns.saturating_sub(self.setup_cpu_ns) as f64 * 100.0
            / self.wall_ns.saturating_sub(self.setup_wall_ns).max(1) as f64
    }
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    rx: mpsc::Receiver<Msg>,
    handle: Option<JoinHandle<SamplerCost>>,
}

impl Sampler {
    pub fn start(config: EnergyConfig) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("mlprof-energy".into())
            .spawn(move || sample_loop(&config, &tx, &flag))
            .ok();
        if handle.is_none() {
            eprintln!("mlprof-collect: cannot start the energy sampler thread; recording no energy");
        }
        Sampler { stop, rx, handle }
    }

    /// Writes whatever the sampler has handed over so far.
    pub fn write_pending(&mut self, writer: &mut RunWriter<impl Write>) -> io::Result<()> {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                Msg::Device(device) => writer.write_energy_device(&device)?,
                Msg::Samples(samples) => writer.write_energy_samples(&samples)?,
                Msg::Note(note) => writer.write_energy_note(&note)?,
            }
        }
        Ok(())
    }

    /// Stops the sampler (after one last reading) and writes the rest.
    pub fn stop(mut self, writer: &mut RunWriter<impl Write>) -> io::Result<Option<SamplerCost>> {
        self.stop.store(true, Ordering::Release);
        if let Some(handle) = &self.handle {
            handle.thread().unpark();
        }
        let cost = self.handle.take().and_then(|h| h.join().ok());
        self.write_pending(writer)?;
        Ok(cost)
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: valid clock id and out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn note(tx: &mpsc::Sender<Msg>, device: Option<u32>, level: &str, message: String) {
    let _ = tx.send(Msg::Note(EnergyNote { device, time_ns: monotonic_ns(), level: level.into(), message }));
}

fn sample_loop(config: &EnergyConfig, tx: &mpsc::Sender<Msg>, stop: &AtomicBool) -> SamplerCost {
    let cpu_start = thread_cpu_ns();
    let wall_start = monotonic_ns();
    let interval_ns = config.interval.as_nanos().clamp(1_000_000, 60_000_000_000) as u64;
    let mut missing = Vec::new();

    let nvml = match open_nvml(&config.nvml_lib) {
        Ok(nvml) => Some(nvml),
        Err(why) => {
            missing.push(format!("no NVML ({}: {why}), no GPU energy", config.nvml_lib.display()));
            None
        }
    };
    let mut gpus = Vec::new();
    if let Some(nvml) = &nvml {
        match nvml.device_count() {
            Ok(0) => missing.push("NVML lists no GPU".to_string()),
            Ok(count) => {
                for index in 0..count {
                    match Gpu::open(nvml, index, config, interval_ns) {
                        Ok((gpu, device)) => {
                            let _ = tx.send(Msg::Device(device));
                            gpus.push(gpu);
                        }
                        Err(why) => {
                            note(tx, Some(index), "error", format!("GPU {index}: {why}; not sampled"))
                        }
                    }
                }
            }
            Err(e) => missing.push(format!("NVML cannot count GPUs ({e}), no GPU energy")),
        }
    }
    let (mut zones, why_no_cpu) = rapl_zones(&config.powercap_dir);
    for device in rapl_devices(&zones, interval_ns) {
        let _ = tx.send(Msg::Device(device));
    }
    if let Some(why) = why_no_cpu {
        missing.push(format!("no CPU energy ({why})"));
    }
    if !missing.is_empty() {
        let line = missing.join("; ");
        if !config.quiet {
            eprintln!("mlprof-collect: energy: {line}");
        }
        note(tx, None, "warning", line);
    }
    let devices = gpus.len() + zones.len();
    let mut cost = SamplerCost {
        devices,
        setup_cpu_ns: thread_cpu_ns().saturating_sub(cpu_start),
        setup_wall_ns: monotonic_ns().saturating_sub(wall_start),
        ..Default::default()
    };
    if devices == 0 {
        cost.cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
        cost.wall_ns = monotonic_ns().saturating_sub(wall_start);
        return cost;
    }

    let slow_ns = (SLOW_EVERY.as_nanos() as u64).max(interval_ns);
    let mut batch = Vec::with_capacity(64);
    let mut last_send = monotonic_ns();
    let mut next = last_send;
    let mut next_slow = last_send;
    let mut next_power = last_send;
    // Slow metrics are spaced like the counters, within SLOW_BUDGET of a core for all GPUs
    // together (queries no H200 measurement covered may be slow elsewhere); `metrics_ns` is
    // what their reads cost since the last slow tick.
    let mut slow_reads = Spacing::new(SLOW_BUDGET, slow_ns);
    let mut metrics_ns = 0;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let now = monotonic_ns();
        let slow = now >= next_slow || stopping;
        // The power reading keeps its 100 ms whatever the other metrics cost: the reports shape
        // the energy between sparse counter reads with it.
        let power = now >= next_power || slow;
        if power {
            next_power = due(now, slow_ns, interval_ns);
        }
        for gpu in gpus.iter_mut() {
            metrics_ns += gpu.sample(power, slow, stopping, &mut batch, tx);
        }
        if slow {
            slow_reads.record(std::mem::take(&mut metrics_ns));
            next_slow = due(now, slow_reads.gap(), interval_ns);
        }
        for zone in zones.iter_mut() {
            zone.sample(&mut batch, tx);
        }
        cost.ticks += 1;
        let now = monotonic_ns();
        if stopping || now.saturating_sub(last_send) >= SEND_EVERY_NS {
            last_send = now;
            if !batch.is_empty() {
                let _ = tx.send(Msg::Samples(std::mem::take(&mut batch)));
            }
        }
        if stopping {
            break;
        }
        next += interval_ns;
        if zones.is_empty() && gpus.iter().all(|g| g.lost || g.counter) {
            // Nothing is read at every tick (each counter has its read scheduled): sleep until
            // something is due instead of waking 100 times a second for nothing, which cost
            // ~0.5 % of a core on an H200 VM.
            let due = gpus
                .iter()
                .filter(|g| !g.lost)
                .map(|g| g.next_counter_ns)
                .fold(next_slow.min(next_power), u64::min);
            next = next.max(due);
        }
        let now = monotonic_ns();
        if next <= now {
            // Fell behind (a loaded machine): skip the missed ticks rather than bursting.
            next = now + interval_ns;
        }
        // Parked, not slept: `Sampler::stop` unparks the thread so the last reading is not
        // held back by a long wait.
        loop {
            let now = monotonic_ns();
            if now >= next || stop.load(Ordering::Acquire) {
                break;
            }
            std::thread::park_timeout(Duration::from_nanos(next - now));
        }
    }
    cost.cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
    cost.wall_ns = monotonic_ns().saturating_sub(wall_start);
    cost.counter_spacing = gpus.iter().filter_map(|g| g.counter_reads.widened()).max_by_key(|&(gap, _)| gap);
    note(
        tx,
        None,
        "info",
        format!(
            "sampler: {} device(s), {} wake-ups (tick {} ms), {:.1} ms CPU in {:.2} s ({:.3}% of a core; \
             {:.1} ms of it starting, {:.3}% of a core after)",
            devices,
            cost.ticks,
            interval_ns as f64 / 1e6,
            cost.cpu_ns as f64 / 1e6,
            cost.wall_ns as f64 / 1e9,
            cost.core_percent(),
            cost.setup_cpu_ns as f64 / 1e6,
            cost.running_core_percent()
        ),
    );
    cost
}

// ---------------------------------------------------------------------------------------------
// GPUs

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

fn open_nvml(path: &Path) -> Result<Nvml, String> {
    check_nvml_symbols(path)?;
    Nvml::builder().lib_path(path.as_os_str()).init().map_err(|e| e.to_string())
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

struct Gpu<'a> {
    device: nvml_wrapper::Device<'a>,
    id: u32,
    counter: bool,
    /// The energy counter's reads, spaced within COUNTER_BUDGET, never closer than the tick.
    counter_reads: Spacing,
    /// When the next energy-counter read is due (monotonic ns).
    next_counter_ns: u64,
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
    lost: bool,
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
    fn sample(
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

// ---------------------------------------------------------------------------------------------
// CPU packages and DRAM (Linux powercap, RAPL)

struct RaplZone {
    zone: String,
    kind: &'static str,
    package: u32,
    file: File,
    max_range_uj: u64,
    last_uj: Option<u64>,
    total_uj: u64,
    id: u32,
    failed: bool,
}

/// Cumulative energy across a counter that wraps at `max_range` (the powercap
/// `max_energy_range_uj`): a reading below the previous one means one wrap.
pub fn unwrap_delta(previous: u64, now: u64, max_range: u64) -> u64 {
    if now >= previous {
        now - previous
    } else if max_range >= previous {
        max_range - previous + now
    } else {
        // No usable range: count from the new reading on.
        0
    }
}

fn read_u64(file: &File) -> io::Result<u64> {
    let mut buf = [0u8; 32];
    let n = file.read_at(&mut buf, 0)?;
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a number"))
}

/// The package and DRAM zones under `dir`, and why there are none when there are none.
fn rapl_zones(dir: &Path) -> (Vec<RaplZone>, Option<String>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return (Vec::new(), Some(format!("{}: {e}", dir.display()))),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("intel-rapl:"))
        .collect();
    names.sort_by_key(|n| {
        n.split(':').skip(1).map(|p| p.parse::<u32>().unwrap_or(u32::MAX)).collect::<Vec<_>>()
    });
    let mut zones = Vec::new();
    let mut problems = Vec::new();
    for zone in names {
        let path = dir.join(&zone);
        let name =
            std::fs::read_to_string(path.join("name")).map(|s| s.trim().to_string()).unwrap_or_default();
        let (kind, package) = if let Some(n) = name.strip_prefix("package-") {
            (DEVICE_CPU_PACKAGE, n.parse().unwrap_or(0))
        } else if name == "dram" {
            let package = zone.split(':').nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
            (DEVICE_CPU_DRAM, package)
        } else {
            continue;
        };
        let file = match File::open(path.join("energy_uj")) {
            Ok(f) => f,
            Err(e) => {
                problems.push(format!("{}/energy_uj: {e}", path.display()));
                continue;
            }
        };
        if let Err(e) = read_u64(&file) {
            {
                problems.push(format!("{}/energy_uj: {e}", path.display()));
                continue;
            }
        };
        let max_range_uj = std::fs::read_to_string(path.join("max_energy_range_uj"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let id = CPU_DEVICE_ID_BASE + zones.len() as u32;
        zones.push(RaplZone {
            zone,
            kind,
            package,
            file,
            max_range_uj,
            last_uj: None,
            total_uj: 0,
            id,
            failed: false,
        });
    }
    let why = if zones.is_empty() {
        Some(if problems.is_empty() {
            format!("no RAPL package zone under {}", dir.display())
        } else {
            problems.join(", ")
        })
    } else {
        None
    };
    (zones, why)
}

fn rapl_devices(zones: &[RaplZone], interval_ns: u64) -> Vec<EnergyDevice> {
    zones
        .iter()
        .map(|z| EnergyDevice {
            id: z.id,
            kind: z.kind.into(),
            index: z.package,
            uuid: z.zone.clone(),
            name: if z.kind == DEVICE_CPU_DRAM {
                format!("CPU {} DRAM", z.package)
            } else {
                format!("CPU package {}", z.package)
            },
            in_run: true,
            energy_source: SOURCE_RAPL.into(),
            interval_ns,
        })
        .collect()
}

impl RaplZone {
    fn sample(&mut self, batch: &mut Vec<EnergySample>, tx: &mpsc::Sender<Msg>) {
        if self.failed {
            return;
        }
        let time_ns = monotonic_ns();
        let now = match read_u64(&self.file) {
            Ok(v) => v,
            // Caught between a rewrite's truncation and its write (a test's fake zone): skip.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return,
            Err(e) => {
                self.failed = true;
                note(
                    tx,
                    Some(self.id),
                    "error",
                    format!("{}: energy_uj unreadable ({e}); no longer sampled", self.zone),
                );
                return;
            }
        };
        if let Some(previous) = self.last_uj {
            self.total_uj += unwrap_delta(previous, now, self.max_range_uj);
        }
        self.last_uj = Some(now);
        batch.push(EnergySample {
            device: self.id,
            time_ns,
            energy_uj: Some(self.total_uj),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_spaced_by_their_cost() {
        // 0.25 % of a core, tick 10 ms: cheap reads keep the tick, a 3.5 ms read (an H200's
        // energy counter) is taken every 1.4 s, and nothing is ever more than 2 s apart.
        let mut reads = Spacing::new(0.0025, 10_000_000);
        assert_eq!((reads.gap(), reads.widened()), (10_000_000, None));
        reads.record(2_000);
        assert_eq!((reads.gap(), reads.widened()), (10_000_000, None));
        let mut costly = Spacing::new(0.0025, 10_000_000);
        costly.record(3_500_000);
        assert_eq!(costly.widened(), Some((1_400_000_000, 3_500_000.0)));
        // One read twice as slow moves the smoothed cost by an eighth of the difference.
        costly.record(7_000_000);
        assert_eq!(costly.gap(), 1_575_000_000);
        costly.record(100_000_000);
        assert_eq!(costly.gap(), MAX_GAP_NS);
        // Due half a tick early, so that the tick at the gap takes it.
        assert_eq!(due(1_000, 100_000_000, 10_000_000), 95_001_000);
    }

    #[test]
    fn rapl_wraparound() {
        assert_eq!(unwrap_delta(100, 250, 1000), 150);
        assert_eq!(unwrap_delta(900, 50, 1000), 150);
        assert_eq!(unwrap_delta(900, 50, 0), 0);
    }

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
