//! The energy sampler: its own thread reads every GPU through NVML (loaded at run time with
//! nvml-wrapper; no NVIDIA driver needed to build or run) and every CPU package / DRAM zone
//! through Linux powercap (RAPL), stamps each reading with CLOCK_MONOTONIC ns like the events,
//! and hands batches to the drain loop, which writes them into `run.bin`. Nothing here touches
//! the hot path: the profiled processes never see NVML.
//!
//! Per tick (default 10 ms) a GPU costs one NVML call (the energy counter, or the power reading
//! when there is no counter); utilization, SM clock, memory, temperature and the power reading
//! are read every 100 ms. A source that is missing is said once and recorded as absent: no
//! number is ever made up.

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

use crate::timebase::monotonic_ns;

/// Default NVML library (what nvml-wrapper loads by default).
pub const DEFAULT_NVML_LIB: &str = "libnvidia-ml.so.1";
pub const DEFAULT_POWERCAP_DIR: &str = "/sys/class/powercap";
/// Slow metrics (utilization, clocks, memory, temperature, power reading) are read this often.
const SLOW_EVERY: Duration = Duration::from_millis(100);
/// Samples are handed to the writer this often.
const SEND_EVERY_NS: u64 = 100_000_000;

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
}

impl SamplerCost {
    /// Share of one core, %.
    pub fn core_percent(&self) -> f64 {
        self.cpu_ns as f64 * 100.0 / self.wall_ns.max(1) as f64
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
    let mut cost = SamplerCost { devices, ..Default::default() };
    if devices == 0 {
        cost.cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
        cost.wall_ns = monotonic_ns().saturating_sub(wall_start);
        return cost;
    }

    let slow_every = (SLOW_EVERY.as_nanos() as u64 / interval_ns).max(1);
    let mut batch = Vec::with_capacity(64);
    let mut last_send = monotonic_ns();
    let mut next = last_send;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let slow = cost.ticks.is_multiple_of(slow_every) || stopping;
        for gpu in gpus.iter_mut() {
            gpu.sample(slow, &mut batch, tx);
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
        let now = monotonic_ns();
        if next <= now {
            // Fell behind (a loaded machine): skip the missed ticks rather than bursting.
            next = now + interval_ns;
        }
        std::thread::sleep(Duration::from_nanos(next - now));
    }
    cost.cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
    cost.wall_ns = monotonic_ns().saturating_sub(wall_start);
    note(
        tx,
        None,
        "info",
        format!(
            "sampler: {} device(s), {} ticks of {} ms, {:.1} ms CPU in {:.2} s ({:.3}% of a core)",
            devices,
            cost.ticks,
            interval_ns as f64 / 1e6,
            cost.cpu_ns as f64 / 1e6,
            cost.wall_ns as f64 / 1e9,
            cost.core_percent()
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
            first_mj: None,
            last_power: None,
            integrated_uj: 0.0,
            lost: false,
        };
        Ok((gpu, info))
    }

    fn sample(&mut self, slow: bool, batch: &mut Vec<EnergySample>, tx: &mpsc::Sender<Msg>) {
        if self.lost {
            return;
        }
        let before = monotonic_ns();
        let reading = if self.counter {
            self.device.total_energy_consumption().map(|mj| (Some(mj), None))
        } else {
            self.device.power_usage().map(|mw| (None, Some(mw)))
        };
        let after = monotonic_ns();
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
                return;
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
        if slow {
            if sample.power_mw.is_none() {
                sample.power_mw = self.device.power_usage().ok();
            }
            if let Ok(u) = self.device.utilization_rates() {
                sample.gpu_util = Some(u.gpu.min(100) as u8);
                sample.mem_util = Some(u.memory.min(100) as u8);
            }
            sample.sm_clock_mhz = self.device.clock_info(Clock::SM).ok();
            sample.mem_used_bytes = self.device.memory_info().ok().map(|m| m.used);
            sample.temperature_c = self.device.temperature(TemperatureSensor::Gpu).ok();
        }
        batch.push(sample);
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
