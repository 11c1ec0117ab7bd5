//! `mlprof convert`: a run as a timeline, written to any [`TraceWriter`]. One pass over the
//! file after the metadata: each event is written as it is read, so memory holds the metadata
//! (processes, strings, fd tables) and the writer's handles, never the events.
//!
//! What becomes what: a recorded call is a slice on its thread named after the function, with
//! its arguments (`calls`); an ITT task a slice named after the task, a marker an instant, a
//! DataLoader batch a flow from its fetch to its wait (`itt`); aggregated clock reads and
//! drop counts are counter tracks of their process; energy samples are counter tracks of one
//! pseudo-process per device ([`crate::energy::tracks`]).
//!
//! [`Options`] cut a run too big for a browser: a time window, some processes, some kinds of
//! event, and parts of at most N events, each a complete trace with all the metadata.

mod calls;
mod itt;

use std::io;
use std::path::Path;

use mlprof_format::energy::EnergyDevice;
use mlprof_format::func::{Api, Func};
use mlprof_format::runfile::{AggregateSample, DropSample, Frame};
use rustc_hash::FxHashMap;

use crate::energy::tracks::EnergyTracks;
use crate::run::{self, FdCache, Image, RunMeta};
use crate::trace::{
    CounterHandle, CounterUnit, CounterValue, ProcessHandle, StringHandle, ThreadHandle, TraceWriter,
};

/// Where a conversion is, reported after each batch of events.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub events: u64,
    /// Bytes of the run file read so far, of `total_bytes`.
    pub bytes_read: u64,
    pub total_bytes: u64,
}

#[derive(Debug)]
pub enum ConvertError {
    /// The run file could not be read; the message names it.
    Read(String),
    /// The writer's output failed.
    Write(io::Error),
}

impl From<io::Error> for ConvertError {
    fn from(e: io::Error) -> Self {
        ConvertError::Write(e)
    }
}

/// Kinds of event a trace can be limited to (`--only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kinds {
    /// C library calls, and the counters of aggregated clock reads.
    pub io: bool,
    /// ITT tasks, frames and markers (PyTorch ops, phases, DataLoader spans and flows).
    pub itt: bool,
    /// CUDA runtime, CUDA driver and NCCL calls.
    pub gpu: bool,
    /// Energy, power and the other device counters.
    pub energy: bool,
}

impl Kinds {
    pub const ALL: Kinds = Kinds { io: true, itt: true, gpu: true, energy: true };

    /// `io,itt,gpu,energy` (any subset, comma-separated).
    pub fn parse(list: &str) -> Result<Kinds, String> {
        let mut kinds = Kinds { io: false, itt: false, gpu: false, energy: false };
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "io" => kinds.io = true,
                "itt" => kinds.itt = true,
                "gpu" => kinds.gpu = true,
                "energy" => kinds.energy = true,
                _ => return Err(format!("unknown kind '{word}' (expected io, itt, gpu, energy)")),
            }
        }
        Ok(kinds)
    }

    fn api(&self, api: Api) -> bool {
        match api {
            Api::Libc => self.io,
            Api::Itt => self.itt,
            Api::CudaRuntime | Api::CudaDriver | Api::Nccl => self.gpu,
        }
    }
}

/// Names a process's track from its pid and its images (exec order). The hook where a merged
/// multi-node run will put its node and rank.
pub type ProcessNamer<'a> = &'a dyn Fn(u32, &[Image]) -> String;

/// The default process name: its programs in exec order, and the pid.
pub fn process_name(pid: u32, images: &[Image]) -> String {
    let names: Vec<String> = images.iter().map(|i| i.info.argv.join(" ")).collect();
    format!("{} (pid {pid})", names.join(" → exec "))
}

/// What to convert. The default is everything, in one trace.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    /// Only events that end at or after this time (ns on the run's clock)…
    pub from_ns: Option<u64>,
    /// …and start at or before this one.
    pub to_ns: Option<u64>,
    /// Only these processes (empty: all). Energy tracks are the machine's, kept.
    pub pids: &'a [u32],
    pub only: Kinds,
    /// Start a new part after this many events (slices and instants).
    pub split_every: Option<u64>,
    pub process_name: ProcessNamer<'a>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            from_ns: None,
            to_ns: None,
            pids: &[],
            only: Kinds::ALL,
            split_every: None,
            process_name: &process_name,
        }
    }
}

impl Options<'_> {
    /// Whether [start, end] meets the time window.
    fn in_window(&self, start: u64, end: u64) -> bool {
        self.from_ns.is_none_or(|from| end >= from) && self.to_ns.is_none_or(|to| start <= to)
    }

    fn pid(&self, pid: u32) -> bool {
        self.pids.is_empty() || self.pids.contains(&pid)
    }
}

/// What a conversion wrote.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Events written (slices and instants), over all parts.
    pub events: u64,
    /// Traces written (1 unless split).
    pub parts: usize,
    /// Problems with the input met on the way (corrupt data ends the conversion early).
    pub warnings: Vec<String>,
}

/// Writes the run at `input`, whose metadata is `meta`, as one trace or (with
/// `split_every`) several: `open(i)` makes the writer of part `i` (from 0), `close(i, w)`
/// finishes it. `on_progress` is called after every batch of events. Corrupt data ends the
/// conversion with a warning: the traces hold what was readable.
pub fn convert<W: TraceWriter>(
    meta: &RunMeta,
    input: &Path,
    options: &Options<'_>,
    open: &mut dyn FnMut(usize) -> io::Result<W>,
    close: &mut dyn FnMut(usize, W) -> io::Result<()>,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<Outcome, ConvertError> {
    let total_bytes = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0);
    let mut converter = Converter::new(meta, options, open(0)?);
    converter.declare_named_tracks()?;
    let mut reader = run::open(input).map_err(ConvertError::Read)?;
    let mut outcome = Outcome { parts: 1, ..Outcome::default() };
    let mut in_part = 0u64;
    loop {
        let frame = match reader.next_frame() {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                outcome
                    .warnings
                    .push(format!("{}: {e}; the trace holds what was recorded before it", input.display()));
                break;
            }
        };
        match frame {
            Frame::Events(batch) => {
                for event in batch {
                    let Some(func) = Func::from_id(event.kind) else {
                        continue;
                    };
                    let api = func.api();
                    if !options.only.api(api)
                        || !options.pid(event.pid)
                        || !options.in_window(event.start, event.start.saturating_add(event.dur))
                    {
                        continue;
                    }
                    if options.split_every.is_some_and(|n| in_part >= n) {
                        let next = open(outcome.parts)?;
                        let full = std::mem::replace(&mut converter.out, next);
                        close(outcome.parts - 1, full)?;
                        outcome.parts += 1;
                        in_part = 0;
                        converter.new_part()?;
                    }
                    let thread = converter.thread(event.pid, event.tid)?;
                    if api == Api::Itt {
                        itt::write(&mut converter, func, event, thread)?;
                    } else {
                        calls::write(&mut converter, func, event, thread)?;
                    }
                    in_part += 1;
                    outcome.events += 1;
                }
                on_progress(&Progress { events: outcome.events, bytes_read: reader.offset(), total_bytes });
            }
            Frame::Aggregates(samples) if options.only.io => converter.aggregates(&samples)?,
            Frame::Drops(samples) => converter.drops(&samples)?,
            Frame::EnergyDevice(device) if options.only.energy => {
                converter.energy.device(&device, &mut converter.out)?;
                converter.devices.push(device);
            }
            Frame::EnergySamples(mut samples) if options.only.energy => {
                samples.retain(|s| options.in_window(s.time_ns, s.time_ns));
                converter.energy.samples(&samples, &mut converter.out)?;
            }
            _ => {}
        }
    }
    let Converter { out, .. } = converter;
    close(outcome.parts - 1, out)?;
    Ok(outcome)
}

/// A string the trace uses, by what it is in the run: computed and interned once.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Text {
    Literal(&'static str),
    /// A function's name (keyed by the function: one small integer to hash per event).
    Function(Func),
    /// A string of the run (a path, a task or domain name).
    Run(u64),
    /// `itt,<domain>` for a domain's string id (0: no domain).
    IttCategory(u64),
    /// A kernel's demangled name: (pid, function handle).
    Kernel(u32, u64),
}

/// The counter tracks of calls and drops.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum CounterKey {
    /// Aggregated calls of one function (and clock) on one thread.
    Calls { pid: u32, tid: u32, func: u16, clock: Option<i32> },
    /// Records dropped on a thread, or (`tid: None`) for want of a free lane.
    Drops { pid: u32, tid: Option<u32> },
}

/// The conversion's state: the writer's handles for what the run names.
struct Converter<'a, W: TraceWriter> {
    meta: &'a RunMeta,
    options: &'a Options<'a>,
    out: W,
    processes: FxHashMap<u32, ProcessHandle>,
    threads: FxHashMap<(u32, u32), ThreadHandle>,
    texts: FxHashMap<Text, StringHandle>,
    counters: FxHashMap<CounterKey, CounterHandle>,
    energy: EnergyTracks,
    /// The energy devices described so far, described again in each part.
    devices: Vec<EnergyDevice>,
    /// (name, category) of each function, by id: two handles looked up per call otherwise.
    function_texts: Vec<Option<(StringHandle, StringHandle)>>,
    /// Recent thread handles, by a hash of (pid, tid).
    thread_cache: Box<[(u64, Option<ThreadHandle>); THREAD_CACHE_SLOTS]>,
    fd_cache: FdCache,
}

const THREAD_CACHE_SLOTS: usize = 256;

impl<'a, W: TraceWriter> Converter<'a, W> {
    fn new(meta: &'a RunMeta, options: &'a Options<'a>, out: W) -> Self {
        Converter {
            meta,
            options,
            out,
            processes: Default::default(),
            threads: Default::default(),
            texts: Default::default(),
            counters: Default::default(),
            energy: Default::default(),
            devices: Vec::new(),
            function_texts: Vec::new(),
            thread_cache: Box::new([(0, None); THREAD_CACHE_SLOTS]),
            fd_cache: FdCache::default(),
        }
    }

    /// A new writer took over: its handles start afresh, with the same metadata.
    fn new_part(&mut self) -> io::Result<()> {
        self.processes.clear();
        self.threads.clear();
        self.texts.clear();
        self.function_texts.clear();
        self.thread_cache.fill((0, None));
        self.counters.clear();
        self.energy = EnergyTracks::default();
        self.declare_named_tracks()?;
        for device in &self.devices {
            self.energy.device(device, &mut self.out)?;
        }
        Ok(())
    }

    /// Names every process (its programs, in exec order) and every named thread, by id
    /// (those the options keep).
    fn declare_named_tracks(&mut self) -> io::Result<()> {
        let mut pids: Vec<_> = self.meta.images.iter().filter(|(pid, _)| self.options.pid(**pid)).collect();
        pids.sort_by_key(|(pid, _)| **pid);
        for (&pid, images) in pids {
            let label = (self.options.process_name)(pid, images);
            let process = self.out.process(pid, Some(&label))?;
            self.processes.insert(pid, process);
        }
        let mut threads: Vec<_> =
            self.meta.threads.iter().filter(|((pid, _), _)| self.options.pid(*pid)).collect();
        threads.sort();
        for (&(pid, tid), name) in threads {
            let process = self.process(pid)?;
            let thread = self.out.thread(process, tid, Some(&format!("{name} ({tid})")))?;
            self.threads.insert((pid, tid), thread);
        }
        Ok(())
    }

    /// The process `pid`, declared without a name the first time the run mentions it
    /// without describing it.
    fn process(&mut self, pid: u32) -> io::Result<ProcessHandle> {
        if let Some(&process) = self.processes.get(&pid) {
            return Ok(process);
        }
        let process = self.out.process(pid, None)?;
        self.processes.insert(pid, process);
        Ok(process)
    }

    fn thread(&mut self, pid: u32, tid: u32) -> io::Result<ThreadHandle> {
        let key = u64::from(pid) << 32 | u64::from(tid);
        let slot = (tid ^ pid.rotate_left(7)) as usize % THREAD_CACHE_SLOTS;
        if let (cached, Some(thread)) = self.thread_cache[slot]
            && cached == key
        {
            return Ok(thread);
        }
        if let Some(&thread) = self.threads.get(&(pid, tid)) {
            self.thread_cache[slot] = (key, Some(thread));
            return Ok(thread);
        }
        let process = self.process(pid)?;
        let thread = self.out.thread(process, tid, None)?;
        self.threads.insert((pid, tid), thread);
        Ok(thread)
    }

    fn text(&mut self, text: Text) -> StringHandle {
        if let Some(&handle) = self.texts.get(&text) {
            return handle;
        }
        let meta = self.meta;
        let handle = match text {
            Text::Literal(s) => self.out.intern(s),
            Text::Function(func) => self.out.intern(func.name()),
            Text::Run(id) => self.out.intern(&meta.string(id)),
            Text::IttCategory(0) => self.out.intern("itt,"),
            Text::IttCategory(domain) => self.out.intern(&format!("itt,{}", meta.string(domain))),
            Text::Kernel(pid, function) => self.out.intern(&meta.kernel_name(pid, function)),
        };
        self.texts.insert(text, handle);
        handle
    }

    fn counter(
        &mut self,
        key: CounterKey,
        pid: u32,
        name: impl FnOnce() -> String,
    ) -> io::Result<CounterHandle> {
        if let Some(&counter) = self.counters.get(&key) {
            return Ok(counter);
        }
        let process = self.process(pid)?;
        let unit = match key {
            CounterKey::Calls { .. } => CounterUnit { name: "count", decimals: 0 },
            CounterKey::Drops { .. } => CounterUnit { name: "dropped", decimals: 0 },
        };
        let counter = self.out.counter_track(process, &name(), unit)?;
        self.counters.insert(key, counter);
        Ok(counter)
    }

    /// Cumulative counts of aggregated calls (clock reads), one track per thread and clock.
    fn aggregates(&mut self, samples: &[AggregateSample]) -> io::Result<()> {
        for sample in samples {
            let Some(func) = Func::from_id(sample.func) else {
                continue;
            };
            if !self.options.pid(sample.pid) || !self.options.in_window(sample.time_ns, sample.time_ns) {
                continue;
            }
            let key = CounterKey::Calls {
                pid: sample.pid,
                tid: sample.tid,
                func: sample.func,
                clock: sample.clock_id,
            };
            let track = self.counter(key, sample.pid, || match sample.clock_id {
                Some(clock) => format!("{} calls (clock {clock}, tid {})", func.name(), sample.tid),
                None => format!("{} calls (tid {})", func.name(), sample.tid),
            })?;
            self.out.counter(track, sample.time_ns, CounterValue::UInt(sample.count))?;
        }
        Ok(())
    }

    /// Cumulative drop counts, per thread and for records that found no free lane.
    fn drops(&mut self, samples: &[DropSample]) -> io::Result<()> {
        for sample in samples {
            if !self.options.pid(sample.pid) || !self.options.in_window(sample.time_ns, sample.time_ns) {
                continue;
            }
            let tid = (sample.stream != 0).then_some(sample.tid);
            let track =
                self.counter(CounterKey::Drops { pid: sample.pid, tid }, sample.pid, || match tid {
                    None => "dropped records (no free lane)".to_string(),
                    Some(tid) => format!("dropped records (tid {tid})"),
                })?;
            self.out.counter(track, sample.time_ns, CounterValue::UInt(sample.dropped))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_run::{self, DATASET, START};
    use crate::trace::chrome::ChromeWriter;

    #[test]
    fn a_run_becomes_named_tracks_slices_and_counters() {
        let run = test_run::write("convert");
        let meta = RunMeta::load(run.path()).unwrap();
        let mut reports = 0;
        let mut json = Vec::new();
        let outcome = convert(
            &meta,
            run.path(),
            &Options::default(),
            &mut |_| ChromeWriter::new(Vec::new(), START),
            &mut |_, w| {
                json = w.finish()?;
                Ok(())
            },
            &mut |_| reports += 1,
        )
        .unwrap();
        assert_eq!((outcome.events, outcome.parts, reports), (5, 1, 1));
        let trace: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let records = trace["traceEvents"].as_array().unwrap();
        let of_phase = |ph: &'static str| records.iter().filter(move |r| r["ph"] == ph);
        let names: Vec<_> = of_phase("M").map(|r| r["args"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["train --epochs=1 (pid 10)", "train --epochs=1 (pid 11)", "python (10)"]);
        // The worker's read of its inherited fd names the parent's file.
        let child_read = of_phase("X").find(|r| r["pid"] == 11).unwrap();
        assert_eq!(child_read["args"]["path"], DATASET);
        assert_eq!((child_read["ts"].as_f64(), child_read["dur"].as_f64()), (Some(9.0), Some(1.0)));
        let counters: Vec<_> =
            of_phase("C").map(|r| (r["name"].as_str().unwrap(), r["args"].clone())).collect();
        assert_eq!(counters.len(), 2);
        assert_eq!(counters[0].0, "clock_gettime calls (clock 1, tid 10)");
        assert_eq!(counters[1].1["dropped"], 3);
    }
}
