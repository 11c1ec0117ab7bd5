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
//!
//! [`COUNTER_BUDGET`]: schedule::COUNTER_BUDGET
//! [`MAX_GAP_NS`]: schedule::MAX_GAP_NS

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use mlprof_format::energy::{EnergyDevice, EnergyNote, EnergySample};
use mlprof_format::runfile::RunWriter;

use crate::timebase::monotonic_ns;

mod nvml;
mod rapl;
mod schedule;

use nvml::Gpu;
use rapl::RaplZone;
use schedule::{SLOW_BUDGET, Spacing, due};

/// Default NVML library (what nvml-wrapper loads by default).
pub const DEFAULT_NVML_LIB: &str = "libnvidia-ml.so.1";
pub const DEFAULT_POWERCAP_DIR: &str = "/sys/class/powercap";
/// Slow metrics (utilization, clocks, memory, temperature, power reading) are read this often,
/// or less often where they cost more than [`SLOW_BUDGET`].
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

/// The sampler thread: opens the devices, says once what is missing, samples until stopped
/// ([`Ticks`]), and returns what it cost.
fn sample_loop(config: &EnergyConfig, tx: &mpsc::Sender<Msg>, stop: &AtomicBool) -> SamplerCost {
    let cpu_start = thread_cpu_ns();
    let wall_start = monotonic_ns();
    let interval_ns = config.interval.as_nanos().clamp(1_000_000, 60_000_000_000) as u64;
    let mut missing = Vec::new();

    let nvml = match nvml::open_nvml(&config.nvml_lib) {
        Ok(nvml) => Some(nvml),
        Err(why) => {
            missing.push(format!("no NVML ({}: {why}), no GPU energy", config.nvml_lib.display()));
            None
        }
    };
    let mut gpus = match &nvml {
        Some(nvml) => nvml::open_gpus(nvml, config, interval_ns, tx, &mut missing),
        None => Vec::new(),
    };
    let mut zones = rapl::open_zones(&config.powercap_dir, interval_ns, tx, &mut missing);
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

    cost.ticks = Ticks::new(interval_ns).run(&mut gpus, &mut zones, tx, stop);
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

/// The sampling loop's clock: when the next tick, the next slow metrics and the next power
/// reading are due, and the samples gathered since they were last handed to the writer.
struct Ticks {
    /// The tick, ns.
    interval_ns: u64,
    /// The slow metrics' and the power reading's period, ns: [`SLOW_EVERY`], the tick at least.
    slow_ns: u64,
    batch: Vec<EnergySample>,
    last_send: u64,
    next: u64,
    next_slow: u64,
    next_power: u64,
    /// Slow metrics are spaced like the counters, within SLOW_BUDGET of a core for all GPUs
    /// together (queries no H200 measurement covered may be slow elsewhere).
    slow_reads: Spacing,
    /// What the slow metrics' reads cost since the last slow tick (CPU ns).
    metrics_ns: u64,
}

impl Ticks {
    fn new(interval_ns: u64) -> Ticks {
        let slow_ns = (SLOW_EVERY.as_nanos() as u64).max(interval_ns);
        let batch = Vec::with_capacity(64);
        let last_send = monotonic_ns();
        Ticks {
            interval_ns,
            slow_ns,
            batch,
            last_send,
            next: last_send,
            next_slow: last_send,
            next_power: last_send,
            slow_reads: Spacing::new(SLOW_BUDGET, slow_ns),
            metrics_ns: 0,
        }
    }

    /// Samples every tick until `stop` is set, then once more (the last reading); returns the
    /// ticks made.
    fn run(
        mut self,
        gpus: &mut [Gpu<'_>],
        zones: &mut [RaplZone],
        tx: &mpsc::Sender<Msg>,
        stop: &AtomicBool,
    ) -> u64 {
        let mut ticks = 0;
        loop {
            let stopping = stop.load(Ordering::Acquire);
            self.sample(gpus, zones, stopping, tx);
            ticks += 1;
            self.send(stopping, tx);
            if stopping {
                break;
            }
            self.plan_next(gpus, zones);
            self.wait(stop);
        }
        ticks
    }

    /// One tick's readings: what each GPU has due (all of it when `stopping`), and every zone.
    fn sample(
        &mut self,
        gpus: &mut [Gpu<'_>],
        zones: &mut [RaplZone],
        stopping: bool,
        tx: &mpsc::Sender<Msg>,
    ) {
        let now = monotonic_ns();
        let slow = now >= self.next_slow || stopping;
        // The power reading keeps its 100 ms whatever the other metrics cost: the reports shape
        // the energy between sparse counter reads with it.
        let power = now >= self.next_power || slow;
        if power {
            self.next_power = due(now, self.slow_ns, self.interval_ns);
        }
        for gpu in gpus.iter_mut() {
            self.metrics_ns += gpu.sample(power, slow, stopping, &mut self.batch, tx);
        }
        if slow {
            self.slow_reads.record(std::mem::take(&mut self.metrics_ns));
            self.next_slow = due(now, self.slow_reads.gap(), self.interval_ns);
        }
        for zone in zones.iter_mut() {
            zone.sample(&mut self.batch, tx);
        }
    }

    /// Hands the samples over every [`SEND_EVERY_NS`], and at the end.
    fn send(&mut self, stopping: bool, tx: &mpsc::Sender<Msg>) {
        let now = monotonic_ns();
        if stopping || now.saturating_sub(self.last_send) >= SEND_EVERY_NS {
            self.last_send = now;
            if !self.batch.is_empty() {
                let _ = tx.send(Msg::Samples(std::mem::take(&mut self.batch)));
            }
        }
    }

    /// When the next tick is: the next one, or with nothing read at every tick the first read
    /// due; never one already past.
    fn plan_next(&mut self, gpus: &[Gpu<'_>], zones: &[RaplZone]) {
        self.next += self.interval_ns;
        if zones.is_empty() && gpus.iter().all(|g| g.lost || g.counter) {
            // Nothing is read at every tick (each counter has its read scheduled): sleep until
            // something is due instead of waking 100 times a second for nothing, which cost
            // ~0.5 % of a core on an H200 VM.
            let due = gpus
                .iter()
                .filter(|g| !g.lost)
                .map(|g| g.next_counter_ns)
                .fold(self.next_slow.min(self.next_power), u64::min);
            self.next = self.next.max(due);
        }
        let now = monotonic_ns();
        if self.next <= now {
            // Fell behind (a loaded machine): skip the missed ticks rather than bursting.
            self.next = now + self.interval_ns;
        }
    }

    /// Waits for the next tick. Parked, not slept: `Sampler::stop` unparks the thread so the
    /// last reading is not held back by a long wait.
    fn wait(&self, stop: &AtomicBool) {
        loop {
            let now = monotonic_ns();
            if now >= self.next || stop.load(Ordering::Acquire) {
                break;
            }
            std::thread::park_timeout(Duration::from_nanos(self.next - now));
        }
    }
}
