//! The energy report's figures: energy per device over the run, per span name and class
//! (shared within each layer), per process lifetime, and coverage. Pure computation on a
//! loaded [`EnergyRun`]; [`super::json`], [`super::text`] and [`super::csv`] render it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::curve::EnergyCurve;
use super::gpu_side::{GpuSide, gpu_side};
use super::load::{CALLS_LAYER, Device, EnergyRun, Span};
use super::share::{Figure, share};
use crate::shapes::OpShapes;

/// Everything `mlprof energy` reports.
#[derive(Debug, Clone)]
pub struct EnergyReport {
    /// The launched command, or the attach session.
    pub(crate) command_line: String,
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) devices: Vec<DeviceEnergy>,
    /// Sum over the devices that belong to the run, J.
    pub(crate) measured_j: f64,
    pub(crate) measured_uncertainty_j: f64,
    /// What the recorded calls explain, J (the `coverage` of the calls layer).
    pub(crate) attributed_j: f64,
    /// Energy attributed per layer, J (see [`super::load::SpanKey::layer`]).
    pub(crate) layers: BTreeMap<String, f64>,
    /// Per span name, most energy first (the `--ops` table's operators).
    pub(crate) spans: Vec<SpanEnergy>,
    /// Per class, by class name.
    pub(crate) classes: Vec<ClassEnergy>,
    /// Per process, by start time.
    pub(crate) processes: Vec<ProcessEnergy>,
    /// Warnings and errors the collector noted, and why there is no figure at all.
    pub(crate) notes: Vec<String>,
    /// The GPUs' energy split the GPU side's way (runs with a GPU timeline and a measured GPU).
    pub(crate) gpu_side: Option<GpuSideTotals>,
    /// The capture ranges' energy (`None`: no capture option, the run is one range).
    pub(crate) ranges: Option<super::ranges::RangesEnergy>,
}

/// The GPU side's split of the GPUs' energy, J: the ops' kernels, the idle time, the work
/// outside any op; they add up to `measured_j`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuSideTotals {
    pub(crate) ops_j: f64,
    pub(crate) idle_j: f64,
    pub(crate) idle_uncertainty_j: f64,
    pub(crate) outside_j: f64,
    pub(crate) measured_j: f64,
    /// Kernels, copies and memsets on a CUDA device no measured GPU was matched with.
    pub(crate) unmatched_work: usize,
}

/// One device's energy over the run; figures are `None` when its samples do not give two knots.
#[derive(Debug, Clone)]
pub(crate) struct DeviceEnergy {
    pub(crate) id: u32,
    pub(crate) kind: String,
    pub(crate) index: u32,
    pub(crate) uuid: String,
    pub(crate) name: String,
    /// Whether the run used the device (only those count in the total).
    pub(crate) in_run: bool,
    pub(crate) source: String,
    pub(crate) energy_j: Option<f64>,
    pub(crate) uncertainty_j: Option<f64>,
    pub(crate) mean_power_w: Option<f64>,
    pub(crate) samples: usize,
    /// Time of the last sample from the run start, s.
    pub(crate) last_sample_s: Option<f64>,
    pub(crate) errors: Vec<String>,
}

/// One span name: a function, or an ITT task name in its domain.
#[derive(Debug, Clone)]
pub(crate) struct SpanEnergy {
    pub(crate) name: String,
    pub(crate) class: String,
    /// Input shapes and dtypes (ops recorded with `--torch-shapes`; empty otherwise).
    pub(crate) shapes: OpShapes,
    pub(crate) calls: u64,
    pub(crate) median_s: f64,
    /// Mean without values beyond 3σ.
    pub(crate) mean_s: f64,
    pub(crate) time_s: f64,
    pub(crate) energy_j: f64,
    pub(crate) uncertainty_j: f64,
    pub(crate) gpu_j: f64,
    pub(crate) cpu_j: f64,
}

#[derive(Debug, Clone)]
pub(crate) struct ClassEnergy {
    pub(crate) class: String,
    pub(crate) energy_j: f64,
    pub(crate) uncertainty_j: f64,
}

/// A process: its lifetime's share of the run's energy, and the sum of its calls'.
#[derive(Debug, Clone)]
pub(crate) struct ProcessEnergy {
    pub(crate) pid: u32,
    /// The command lines of its images, joined by ` → exec `.
    pub(crate) cmdline: String,
    /// From the run start, s.
    pub(crate) start_s: f64,
    pub(crate) end_s: f64,
    pub(crate) energy_j: f64,
    pub(crate) uncertainty_j: f64,
    pub(crate) spans_energy_j: f64,
    pub(crate) spans_uncertainty_j: f64,
}

impl EnergyReport {
    pub(crate) fn duration_s(&self) -> f64 {
        (self.end_ns - self.start_ns) as f64 / 1e9
    }

    /// `energy` as a fraction of the measured total (0 when nothing was measured).
    pub(crate) fn share_of(&self, energy: f64) -> f64 {
        if self.measured_j > 0.0 { energy / self.measured_j } else { 0.0 }
    }

    pub fn compute(run: &EnergyRun) -> EnergyReport {
        let (devices, curves) = device_energy(run);
        // A loop from +0.0 rather than `Sum`, which starts at -0.0: a run without devices
        // prints `0.0`, as it always has.
        let (mut measured_j, mut measured_var) = (0.0, 0.0);
        for (device, curve) in devices.iter().zip(&curves) {
            if let (Some(_), Some(e), Some(u)) = (curve, device.energy_j, device.uncertainty_j) {
                measured_j += e;
                measured_var += u * u;
            }
        }
        // The devices that belong to the run, with their curves.
        let curves: Vec<(&Device, EnergyCurve)> =
            run.devices.iter().zip(curves).filter_map(|(d, c)| Some((d, c?))).collect();
        let capture = run.meta.capture(run.start_ns, run.end_ns);
        let ranges = super::ranges::of_ranges(&capture, run.start_ns, curves.iter().map(|(_, c)| c));

        let by_layer = share_by_layer(run, &curves);
        let mut classes: BTreeMap<String, Figure> = BTreeMap::new();
        let mut spans = Vec::new();
        let side = gpu_side(run, &curves);
        for (index, (key, (mut figure, mut durations))) in run.keys.iter().zip(by_layer.per_key).enumerate() {
            if let Some(gpu) = side.as_ref().and_then(|side| side.per_key.get(&(index as u32))) {
                figure = with_gpu_side(&figure, gpu);
            }
            classes.entry(key.class.clone()).or_default().add(&figure);
            // A key whose spans all moved to (op, shapes) keys.
            if durations.is_empty() {
                continue;
            }
            let mean_s = trimmed_mean(&durations) / 1e9;
            durations.sort_unstable();
            spans.push(SpanEnergy {
                name: key.name.clone(),
                class: key.class.clone(),
                shapes: key.shapes.clone(),
                calls: durations.len() as u64,
                median_s: median(&durations) / 1e9,
                mean_s,
                time_s: durations.iter().sum::<u64>() as f64 / 1e9,
                energy_j: figure.energy,
                uncertainty_j: figure.uncertainty(),
                gpu_j: figure.gpu,
                cpu_j: figure.cpu,
            });
        }
        let gpu_side = side.map(|side| {
            for row in gpu_side_rows(&side) {
                let class = classes.entry(row.class.clone()).or_default();
                class.energy += row.energy_j;
                class.var += row.uncertainty_j * row.uncertainty_j;
                class.gpu += row.gpu_j;
                spans.push(row);
            }
            GpuSideTotals {
                // From +0.0: `Sum` starts at -0.0, which prints as "-0.000".
                ops_j: side.per_key.values().fold(0.0, |sum, f| sum + f.energy),
                idle_j: side.idle.energy,
                idle_uncertainty_j: side.idle.uncertainty(),
                outside_j: side.outside.energy,
                measured_j: side.measured_j,
                unmatched_work: side.unmatched_work,
            }
        });
        spans.sort_by(|a, b| {
            b.energy_j.total_cmp(&a.energy_j).then(a.name.cmp(&b.name)).then_with(|| a.shapes.cmp(&b.shapes))
        });

        let mut notes: Vec<String> =
            run.notes.iter().filter(|n| n.level != "info").map(|n| n.message.clone()).collect();
        if run.devices.is_empty() {
            notes.push("no energy was recorded (no NVML and no RAPL when the run was collected)".into());
        }
        EnergyReport {
            command_line: run.meta.command_line(),
            start_ns: run.start_ns,
            end_ns: run.end_ns,
            devices,
            measured_j,
            measured_uncertainty_j: measured_var.sqrt(),
            attributed_j: by_layer.layers.get(CALLS_LAYER).copied().unwrap_or(0.0),
            layers: by_layer.layers,
            spans,
            classes: classes
                .into_iter()
                .map(|(class, f)| ClassEnergy { class, energy_j: f.energy, uncertainty_j: f.uncertainty() })
                .collect(),
            processes: process_energy(run, &curves, &by_layer.per_pid),
            notes,
            gpu_side,
            ranges,
        }
    }
}

/// An op's figure with its GPU part taken from the GPU side (the kernels it launched) instead
/// of its host span's share of the GPUs; its CPU part and that part's uncertainty stay.
fn with_gpu_side(host: &Figure, gpu: &Figure) -> Figure {
    let cpu_share = if host.energy > 0.0 { host.cpu / host.energy } else { 1.0 };
    Figure {
        energy: host.cpu + gpu.energy,
        var: host.var * cpu_share + gpu.var,
        gpu: gpu.energy,
        cpu: host.cpu,
    }
}

/// The GPU side's own rows: the GPUs' idle energy, and the work outside any op.
fn gpu_side_rows(side: &GpuSide) -> Vec<SpanEnergy> {
    let row = |name: &str, class: &str, figure: &Figure| SpanEnergy {
        name: name.into(),
        class: class.into(),
        shapes: OpShapes::default(),
        calls: 0,
        median_s: 0.0,
        mean_s: 0.0,
        time_s: 0.0,
        energy_j: figure.energy,
        uncertainty_j: figure.uncertainty(),
        gpu_j: figure.gpu,
        cpu_j: figure.cpu,
    };
    vec![
        row("(GPU idle)", "gpu:idle", &side.idle),
        row("(GPU work outside any op)", "gpu:outside", &side.outside),
    ]
}

/// Each device's energy over the run, and the curve of each device that counts in the total
/// (in the run, with a figure).
fn device_energy(run: &EnergyRun) -> (Vec<DeviceEnergy>, Vec<Option<EnergyCurve>>) {
    let (start, end) = (run.start_ns as f64, run.end_ns as f64);
    let duration = (end - start) / 1e9;
    let mut rows = Vec::new();
    let mut curves = Vec::new();
    for device in &run.devices {
        let curve = EnergyRun::curve(device);
        let (energy, uncertainty) = match &curve {
            Some(c) => {
                let (a, ua) = c.at(start);
                let (b, ub) = c.at(end);
                (Some((b - a) / 1e6), Some((ua + ub) / 1e6))
            }
            None => (None, None),
        };
        let info = &device.info;
        rows.push(DeviceEnergy {
            id: info.id,
            kind: info.kind.clone(),
            index: info.index,
            uuid: info.uuid.clone(),
            name: info.name.clone(),
            in_run: info.in_run,
            source: info.energy_source.clone(),
            energy_j: energy,
            uncertainty_j: uncertainty,
            mean_power_w: energy.map(|e| e / duration.max(1e-9)),
            samples: device.samples.len(),
            last_sample_s: device
                .samples
                .last()
                .map(|s| (s.time_ns.saturating_sub(run.start_ns)) as f64 / 1e9),
            errors: device.notes.iter().filter(|n| n.level == "error").map(|n| n.message.clone()).collect(),
        });
        curves.push(curve.filter(|_| info.in_run && energy.is_some()));
    }
    (rows, curves)
}

/// Span energy, shared within each layer.
struct LayerSharing {
    /// Per span key: its energy, and the durations of its spans (ns).
    per_key: Vec<(Figure, Vec<u64>)>,
    /// Energy of the recorded calls per pid.
    per_pid: HashMap<u32, Figure>,
    /// Energy attributed per layer, J.
    layers: BTreeMap<String, f64>,
}

fn share_by_layer(run: &EnergyRun, curves: &[(&Device, EnergyCurve)]) -> LayerSharing {
    let mut per_key: Vec<(Figure, Vec<u64>)> = vec![(Figure::default(), Vec::new()); run.keys.len()];
    let mut per_pid: HashMap<u32, Figure> = HashMap::new();
    let mut layers: BTreeMap<String, f64> = BTreeMap::new();
    let layer_names: BTreeSet<&str> = run.keys.iter().map(|k| k.layer.as_str()).collect();
    for layer in layer_names {
        let members: Vec<&Span> =
            run.spans.iter().filter(|s| run.keys[s.key as usize].layer == layer).collect();
        let intervals: Vec<(u64, u64)> = members.iter().map(|s| (s.start, s.end)).collect();
        let sharing = share(&intervals, curves);
        layers.insert(layer.to_string(), sharing.attributed);
        for (span, figure) in members.iter().zip(&sharing.per_interval) {
            let (key_figure, durations) = &mut per_key[span.key as usize];
            key_figure.add(figure);
            durations.push(span.end - span.start);
            if layer == CALLS_LAYER {
                let p = per_pid.entry(span.pid).or_default();
                p.energy += figure.energy;
                p.var += figure.var;
            }
        }
    }
    LayerSharing { per_key, per_pid, layers }
}

/// Processes: their lifetimes share the run like spans do.
fn process_energy(
    run: &EnergyRun,
    curves: &[(&Device, EnergyCurve)],
    calls_by_pid: &HashMap<u32, Figure>,
) -> Vec<ProcessEnergy> {
    let mut lifetimes: Vec<(u32, String, u64, u64)> = Vec::new();
    for (pid, images) in &run.meta.images {
        let Some(first) = images.first() else { continue };
        let cmdline = images.iter().map(|i| i.info.argv.join(" ")).collect::<Vec<_>>().join(" → exec ");
        let end =
            images.iter().filter_map(|i| i.exit.as_ref().map(|e| e.time_ns)).max().unwrap_or(run.end_ns);
        let start = first.info.start_ns.clamp(run.start_ns, run.end_ns);
        lifetimes.push((*pid, cmdline, start, end.clamp(start, run.end_ns)));
    }
    lifetimes.sort_by_key(|l| (l.2, l.0));
    let sharing = share(&lifetimes.iter().map(|l| (l.2, l.3)).collect::<Vec<_>>(), curves);
    lifetimes
        .into_iter()
        .zip(&sharing.per_interval)
        .map(|((pid, cmdline, start, end), figure)| {
            let calls = calls_by_pid.get(&pid).copied().unwrap_or_default();
            ProcessEnergy {
                pid,
                cmdline,
                start_s: (start - run.start_ns) as f64 / 1e9,
                end_s: (end - run.start_ns) as f64 / 1e9,
                energy_j: figure.energy,
                uncertainty_j: figure.uncertainty(),
                spans_energy_j: calls.energy,
                spans_uncertainty_j: calls.uncertainty(),
            }
        })
        .collect()
}

fn median(sorted: &[u64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2] as f64,
        n => (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0,
    }
}

/// Mean after dropping values more than 3σ from the mean.
fn trimmed_mean(values: &[u64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
    let sd = (values.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
    let kept: Vec<f64> =
        values.iter().map(|&v| v as f64).filter(|v| sd == 0.0 || (v - mean).abs() <= 3.0 * sd).collect();
    if kept.is_empty() { mean } else { kept.iter().sum::<f64>() / kept.len() as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::energy::load::SpanKey;
    use crate::run::RunMeta;

    const SECOND: u64 = 1_000_000_000;

    /// One GPU at 1 W for 10 s; a `read` over 0–4 s and a `write` over 2–6 s.
    fn run() -> EnergyRun {
        let device = crate::energy::testing::gpu(&[(0, 0), (10 * SECOND, 10_000_000)]);
        let key = |name: &str| SpanKey {
            name: name.into(),
            class: name.into(),
            layer: CALLS_LAYER.into(),
            shapes: Default::default(),
        };
        EnergyRun {
            meta: RunMeta::default(),
            devices: vec![device],
            notes: Vec::new(),
            keys: vec![key("read"), key("write")],
            spans: vec![
                Span { start: 0, end: 4 * SECOND, key: 0, pid: 7, tid: 7 },
                Span { start: 2 * SECOND, end: 6 * SECOND, key: 1, pid: 7, tid: 7 },
            ],
            gpu_work: Vec::new(),
            start_ns: 0,
            end_ns: 10 * SECOND,
        }
    }

    #[test]
    fn spans_share_the_measured_energy() {
        let report = EnergyReport::compute(&run());
        assert!((report.measured_j - 10.0).abs() < 1e-9);
        assert!((report.attributed_j - 6.0).abs() < 1e-9);
        assert!((report.share_of(report.attributed_j) - 0.6).abs() < 1e-9);
        assert_eq!(report.spans.len(), 2);
        for span in &report.spans {
            assert!((span.energy_j - 3.0).abs() < 1e-9 && (span.gpu_j - 3.0).abs() < 1e-9);
            assert!((span.time_s - 4.0).abs() < 1e-12 && (span.median_s - 4.0).abs() < 1e-12);
        }
        assert_eq!(report.devices[0].mean_power_w.map(|p| (p - 1.0).abs() < 1e-9), Some(true));
        assert!(report.notes.is_empty());
    }

    #[test]
    fn a_run_without_devices_says_so() {
        let mut run = run();
        run.devices.clear();
        let report = EnergyReport::compute(&run);
        assert_eq!((report.measured_j, report.attributed_j), (0.0, 0.0));
        // +0.0, not -0.0: it prints as `0.0`.
        assert!(report.measured_j.is_sign_positive());
        assert_eq!(report.notes.len(), 1);
    }

    #[test]
    fn trimmed_mean_drops_outliers() {
        let mut v = vec![10u64; 50];
        v.push(100_000);
        assert!((trimmed_mean(&v) - 10.0).abs() < 1e-9);
        assert_eq!(trimmed_mean(&[]), 0.0);
    }

    #[test]
    fn median_of_even_count_is_the_middle_pair_mean() {
        assert_eq!(median(&[1, 2, 3, 10]), 2.5);
        assert_eq!(median(&[4]), 4.0);
        assert_eq!(median(&[]), 0.0);
    }
}
