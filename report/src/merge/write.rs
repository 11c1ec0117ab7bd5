//! The merge's second pass: every node's frames rewritten onto the merged axis and
//! identities (times shifted, pids, lane streams and energy devices renumbered), and written
//! with the nodes' event frames interleaved by time, one frame per node held.

use std::collections::HashSet;
use std::path::Path;

use mlprof_filewrite::BackgroundFile;
use mlprof_format::energy::{EnergyDevice, EnergyNote, EnergySample};
use mlprof_format::func::Func;
use mlprof_format::record::{Event, IttSpan};
use mlprof_format::runfile::{
    AggregateSample, DropSample, Frame, NodeInfo, ProcessInfo, RunEnd, RunInfo, RunReader, RunWriter,
    create_run_file,
};
use mlprof_format::site::{FRAME_EVENT_SITES, encode_event_sites};

use super::samples::{MergedSamples, NodeSamples, job_sampling};
use super::scan::Scan;
use super::sites::{MergedSites, NodeSites};
use crate::pipeline::DATA;

/// Energy device ids of node n start at n × this (ids of one node stay below 512).
const DEVICE_STRIDE: u32 = 1024;
/// Lane streams of node n get n << this.
const STREAM_SHIFT: u32 = 48;

/// `time` moved by `offset` on the axis (saturating).
#[inline]
pub(super) fn shift(time: u64, offset: i64) -> u64 {
    time.saturating_add_signed(offset)
}

/// How one node's frames are rewritten.
struct Rewrite {
    node: u32,
    offset: i64,
    pid_offset: u32,
    host: String,
}

impl Rewrite {
    fn pid(&self, pid: u32) -> u32 {
        if pid == 0 { 0 } else { pid + self.pid_offset }
    }

    fn stream(&self, stream: u64) -> u64 {
        stream | (self.node as u64) << STREAM_SHIFT
    }

    fn device(&self, id: u32) -> u32 {
        id + self.node * DEVICE_STRIDE
    }

    fn event(&self, event: &Event) -> Event {
        let mut e = *event;
        e.start = shift(e.start, self.offset);
        if self.pid_offset != 0 {
            e.pid = self.pid(e.pid);
            e.tid = self.pid(e.tid);
            if e.kind == Func::IttTask as u16 {
                // A DataLoader span's parent is its main process's pid.
                let mut span = IttSpan::from_event(&e);
                if span.domain == DATA {
                    span.parent = self.pid(span.parent as u32) as u64;
                    e = span.into_event();
                }
            }
        }
        e
    }

    fn aggregate(&self, s: AggregateSample) -> AggregateSample {
        AggregateSample {
            stream: self.stream(s.stream),
            pid: self.pid(s.pid),
            tid: self.pid(s.tid),
            time_ns: shift(s.time_ns, self.offset),
            ..s
        }
    }

    fn drop_sample(&self, s: DropSample) -> DropSample {
        DropSample {
            stream: self.stream(s.stream),
            pid: self.pid(s.pid),
            tid: self.pid(s.tid),
            time_ns: shift(s.time_ns, self.offset),
            ..s
        }
    }

    fn energy_sample(&self, s: EnergySample) -> EnergySample {
        EnergySample { device: self.device(s.device), time_ns: shift(s.time_ns, self.offset), ..s }
    }
}

/// One input being written.
struct Input {
    reader: RunReader,
    rewrite: Rewrite,
    /// Its next events frame, rewritten, waiting for its turn.
    pending: Vec<Event>,
    /// Its site ids → the merged run's.
    sites: NodeSites,
    /// Its module and stack ids → the merged run's, and its sampling note.
    samples: NodeSamples,
    done: bool,
    events: u64,
    end: Option<RunEnd>,
}

/// Writes the merged run `output`: its description `info`, the nodes, then the inputs'
/// frames (see [`interleave`]). Returns the events written; each input without an end record
/// adds a warning to `warnings`.
pub(super) fn write(
    output: &Path,
    info: &RunInfo,
    nodes: &[NodeInfo],
    scans: &[Scan],
    warnings: &mut Vec<String>,
) -> Result<u64, String> {
    // Written by a thread of its own, past the page cache where it can (a merged run is the
    // size of all its nodes' runs; see mlprof-filewrite).
    let mut out = create_run_file(output)
        .and_then(BackgroundFile::paced)
        .and_then(|file| RunWriter::new(file, info))
        .map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    let write_err = |e: std::io::Error| format!("writing {}: {e}", output.display());
    for node in nodes {
        out.write_node(node).map_err(write_err)?;
    }
    let mut inputs = open_inputs(nodes, scans)?;
    interleave(&mut inputs, &mut out, scans, output)?;
    let events = inputs.iter().map(|i| i.events).sum();
    let end_ns = inputs
        .iter()
        .zip(nodes)
        .filter_map(|(i, n)| i.end.as_ref().map(|e| shift(e.end_ns, n.offset_ns)))
        .max()
        .unwrap_or(info.start_mono_ns);
    for (input, scan) in inputs.iter().zip(scans) {
        if input.end.is_none() {
            warnings.push(format!(
                "{}: no end record (collector killed?); merged what it holds",
                scan.path.display()
            ));
        }
    }
    let notes = inputs.iter().filter_map(|i| Some((i.rewrite.host.as_str(), i.samples.sampling.as_ref()?)));
    if let Some(note) = job_sampling(notes) {
        out.write_sampling(&note).map_err(write_err)?;
    }
    let dropped = inputs.iter().filter_map(|i| i.end.as_ref()).map(|e| e.dropped).sum();
    out.finish(&RunEnd { end_ns, events, dropped }).and_then(BackgroundFile::close).map_err(write_err)?;
    Ok(events)
}

/// Opens every node's file again for the second pass, with how its frames are rewritten.
fn open_inputs(nodes: &[NodeInfo], scans: &[Scan]) -> Result<Vec<Input>, String> {
    nodes
        .iter()
        .zip(scans)
        .map(|(node, scan)| {
            Ok(Input {
                reader: crate::run::open(&scan.path)?,
                rewrite: Rewrite {
                    node: node.node,
                    offset: node.offset_ns,
                    pid_offset: node.pid_offset,
                    host: scan.info.host.clone(),
                },
                pending: Vec::new(),
                sites: NodeSites::default(),
                samples: NodeSamples::default(),
                done: false,
                events: 0,
                end: None,
            })
        })
        .collect()
}

/// Writes every input's frames to `out`: its metadata as it comes, its event frames in the
/// order of their first event's end.
fn interleave(
    inputs: &mut [Input],
    out: &mut RunWriter<BackgroundFile>,
    scans: &[Scan],
    output: &Path,
) -> Result<(), String> {
    let write_err = |e: std::io::Error| format!("writing {}: {e}", output.display());
    let mut shared = Shared::default();
    for (input, scan) in inputs.iter_mut().zip(scans) {
        advance(input, out, &mut shared, &scan.path)?;
    }
    // Event frames in the order of their first event's end (each frame is sorted by end).
    loop {
        let next = inputs
            .iter()
            .enumerate()
            .filter(|(_, i)| !i.pending.is_empty())
            .min_by_key(|(_, i)| i.pending[0].start + i.pending[0].dur)
            .map(|(at, _)| at);
        let Some(at) = next else { break };
        out.write_events(&inputs[at].pending).map_err(write_err)?;
        advance(&mut inputs[at], out, &mut shared, &scans[at].path)?;
    }
    Ok(())
}

/// What the inputs share: the strings written, and the merged run's sites.
#[derive(Default)]
struct Shared {
    strings: HashSet<u64>,
    sites: MergedSites,
    samples: MergedSamples,
    /// Each node's capture ranges, (node, its number) → the merged run's number: the reports
    /// pair a range's edges by number, and every node numbers its own from 1.
    ranges: mlprof_format::ids::Ids<(u32, u32)>,
}

/// Writes what a frame of `input` holds (metadata at once, events into `pending`) until its
/// next events frame or its end. Called right after `input`'s pending events were written (or
/// before any were), so an event sites frame read here belongs to the events frame written
/// last, and is written right after it, renumbered.
fn advance(
    input: &mut Input,
    out: &mut RunWriter<BackgroundFile>,
    shared: &mut Shared,
    path: &Path,
) -> Result<(), String> {
    let write_err = |e: std::io::Error| format!("writing the merged run: {e}");
    let rw = &input.rewrite;
    while let Some(frame) = input.reader.next_frame().map_err(|e| format!("{}: {e}", path.display()))? {
        match frame {
            Frame::Events(events) => {
                input.pending.clear();
                input.pending.extend(events.iter().map(|e| rw.event(e)));
                input.events += events.len() as u64;
                return Ok(());
            }
            Frame::End(end) => input.end = Some(end),
            Frame::Site(site) => {
                if let Some(merged) = shared.sites.add(&mut input.sites, site) {
                    out.write_site(&merged).map_err(write_err)?;
                }
            }
            Frame::EventSites(sites) => {
                let sites = input.sites.renumber(&sites);
                out.write_frame(FRAME_EVENT_SITES, &encode_event_sites(&sites)).map_err(write_err)?;
            }
            Frame::Module(module) => {
                if let Some(merged) = shared.samples.module(&mut input.samples, module) {
                    out.write_module(&merged).map_err(write_err)?;
                }
            }
            Frame::PythonFrame(frame) => {
                if let Some(merged) = shared.samples.python_frame(&mut input.samples, frame) {
                    out.write_python_frame(&merged).map_err(write_err)?;
                }
            }
            Frame::Stack(stack) => {
                if let Some(merged) = shared.samples.stack(&mut input.samples, stack) {
                    out.write_stack(&merged).map_err(write_err)?;
                }
            }
            Frame::Samples(samples) => {
                let samples = input.samples.renumber(&samples, |pid| rw.pid(pid), |t| shift(t, rw.offset));
                out.write_samples(&samples).map_err(write_err)?;
            }
            Frame::Sampling(note) => input.samples.sampling = Some(note),
            Frame::RangeEdge(mut edge) => {
                edge.range = shared.ranges.id((rw.node, edge.range)).0;
                edge.pid = rw.pid(edge.pid);
                edge.tid = rw.pid(edge.tid);
                edge.time_ns = shift(edge.time_ns, rw.offset);
                out.write_range_edge(&edge).map_err(write_err)?;
            }
            frame => write_metadata(frame, rw, out, &mut shared.strings).map_err(write_err)?,
        }
    }
    input.done = true;
    input.pending.clear();
    Ok(())
}

/// Writes a frame other than events, rewritten by `rw`: a string only the first time one of
/// the inputs has it.
fn write_metadata(
    frame: Frame<'_>,
    rw: &Rewrite,
    out: &mut RunWriter<BackgroundFile>,
    strings: &mut HashSet<u64>,
) -> std::io::Result<()> {
    match frame {
        // The merged run has its own description; events and ends are the caller's.
        Frame::RunInfo(_) | Frame::Node(_) | Frame::Events(_) | Frame::End(_) => {}
        // Renumbered by `advance`.
        Frame::Site(_) | Frame::EventSites(_) => {}
        // Renumbered by `advance`; the sampling notes are merged at the end.
        Frame::Module(_)
        | Frame::Stack(_)
        | Frame::Samples(_)
        | Frame::Sampling(_)
        | Frame::PythonFrame(_) => {}
        Frame::String { id, bytes } => {
            if strings.insert(id) {
                out.write_string(id, bytes)?;
            }
        }
        Frame::Process(info) => out.write_process(&ProcessInfo {
            pid: rw.pid(info.pid),
            ppid: rw.pid(info.ppid),
            start_ns: shift(info.start_ns, rw.offset),
            node: rw.node,
            ..info
        })?,
        Frame::ProcessExit(mut exit) => {
            exit.pid = rw.pid(exit.pid);
            exit.time_ns = shift(exit.time_ns, rw.offset);
            out.write_process_exit(&exit)?;
        }
        Frame::Thread(mut thread) => {
            thread.pid = rw.pid(thread.pid);
            thread.tid = rw.pid(thread.tid);
            out.write_thread(&thread)?;
        }
        Frame::GpuActivity(mut records) => {
            for record in &mut records {
                record.pid = rw.pid(record.pid);
                record.start = shift(record.start, rw.offset);
                if record.what == mlprof_format::gpu::ACTIVITY_LINK {
                    // A link names its host call's thread.
                    record.value = rw.pid(record.value as u32) as u64;
                }
            }
            out.write_gpu_activity(&records)?;
        }
        // The capture option (each node's; the last one read stands). Range edges are
        // renumbered by `advance`.
        Frame::Capture(info) => out.write_capture(&info)?,
        Frame::RangeEdge(_) => {}
        Frame::Symbol(mut symbol) => {
            symbol.pid = rw.pid(symbol.pid);
            out.write_symbol(&symbol)?;
        }
        Frame::Aggregates(samples) => {
            let samples: Vec<AggregateSample> = samples.into_iter().map(|s| rw.aggregate(s)).collect();
            out.write_aggregates(&samples)?;
        }
        Frame::Drops(samples) => {
            let samples: Vec<DropSample> = samples.into_iter().map(|s| rw.drop_sample(s)).collect();
            out.write_drops(&samples)?;
        }
        Frame::EnergyDevice(device) => out.write_energy_device(&EnergyDevice {
            id: rw.device(device.id),
            name: format!("{}: {}", rw.host, device.name),
            ..device
        })?,
        Frame::EnergySamples(samples) => {
            let samples: Vec<EnergySample> = samples.into_iter().map(|s| rw.energy_sample(s)).collect();
            out.write_energy_samples(&samples)?;
        }
        Frame::EnergyNote(note) => out.write_energy_note(&EnergyNote {
            device: note.device.map(|d| rw.device(d)),
            time_ns: shift(note.time_ns, rw.offset),
            ..note
        })?,
    }
    Ok(())
}
