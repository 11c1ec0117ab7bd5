//! Reading what the energy report needs from a run file: the devices with their samples and
//! notes, and every recorded call and ITT span as an interval with a name, a class and a
//! layer.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use mlprof_format::energy::{EnergyDevice, EnergyNote, EnergySample, SOURCE_NVML_COUNTER};
use mlprof_format::func::{Class, Func};
use mlprof_format::gpu::{ACTIVITY_LINK, GpuActivity};
use mlprof_format::record::IttSpan;
use mlprof_format::runfile::Frame;

use super::curve::EnergyCurve;
use crate::run::{self, RunMeta};
use crate::shapes::{OpShapes, ShapeMatcher};

/// A measured device (a GPU, a CPU package or its DRAM) and what was recorded about it.
pub(crate) struct Device {
    pub(crate) info: EnergyDevice,
    /// In time order.
    pub(crate) samples: Vec<EnergySample>,
    pub(crate) notes: Vec<EnergyNote>,
}

/// An interval energy is attributed to: a recorded call or an ITT span, clamped to the run.
pub(crate) struct Span {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Index of its name in [`EnergyRun::keys`].
    pub(crate) key: u32,
    pub(crate) pid: u32,
    pub(crate) tid: u32,
}

/// A kernel, copy or memset on a GPU (the GPU timeline), and the host call that issued it when
/// it was linked: (tid, start of the call).
pub(crate) struct GpuWork {
    pub(crate) device: u8,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) pid: u32,
    pub(crate) launch: Option<(u32, u64)>,
}

/// What spans are grouped by: a function, or an ITT task name in its domain.
pub(crate) struct SpanKey {
    pub(crate) name: String,
    /// The function's class (`read`, `launch`, …) or `itt:<domain>`.
    pub(crate) class: String,
    /// Spans of one layer share the run's energy among themselves: the recorded calls form one
    /// layer, and each ITT domain (PyTorch ops, mlprof.phase, an application's own) another, so
    /// a phase is not diluted by the ops and calls nested inside it.
    pub(crate) layer: String,
    /// PyTorch ops recorded with `--torch-shapes` are grouped by (op, input shapes, dtypes);
    /// empty for everything else.
    pub(crate) shapes: OpShapes,
}

/// The layer of the recorded calls (libc, CUDA, NCCL).
pub(crate) const CALLS_LAYER: &str = "calls";

/// A run as the energy report sees it: devices with their samples, and every span.
pub struct EnergyRun {
    pub(crate) meta: RunMeta,
    /// By device id.
    pub(crate) devices: Vec<Device>,
    /// Notes about no device in particular (no NVML, no RAPL).
    pub(crate) notes: Vec<EnergyNote>,
    pub(crate) keys: Vec<SpanKey>,
    pub(crate) spans: Vec<Span>,
    /// What the GPUs did (empty without a GPU timeline).
    pub(crate) gpu_work: Vec<GpuWork>,
    /// The run's interval: its start, and its end record or last event or sample.
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
}

/// GPU activity frames as they come: the work, and the links to the calls that issued it
/// (a link precedes its work in the file, but nothing depends on that here).
#[derive(Default)]
struct GpuFrames {
    /// (work, its pid and correlation id).
    work: Vec<(GpuWork, u32)>,
    links: HashMap<(u32, u32), (u32, u64)>,
}

impl GpuFrames {
    fn add(&mut self, records: &[GpuActivity]) {
        for r in records {
            if r.is_work() {
                let end = r.start.saturating_add(r.dur);
                let work = GpuWork { device: r.device, start: r.start, end, pid: r.pid, launch: None };
                self.work.push((work, r.correlation));
            } else if r.what == ACTIVITY_LINK {
                self.links.insert((r.pid, r.correlation), (r.value as u32, r.start));
            }
        }
    }

    fn work(self) -> Vec<GpuWork> {
        let links = self.links;
        self.work
            .into_iter()
            .map(|(work, correlation)| GpuWork {
                launch: links.get(&(work.pid, correlation)).copied(),
                ..work
            })
            .collect()
    }
}

/// A function's class as the report names it: `Read` → `read`, `GpuSync` → `gpusync`.
fn class_name(func: Func) -> String {
    format!("{:?}", func.class()).to_lowercase()
}

impl EnergyRun {
    /// Reads the metadata, then the energy frames and every span in a second pass.
    pub fn load(path: &Path) -> Result<EnergyRun, String> {
        let meta = RunMeta::load(path)?;
        let mut reader = run::open(path)?;
        let mut devices: BTreeMap<u32, Device> = BTreeMap::new();
        let mut notes = Vec::new();
        let mut keys = Vec::new();
        let mut key_of: HashMap<(u16, u64, u64), u32> = HashMap::new();
        let mut spans = Vec::new();
        let mut last_ns = meta.info.start_mono_ns;
        let window = meta.window();
        let mut shapes = ShapeMatcher::default();
        let mut gpu = GpuFrames::default();
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
                            Class::Instant => {
                                shapes.observe(func, &IttSpan::from_event(event), 0);
                                continue;
                            }
                            Class::Span => {
                                let span = IttSpan::from_event(event);
                                shapes.observe(func, &span, spans.len());
                                (span.name, span.domain)
                            }
                            _ => (0, 0),
                        };
                        let key = *key_of.entry((event.kind, name_id, domain_id)).or_insert_with(|| {
                            keys.push(if func.class() == Class::Span {
                                let domain = format!("itt:{}", meta.string(domain_id));
                                let name =
                                    if name_id == 0 { func.name().to_string() } else { meta.string(name_id) };
                                SpanKey {
                                    name,
                                    class: domain.clone(),
                                    layer: domain,
                                    shapes: OpShapes::default(),
                                }
                            } else {
                                SpanKey {
                                    name: func.name().to_string(),
                                    class: class_name(func),
                                    layer: CALLS_LAYER.into(),
                                    shapes: OpShapes::default(),
                                }
                            });
                            (keys.len() - 1) as u32
                        });
                        let end = event.start.saturating_add(event.dur);
                        last_ns = last_ns.max(end);
                        spans.push(Span { start: event.start, end, key, pid: event.pid, tid: event.tid });
                    }
                }
                Frame::GpuActivity(mut records) => {
                    window.keep_gpu(&mut records);
                    gpu.add(&records);
                }
                _ => {}
            }
        }
        // Ops with shapes move to the key of (op, shapes); a key left without spans is dropped
        // by the attribution.
        let mut shaped: HashMap<(u32, OpShapes), u32> = HashMap::new();
        for (index, op_shapes) in shapes.resolve(&meta) {
            let old = spans[index].key;
            spans[index].key = *shaped.entry((old, op_shapes)).or_insert_with_key(|(old, op_shapes)| {
                let key = &keys[*old as usize];
                keys.push(SpanKey {
                    name: key.name.clone(),
                    class: key.class.clone(),
                    layer: key.layer.clone(),
                    shapes: op_shapes.clone(),
                });
                (keys.len() - 1) as u32
            });
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
        let gpu_work = gpu.work();
        Ok(EnergyRun { meta, devices, notes, keys, spans, gpu_work, start_ns, end_ns })
    }

    /// The device's energy over time; `None` when its samples do not give two knots.
    pub(crate) fn curve(device: &Device) -> Option<EnergyCurve> {
        let points: Vec<(u64, u64)> =
            device.samples.iter().filter_map(|s| s.energy_uj.map(|e| (s.time_ns, e))).collect();
        let readings: Vec<(u64, u32)> =
            device.samples.iter().filter_map(|s| s.power_mw.map(|p| (s.time_ns, p))).collect();
        EnergyCurve::new(&points, device.info.energy_source == SOURCE_NVML_COUNTER)
            .map(|c| c.shaped_by(&readings))
    }
}
