//! `mlprof energy`: energy per device, per process and per span name, with uncertainties and
//! coverage; the operator table (`--ops`, `--csv`); and the energy counter tracks of
//! `mlprof convert`.
//!
//! **Energy of an interval.** Each device's cumulative energy is known at its counter updates
//! ("knots"): a sample whose value differs from the one before. A counter sampled faster than
//! it updates (NVML's, about every 100 ms) repeats values; its update happened between the last
//! sample that showed the old value and the first that shows the new one, and the knot is put
//! halfway (timing uncertainty: half that gap). Between knots energy is interpolated linearly;
//! before the first and after the last knot it is extrapolated with the nearest segment's power.
//!
//! **Uncertainty of E(t).** Inside a segment of duration Δ and mean power P: ¼·Δ·|ΔP| (the
//! largest error of linear interpolation when power steps by ΔP somewhere in the segment; ΔP is
//! the largest difference to the neighbouring segments' mean powers) plus P × the knots' timing
//! uncertainty; outside the knots, half the extrapolated energy. An interval [a, b] has
//! E(b) − E(a) ± (u(a) + u(b)).
//!
//! **Attribution.** The run is cut at every span boundary. The energy of each piece is shared
//! equally by the spans active in it (spans overlapping on different threads share in
//! proportion to their overlap); pieces with no span are unattributed. Coverage = attributed /
//! measured. A span's uncertainty is its share of u at its two ends; sums of many spans add
//! uncertainties in quadrature. Processes share their lifetimes the same way.
//!
//! **Layers.** Sharing happens within a layer: the recorded calls (libc, CUDA, NCCL) are one
//! layer, the ITT spans of each domain another (`itt:PyTorch` ops, `itt:mlprof.phase` phases,
//! `itt:mlprof.data` DataLoader spans, an application's own domains). A phase thus gets the
//! whole energy of its interval, not a share diluted by the ops and calls nested in it; the
//! coverage of each layer is reported (`coverage_by_layer`), and `coverage` is the calls'.

use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use mlprof_format::energy::{
    DEVICE_CPU_DRAM, DEVICE_CPU_PACKAGE, DEVICE_GPU, EnergyDevice, EnergyNote, EnergySample,
    SOURCE_NVML_COUNTER,
};
use mlprof_format::func::{Class, Func};
use mlprof_format::record::IttSpan;
use mlprof_format::runfile::Frame;
use serde_json::{Value, json};

use crate::run::{self, RunMeta};

/// Pseudo-process ids of the device tracks in the trace: `TRACK_PID_BASE + device id`.
pub const TRACK_PID_BASE: u32 = 0x7fff_0000;

// ---------------------------------------------------------------------------------------------
// A device's energy as a function of time

struct Knot {
    t: f64,
    e: f64,
    /// Timing uncertainty of `t`, ns.
    h: f64,
}

pub struct EnergyCurve {
    knots: Vec<Knot>,
    /// Mean power of each segment (knots[i]..knots[i+1]), µJ/ns.
    power: Vec<f64>,
}

impl EnergyCurve {
    /// From a device's samples in time order; `None` when they do not give two knots.
    pub fn new(samples: &[(u64, u64)], counter: bool) -> Option<EnergyCurve> {
        let mut knots: Vec<Knot> = Vec::new();
        if !counter {
            // A source at least as fresh as its sampling (RAPL, integrated power): every sample
            // is a knot.
            for &(t, e) in samples {
                if knots.last().is_none_or(|k| (t as f64) > k.t) {
                    let e = knots.last().map_or(e as f64, |k| k.e.max(e as f64));
                    knots.push(Knot { t: t as f64, e, h: 0.0 });
                }
            }
        }
        let mut previous: Option<(u64, u64, bool)> = None; // (time, value, that sample changed)
        for &(t, e) in samples.iter().filter(|_| counter) {
            match previous {
                None => previous = Some((t, e, false)),
                Some((pt, pe, pchanged)) => {
                    if t <= pt {
                        continue;
                    }
                    let changed = e != pe;
                    if changed && e > pe {
                        let knot = if pchanged {
                            Knot { t: t as f64, e: e as f64, h: 0.0 }
                        } else {
                            let gap = (t - pt) as f64;
                            Knot { t: pt as f64 + gap / 2.0, e: e as f64, h: gap / 2.0 }
                        };
                        knots.push(knot);
                    }
                    previous = Some((t, e.max(pe), changed));
                }
            }
        }
        if counter
            && knots.len() >= 2
            && let Some(&(t0, e0)) = samples.first()
        {
            // The first reading's value dates from the update before it: with updates every
            // `period`, one period before the first change seen (and no later than the reading).
            let mut gaps: Vec<f64> = knots.windows(2).map(|w| w[1].t - w[0].t).collect();
            gaps.sort_by(f64::total_cmp);
            let period = gaps[gaps.len() / 2];
            let t = (knots[0].t - period).min(t0 as f64);
            if t < knots[0].t && (e0 as f64) < knots[0].e {
                knots.insert(0, Knot { t, e: e0 as f64, h: knots[0].h.max(1.0) });
            }
        }
        if knots.len() < 2 {
            return None;
        }
        let power = knots.windows(2).map(|w| (w[1].e - w[0].e) / (w[1].t - w[0].t).max(1.0)).collect();
        Some(EnergyCurve { knots, power })
    }

    /// The segment holding `t` (clamped to the first/last).
    fn segment(&self, t: f64) -> usize {
        let after = self.knots.partition_point(|k| k.t <= t);
        after.saturating_sub(1).min(self.power.len() - 1)
    }

    /// How much power changes around segment `j`: the largest difference between its mean
    /// power and its neighbours', µJ/ns.
    fn power_change(&self, j: usize) -> f64 {
        let p = self.power[j];
        let prev = if j > 0 { (p - self.power[j - 1]).abs() } else { 0.0 };
        let next = if j + 1 < self.power.len() { (p - self.power[j + 1]).abs() } else { 0.0 };
        prev.max(next)
    }

    /// Uncertainty of the energy of [a, b]: the two ends' uncertainties, or for a short
    /// interval (b − a) × the power change around it, whichever is smaller.
    pub fn interval_uncertainty(&self, a: f64, b: f64, ua: f64, ub: f64) -> f64 {
        let short = (b - a) * self.power_change(self.segment(a)).max(self.power_change(self.segment(b)));
        (ua + ub).min(short.max(0.0))
    }

    /// Cumulative energy at `t`, µJ, and its uncertainty.
    pub fn at(&self, t: f64) -> (f64, f64) {
        let first = &self.knots[0];
        let last = &self.knots[self.knots.len() - 1];
        if t <= first.t {
            let p = self.power[0];
            let extra = first.t - t;
            return (first.e - p * extra, extra * self.power_change(0) + p * first.h);
        }
        if t >= last.t {
            let j = self.power.len() - 1;
            let p = self.power[j];
            let extra = t - last.t;
            return (last.e + p * extra, extra * self.power_change(j) + p * last.h);
        }
        let j = self.segment(t);
        let (a, b) = (&self.knots[j], &self.knots[j + 1]);
        let p = self.power[j];
        let e = a.e + p * (t - a.t);
        let interp = (b.t - a.t) / 4.0 * self.power_change(j);
        // At a knot the value is exact but its time is not.
        (e, interp + p * a.h.max(b.h))
    }
}

// ---------------------------------------------------------------------------------------------
// Loading

pub struct Device {
    pub info: EnergyDevice,
    pub samples: Vec<EnergySample>,
    pub notes: Vec<EnergyNote>,
}

struct Span {
    start: u64,
    end: u64,
    key: u32,
    pid: u32,
}

struct SpanKey {
    name: String,
    class: String,
    /// Spans of one layer share the run's energy among themselves: the recorded calls form one
    /// layer, and each ITT domain (PyTorch ops, mlprof.phase, an application's own) another, so
    /// a phase is not diluted by the ops and calls nested inside it.
    layer: String,
}

/// The layer of the recorded calls (libc, CUDA, NCCL).
const CALLS_LAYER: &str = "calls";

pub struct EnergyRun {
    meta: RunMeta,
    devices: Vec<Device>,
    notes: Vec<EnergyNote>,
    keys: Vec<SpanKey>,
    spans: Vec<Span>,
    start_ns: u64,
    end_ns: u64,
}

fn class_name(func: Func) -> String {
    format!("{:?}", func.class()).to_lowercase()
}

impl EnergyRun {
    pub fn load(path: &Path) -> Result<EnergyRun, String> {
        let meta = RunMeta::load(path)?;
        let mut reader = run::open(path)?;
        let mut devices: BTreeMap<u32, Device> = BTreeMap::new();
        let mut notes = Vec::new();
        let mut keys = Vec::new();
        let mut key_of: HashMap<(u16, u64, u64), u32> = HashMap::new();
        let mut spans = Vec::new();
        let mut last_ns = meta.info.start_mono_ns;
        while let Some(frame) = reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))? {
            match frame {
                Frame::EnergyDevice(info) => {
                    devices.entry(info.id).or_insert_with(|| Device {
                        info: info.clone(),
                        samples: Vec::new(),
                        notes: Vec::new(),
                    });
                }
                Frame::EnergySamples(samples) => {
                    for sample in samples {
                        last_ns = last_ns.max(sample.time_ns);
                        if let Some(device) = devices.get_mut(&sample.device) {
                            device.samples.push(sample);
                        }
                    }
                }
                Frame::EnergyNote(note) => match note.device.and_then(|d| devices.get_mut(&d)) {
                    Some(device) => device.notes.push(note),
                    None => notes.push(note),
                },
                Frame::Events(events) => {
                    for event in events {
                        let Some(func) = Func::from_id(event.kind) else {
                            continue;
                        };
                        // ITT spans are named after their task and grouped by domain; ITT
                        // instants (markers, pause) have no duration to attribute.
                        let (name_id, domain_id) = match func.class() {
                            Class::Instant => continue,
                            Class::Span => {
                                let span = IttSpan::from_event(event);
                                (span.name, span.domain)
                            }
                            _ => (0, 0),
                        };
                        let key = *key_of.entry((event.kind, name_id, domain_id)).or_insert_with(|| {
                            keys.push(if func.class() == Class::Span {
                                let domain = format!("itt:{}", meta.string(domain_id));
                                let name =
                                    if name_id == 0 { func.name().to_string() } else { meta.string(name_id) };
                                SpanKey { name, class: domain.clone(), layer: domain }
                            } else {
                                SpanKey {
                                    name: func.name().to_string(),
                                    class: class_name(func),
                                    layer: CALLS_LAYER.into(),
                                }
                            });
                            (keys.len() - 1) as u32
                        });
                        let end = event.start.saturating_add(event.dur);
                        last_ns = last_ns.max(end);
                        spans.push(Span { start: event.start, end, key, pid: event.pid });
                    }
                }
                _ => {}
            }
        }
        let start_ns = meta.info.start_mono_ns;
        let end_ns =
            meta.end.as_ref().map(|e| e.end_ns).filter(|&e| e > start_ns).unwrap_or(last_ns).max(start_ns);
        let mut devices: Vec<Device> = devices.into_values().collect();
        for device in &mut devices {
            device.samples.sort_by_key(|s| s.time_ns);
        }
        for span in &mut spans {
            span.start = span.start.clamp(start_ns, end_ns);
            span.end = span.end.clamp(span.start, end_ns);
        }
        Ok(EnergyRun { meta, devices, notes, keys, spans, start_ns, end_ns })
    }

    fn curve(device: &Device) -> Option<EnergyCurve> {
        let points: Vec<(u64, u64)> =
            device.samples.iter().filter_map(|s| s.energy_uj.map(|e| (s.time_ns, e))).collect();
        EnergyCurve::new(&points, device.info.energy_source == SOURCE_NVML_COUNTER)
    }
}

// ---------------------------------------------------------------------------------------------
// Attribution

#[derive(Default, Clone, Copy)]
struct Figure {
    /// J
    energy: f64,
    /// Squared uncertainty, J².
    var: f64,
    gpu: f64,
    cpu: f64,
}

impl Figure {
    fn uncertainty(&self) -> f64 {
        self.var.sqrt()
    }
}

/// Shares each device's energy among `intervals` (start, end) by the overlap rule; returns per
/// interval (energy J, variance J²), by device kind, and the attributed total J.
struct Sharing {
    per_interval: Vec<Figure>,
    attributed: f64,
}

fn share(intervals: &[(u64, u64)], curves: &[(&Device, EnergyCurve)]) -> Sharing {
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

fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

pub struct Op {
    pub name: String,
    pub class: String,
    pub calls: u64,
    pub median_s: f64,
    pub mean_s: f64,
    pub time_s: f64,
    pub energy_j: f64,
    pub uncertainty_j: f64,
    pub gpu_j: f64,
    pub cpu_j: f64,
}

pub struct Report {
    run: EnergyRun,
    device_rows: Vec<Value>,
    measured_j: f64,
    measured_unc: f64,
    attributed_j: f64,
    /// Energy attributed per layer (see `SpanKey::layer`).
    layers: BTreeMap<String, f64>,
    ops: Vec<Op>,
    processes: Vec<Value>,
    classes: BTreeMap<String, Figure>,
}

impl Report {
    pub fn compute(path: &Path) -> Result<Report, String> {
        let run = EnergyRun::load(path)?;
        let (start, end) = (run.start_ns as f64, run.end_ns as f64);
        let mut device_rows = Vec::new();
        let mut curves: Vec<(&Device, EnergyCurve)> = Vec::new();
        let mut measured_j = 0.0;
        let mut measured_var = 0.0;
        for device in &run.devices {
            let curve = EnergyRun::curve(device);
            let (energy, unc) = match &curve {
                Some(c) => {
                    let (a, ua) = c.at(start);
                    let (b, ub) = c.at(end);
                    (Some((b - a) / 1e6), Some((ua + ub) / 1e6))
                }
                None => (None, None),
            };
            let duration = (end - start) / 1e9;
            let samples = &device.samples;
            let errors: Vec<&str> =
                device.notes.iter().filter(|n| n.level == "error").map(|n| n.message.as_str()).collect();
            let last_sample_s = samples.last().map(|s| (s.time_ns.saturating_sub(run.start_ns)) as f64 / 1e9);
            device_rows.push(json!({
                "id": device.info.id,
                "kind": device.info.kind,
                "index": device.info.index,
                "uuid": device.info.uuid,
                "name": device.info.name,
                "in_run": device.info.in_run,
                "source": device.info.energy_source,
                "energy_j": energy.map(|e| round(e, 6)),
                "uncertainty_j": unc.map(|u| round(u, 6)),
                "mean_power_w": energy.map(|e| round(e / duration.max(1e-9), 4)),
                "samples": samples.len(),
                "last_sample_s": last_sample_s.map(|s| round(s, 6)),
                "errors": errors,
            }));
            if device.info.in_run
                && let (Some(e), Some(u), Some(c)) = (energy, unc, curve)
            {
                measured_j += e;
                measured_var += u * u;
                curves.push((device, c));
            }
        }

        // Spans by name, shared within each layer.
        let mut by_key: Vec<Figure> = vec![Figure::default(); run.keys.len()];
        let mut durations: Vec<Vec<u64>> = vec![Vec::new(); run.keys.len()];
        let mut by_pid: HashMap<u32, Figure> = HashMap::new();
        let mut layers: BTreeMap<String, f64> = BTreeMap::new();
        let layer_names: std::collections::BTreeSet<&str> =
            run.keys.iter().map(|k| k.layer.as_str()).collect();
        let mut attributed_calls = 0.0;
        for layer in layer_names {
            let members: Vec<&Span> =
                run.spans.iter().filter(|s| run.keys[s.key as usize].layer == layer).collect();
            let intervals: Vec<(u64, u64)> = members.iter().map(|s| (s.start, s.end)).collect();
            let sharing = share(&intervals, &curves);
            layers.insert(layer.to_string(), sharing.attributed);
            if layer == CALLS_LAYER {
                attributed_calls = sharing.attributed;
            }
            for (span, figure) in members.iter().zip(&sharing.per_interval) {
                let k = &mut by_key[span.key as usize];
                k.energy += figure.energy;
                k.var += figure.var;
                k.gpu += figure.gpu;
                k.cpu += figure.cpu;
                durations[span.key as usize].push(span.end - span.start);
                if layer == CALLS_LAYER {
                    let p = by_pid.entry(span.pid).or_default();
                    p.energy += figure.energy;
                    p.var += figure.var;
                }
            }
        }
        let mut classes: BTreeMap<String, Figure> = BTreeMap::new();
        let mut ops = Vec::new();
        for (index, key) in run.keys.iter().enumerate() {
            let figure = by_key[index];
            let c = classes.entry(key.class.clone()).or_default();
            c.energy += figure.energy;
            c.var += figure.var;
            c.gpu += figure.gpu;
            c.cpu += figure.cpu;
            let mut d = std::mem::take(&mut durations[index]);
            let mean_s = trimmed_mean(&d) / 1e9;
            d.sort_unstable();
            ops.push(Op {
                name: key.name.clone(),
                class: key.class.clone(),
                calls: d.len() as u64,
                median_s: median(&d) / 1e9,
                mean_s,
                time_s: d.iter().sum::<u64>() as f64 / 1e9,
                energy_j: figure.energy,
                uncertainty_j: figure.uncertainty(),
                gpu_j: figure.gpu,
                cpu_j: figure.cpu,
            });
        }
        ops.sort_by(|a, b| b.energy_j.total_cmp(&a.energy_j).then(a.name.cmp(&b.name)));

        // Processes: lifetimes share the run like spans do.
        let mut lifetimes: Vec<(u32, String, u64, u64)> = Vec::new();
        for (pid, images) in &run.meta.images {
            let Some(first) = images.first() else { continue };
            let cmdline = images.iter().map(|i| i.info.argv.join(" ")).collect::<Vec<_>>().join(" → exec ");
            let end =
                images.iter().filter_map(|i| i.exit.as_ref().map(|e| e.time_ns)).max().unwrap_or(run.end_ns);
            let s = first.info.start_ns.clamp(run.start_ns, run.end_ns);
            lifetimes.push((*pid, cmdline, s, end.clamp(s, run.end_ns)));
        }
        lifetimes.sort_by_key(|l| (l.2, l.0));
        let life_sharing = share(&lifetimes.iter().map(|l| (l.2, l.3)).collect::<Vec<_>>(), &curves);
        let processes = lifetimes
            .iter()
            .zip(&life_sharing.per_interval)
            .map(|((pid, cmdline, s, e), figure)| {
                let spans = by_pid.get(pid).copied().unwrap_or_default();
                json!({
                    "pid": pid,
                    "cmdline": cmdline,
                    "start_s": round((s - run.start_ns) as f64 / 1e9, 6),
                    "end_s": round((e - run.start_ns) as f64 / 1e9, 6),
                    "energy_j": round(figure.energy, 6),
                    "uncertainty_j": round(figure.uncertainty(), 6),
                    "spans_energy_j": round(spans.energy, 6),
                    "spans_uncertainty_j": round(spans.uncertainty(), 6),
                })
            })
            .collect();

        Ok(Report {
            attributed_j: attributed_calls,
            layers,
            device_rows,
            measured_j,
            measured_unc: measured_var.sqrt(),
            ops,
            processes,
            classes,
            run,
        })
    }

    fn share_of(&self, energy: f64) -> f64 {
        if self.measured_j > 0.0 { energy / self.measured_j } else { 0.0 }
    }

    fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> =
            self.run.notes.iter().filter(|n| n.level != "info").map(|n| n.message.clone()).collect();
        if self.run.devices.is_empty() {
            notes.push("no energy was recorded (no NVML and no RAPL when the run was collected)".into());
        }
        notes
    }

    pub fn to_json(&self) -> Value {
        let duration_s = (self.run.end_ns - self.run.start_ns) as f64 / 1e9;
        let spans: Vec<Value> = self
            .ops
            .iter()
            .map(|op| {
                json!({
                    "name": op.name,
                    "class": op.class,
                    "calls": op.calls,
                    "time_s": round(op.time_s, 9),
                    "energy_j": round(op.energy_j, 6),
                    "uncertainty_j": round(op.uncertainty_j, 6),
                    "gpu_j": round(op.gpu_j, 6),
                    "cpu_j": round(op.cpu_j, 6),
                    "share": round(self.share_of(op.energy_j), 6),
                })
            })
            .collect();
        let classes: Vec<Value> = self
            .classes
            .iter()
            .map(|(class, f)| {
                json!({
                    "class": class,
                    "energy_j": round(f.energy, 6),
                    "uncertainty_j": round(f.uncertainty(), 6),
                    "share": round(self.share_of(f.energy), 6),
                })
            })
            .collect();
        json!({
            "duration_s": round(duration_s, 9),
            "start_ns": self.run.start_ns,
            "end_ns": self.run.end_ns,
            "devices": self.device_rows,
            "total": {
                "energy_j": round(self.measured_j, 6),
                "uncertainty_j": round(self.measured_unc, 6),
                "mean_power_w": round(self.measured_j / duration_s.max(1e-9), 4),
            },
            "processes": self.processes,
            "spans": spans,
            "classes": classes,
            "coverage": {
                "attributed_j": round(self.sharing_attributed(), 6),
                "measured_j": round(self.measured_j, 6),
                "fraction": round(self.share_of(self.sharing_attributed()), 6),
            },
            "coverage_by_layer": self.layers.iter().map(|(layer, attributed)| json!({
                "layer": layer,
                "attributed_j": round(*attributed, 6),
                "fraction": round(self.share_of(*attributed), 6),
            })).collect::<Vec<Value>>(),
            "notes": self.notes(),
        })
    }

    fn sharing_attributed(&self) -> f64 {
        self.attributed_j
    }

    pub fn print_text(&self, top: usize) {
        let duration_s = (self.run.end_ns - self.run.start_ns) as f64 / 1e9;
        println!("Energy of {} ({:.3} s)", self.run.meta.command_line(), duration_s);
        for note in self.notes() {
            println!("  note: {note}");
        }
        println!();
        println!("{:<28} {:<17} {:>12} {:>10} {:>10}  uuid", "device", "source", "energy J", "± J", "mean W");
        for row in &self.device_rows {
            let name = format!(
                "{}{}",
                row["name"].as_str().unwrap_or(""),
                if row["in_run"].as_bool() == Some(true) { "" } else { " (not in run)" }
            );
            let fmt =
                |v: &Value, d: usize| v.as_f64().map(|x| format!("{x:.d$}")).unwrap_or_else(|| "-".into());
            println!(
                "{:<28} {:<17} {:>12} {:>10} {:>10}  {}",
                name,
                row["source"].as_str().unwrap_or(""),
                fmt(&row["energy_j"], 3),
                fmt(&row["uncertainty_j"], 3),
                fmt(&row["mean_power_w"], 2),
                row["uuid"].as_str().unwrap_or("")
            );
            if let Some(errors) = row["errors"].as_array() {
                for e in errors {
                    println!("    error: {}", e.as_str().unwrap_or(""));
                }
            }
        }
        println!(
            "{:<28} {:<17} {:>12.3} {:>10.3} {:>10.2}",
            "run total",
            "",
            self.measured_j,
            self.measured_unc,
            self.measured_j / duration_s.max(1e-9)
        );
        println!();
        println!(
            "coverage: spans explain {:.3} J of {:.3} J measured ({:.1}%)",
            self.attributed_j,
            self.measured_j,
            self.share_of(self.attributed_j) * 100.0
        );
        println!();
        println!(
            "{:<8} {:>12} {:>10} {:>12} {:>10}  command",
            "pid", "energy J", "± J", "in calls J", "share"
        );
        for p in &self.processes {
            let e = p["energy_j"].as_f64().unwrap_or(0.0);
            println!(
                "{:<8} {:>12.3} {:>10.3} {:>12.3} {:>9.1}%  {}",
                p["pid"],
                e,
                p["uncertainty_j"].as_f64().unwrap_or(0.0),
                p["spans_energy_j"].as_f64().unwrap_or(0.0),
                self.share_of(e) * 100.0,
                p["cmdline"].as_str().unwrap_or("")
            );
        }
        println!();
        println!(
            "{:<24} {:<10} {:>10} {:>12} {:>10} {:>8}",
            "span", "class", "calls", "energy J", "± J", "share"
        );
        for op in self.ops.iter().take(top) {
            println!(
                "{:<24} {:<10} {:>10} {:>12.4} {:>10.4} {:>7.2}%",
                op.name,
                op.class,
                op.calls,
                op.energy_j,
                op.uncertainty_j,
                self.share_of(op.energy_j) * 100.0
            );
        }
        println!();
        println!("{:<24} {:>12} {:>10} {:>8}", "class", "energy J", "± J", "share");
        for (class, f) in &self.classes {
            println!(
                "{:<24} {:>12.4} {:>10.4} {:>7.2}%",
                class,
                f.energy,
                f.uncertainty(),
                self.share_of(f.energy) * 100.0
            );
        }
    }

    /// The operator table as text.
    pub fn print_ops(&self) {
        println!(
            "{:<24} {:>10} {:>12} {:>12} {:>14} {:>12} {:>8}",
            "op", "calls", "median ms", "mean ms", "J per call", "± J", "share"
        );
        for op in &self.ops {
            let calls = op.calls.max(1) as f64;
            println!(
                "{:<24} {:>10} {:>12.4} {:>12.4} {:>14.6} {:>12.6} {:>7.2}%",
                op.name,
                op.calls,
                op.median_s * 1e3,
                op.mean_s * 1e3,
                op.energy_j / calls,
                op.uncertainty_j / calls,
                self.share_of(op.energy_j) * 100.0
            );
        }
    }

    pub const CSV_HEADER: &'static str = "run,command,op,class,shapes,calls,median_s,mean_s,energy_per_call_j,energy_per_call_uncertainty_j,energy_j,share\n";

    /// The operator table as CSV rows (no header).
    pub fn csv_rows(&self, run_name: &str) -> String {
        let mut out = String::new();
        let command = csv_field(&self.run.meta.command_line());
        for op in &self.ops {
            let calls = op.calls.max(1) as f64;
            out.push_str(&format!(
                "{},{},{},{},,{},{:.9},{:.9},{:.9},{:.9},{:.9},{:.6}\n",
                csv_field(run_name),
                command,
                csv_field(&op.name),
                csv_field(&op.class),
                op.calls,
                op.median_s,
                op.mean_s,
                op.energy_j / calls,
                op.uncertainty_j / calls,
                op.energy_j,
                self.share_of(op.energy_j)
            ));
        }
        out
    }
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// `mlprof energy --ops --csv [--append FILE]`: prints, or appends to FILE with a header only
/// when FILE is new or empty.
pub fn write_csv(report: &Report, run: &Path, append: Option<&Path>) -> Result<(), String> {
    let rows = report.csv_rows(&run.display().to_string());
    match append {
        None => {
            print!("{}{rows}", Report::CSV_HEADER);
            Ok(())
        }
        Some(path) => {
            let mut file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            let empty = file.metadata().map(|m| m.len() == 0).unwrap_or(true);
            let text = if empty { format!("{}{rows}", Report::CSV_HEADER) } else { rows };
            file.write_all(text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Trace tracks

/// What `mlprof convert` writes for energy frames.
pub enum TraceItem {
    /// `process_name` of a device's pseudo-process.
    ProcessName {
        pid: u32,
        name: String,
    },
    Counter {
        pid: u32,
        name: &'static str,
        time_ns: u64,
        args: String,
    },
}

/// Turns energy frames into counter tracks, one pseudo-process per device.
#[derive(Default)]
pub struct EnergyTrace {
    /// Per device: last (time, energy µJ) where the energy changed.
    last_change: HashMap<u32, (u64, u64)>,
    kinds: HashMap<u32, String>,
}

impl EnergyTrace {
    pub fn device(&mut self, device: &EnergyDevice) -> Vec<TraceItem> {
        self.kinds.insert(device.id, device.kind.clone());
        let label = match device.kind.as_str() {
            DEVICE_GPU => format!("GPU {}: {}", device.index, device.name),
            DEVICE_CPU_PACKAGE | DEVICE_CPU_DRAM => device.name.clone(),
            _ => device.name.clone(),
        };
        let suffix = if device.in_run { "" } else { " (not in run)" };
        vec![TraceItem::ProcessName { pid: TRACK_PID_BASE + device.id, name: format!("{label}{suffix}") }]
    }

    pub fn samples(&mut self, samples: &[EnergySample]) -> Vec<TraceItem> {
        let mut items = Vec::new();
        for s in samples {
            let pid = TRACK_PID_BASE + s.device;
            if let Some(e) = s.energy_uj {
                match self.last_change.get(&s.device).copied() {
                    None => {
                        self.last_change.insert(s.device, (s.time_ns, e));
                        items.push(TraceItem::Counter {
                            pid,
                            name: "energy J",
                            time_ns: s.time_ns,
                            args: format!("\"J\":{:.6}", e as f64 / 1e6),
                        });
                    }
                    Some((t0, e0)) if e != e0 && s.time_ns > t0 => {
                        let watts = (e.saturating_sub(e0)) as f64 / (s.time_ns - t0) as f64 * 1e3;
                        self.last_change.insert(s.device, (s.time_ns, e));
                        items.push(TraceItem::Counter {
                            pid,
                            name: "energy J",
                            time_ns: s.time_ns,
                            args: format!("\"J\":{:.6}", e as f64 / 1e6),
                        });
                        items.push(TraceItem::Counter {
                            pid,
                            name: "power W",
                            time_ns: t0,
                            args: format!("\"W\":{watts:.3}"),
                        });
                    }
                    _ => {}
                }
            }
            if let Some(mw) = s.power_mw {
                let args = format!("\"W\":{:.3}", mw as f64 / 1e3);
                items.push(TraceItem::Counter {
                    pid,
                    name: "power W (NVML reading)",
                    time_ns: s.time_ns,
                    args,
                });
            }
            if let Some(u) = s.gpu_util {
                items.push(TraceItem::Counter {
                    pid,
                    name: "GPU utilization %",
                    time_ns: s.time_ns,
                    args: format!("\"%\":{u}"),
                });
            }
            if let Some(u) = s.mem_util {
                items.push(TraceItem::Counter {
                    pid,
                    name: "memory utilization %",
                    time_ns: s.time_ns,
                    args: format!("\"%\":{u}"),
                });
            }
            if let Some(c) = s.sm_clock_mhz {
                items.push(TraceItem::Counter {
                    pid,
                    name: "SM clock MHz",
                    time_ns: s.time_ns,
                    args: format!("\"MHz\":{c}"),
                });
            }
            if let Some(m) = s.mem_used_bytes {
                let args = format!("\"GB\":{:.3}", m as f64 / 1e9);
                items.push(TraceItem::Counter { pid, name: "memory used GB", time_ns: s.time_ns, args });
            }
            if let Some(t) = s.temperature_c {
                items.push(TraceItem::Counter {
                    pid,
                    name: "temperature C",
                    time_ns: s.time_ns,
                    args: format!("\"C\":{t}"),
                });
            }
        }
        items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_knots_interpolate() {
        // 100 W constant (0.1 µJ/ns), counter updated every 100 ms, sampled every 10 ms.
        let samples: Vec<(u64, u64)> = (0..=100u64)
            .map(|i| {
                let t = i * 10_000_000 + 3_000_000;
                (t, (t / 100_000_000) * 100_000_000 / 10)
            })
            .collect();
        let curve = EnergyCurve::new(&samples, true).unwrap();
        let (a, _) = curve.at(200_000_000.0);
        let (b, u) = curve.at(700_000_000.0);
        let joules = (b - a) / 1e6;
        assert!((joules - 50.0).abs() < 0.6, "{joules}");
        assert!(u > 0.0);
    }

    #[test]
    fn overlap_sharing() {
        let device = Device {
            info: EnergyDevice { kind: DEVICE_GPU.into(), in_run: true, ..Default::default() },
            samples: Vec::new(),
            notes: Vec::new(),
        };
        // 1 W = 1e-3 µJ/ns, from 0 to 10 s.
        let samples = [(0u64, 0u64), (10_000_000_000, 10_000_000)];
        let curve = EnergyCurve::new(&samples, false).unwrap();
        let curves = vec![(&device, curve)];
        // A: 0..4 s, B: 2..6 s: A = 2 + 1, B = 1 + 2, coverage 6 J.
        let sharing = share(&[(0, 4_000_000_000), (2_000_000_000, 6_000_000_000)], &curves);
        assert!((sharing.per_interval[0].energy - 3.0).abs() < 1e-9);
        assert!((sharing.per_interval[1].energy - 3.0).abs() < 1e-9);
        assert!((sharing.attributed - 6.0).abs() < 1e-9);
    }

    #[test]
    fn trimmed_mean_drops_outliers() {
        let mut v = vec![10u64; 50];
        v.push(100_000);
        assert!((trimmed_mean(&v) - 10.0).abs() < 1e-9);
    }
}
