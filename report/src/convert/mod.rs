//! `mlprof convert`: a run as a timeline, written to any [`TraceWriter`]. One pass over the
//! file after the metadata: each event is written as it is read, so memory holds the metadata
//! (processes, strings, fd tables) and the writer's handles, never the events.
//!
//! What becomes what: a recorded call is a slice on its thread named after the function, with
//! its arguments (`calls`); an ITT task a slice named after the task, a marker an instant, a
//! DataLoader batch a flow from its fetch to its wait (`itt`); aggregated clock reads and
//! drop counts are counter tracks of their process; energy samples are counter tracks of one
//! pseudo-process per device ([`crate::energy::tracks`]).

mod calls;
mod itt;

use std::io;
use std::path::Path;

use mlprof_format::func::{Api, Func};
use mlprof_format::runfile::{AggregateSample, DropSample, Frame};
use rustc_hash::FxHashMap;

use crate::energy::tracks::EnergyTracks;
use crate::run::{self, RunMeta};
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

/// Writes the run at `input`, whose metadata is `meta`, to `out`; returns the number of
/// events written. `on_progress` is called after every batch of events. The caller finishes
/// the writer.
pub fn convert<W: TraceWriter>(
    meta: &RunMeta,
    input: &Path,
    out: &mut W,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<u64, ConvertError> {
    let total_bytes = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0);
    let mut converter = Converter::new(meta, out);
    converter.declare_named_tracks()?;
    let mut reader = run::open(input).map_err(ConvertError::Read)?;
    let mut events = 0u64;
    while let Some(frame) =
        reader.next_frame().map_err(|e| ConvertError::Read(format!("{}: {e}", input.display())))?
    {
        match frame {
            Frame::Events(batch) => {
                for event in batch {
                    let Some(func) = Func::from_id(event.kind) else {
                        continue;
                    };
                    let thread = converter.thread(event.pid, event.tid)?;
                    if func.api() == Api::Itt {
                        itt::write(&mut converter, func, event, thread)?;
                    } else {
                        calls::write(&mut converter, func, event, thread)?;
                    }
                    events += 1;
                }
                on_progress(&Progress { events, bytes_read: reader.offset(), total_bytes });
            }
            Frame::Aggregates(samples) => converter.aggregates(&samples)?,
            Frame::Drops(samples) => converter.drops(&samples)?,
            Frame::EnergyDevice(device) => converter.energy.device(&device, converter.out)?,
            Frame::EnergySamples(samples) => converter.energy.samples(&samples, converter.out)?,
            _ => {}
        }
    }
    Ok(events)
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
    out: &'a mut W,
    processes: FxHashMap<u32, ProcessHandle>,
    threads: FxHashMap<(u32, u32), ThreadHandle>,
    texts: FxHashMap<Text, StringHandle>,
    counters: FxHashMap<CounterKey, CounterHandle>,
    energy: EnergyTracks,
}

impl<'a, W: TraceWriter> Converter<'a, W> {
    fn new(meta: &'a RunMeta, out: &'a mut W) -> Self {
        Converter {
            meta,
            out,
            processes: Default::default(),
            threads: Default::default(),
            texts: Default::default(),
            counters: Default::default(),
            energy: Default::default(),
        }
    }

    /// Names every process (its programs, in exec order) and every named thread, by id.
    fn declare_named_tracks(&mut self) -> io::Result<()> {
        let mut pids: Vec<_> = self.meta.images.iter().collect();
        pids.sort_by_key(|(pid, _)| **pid);
        for (&pid, images) in pids {
            let names: Vec<String> = images.iter().map(|i| i.info.argv.join(" ")).collect();
            let label = format!("{} (pid {pid})", names.join(" → exec "));
            let process = self.out.process(pid, Some(&label))?;
            self.processes.insert(pid, process);
        }
        let mut threads: Vec<_> = self.meta.threads.iter().collect();
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
        if let Some(&thread) = self.threads.get(&(pid, tid)) {
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
        let mut writer = ChromeWriter::new(Vec::new(), START).unwrap();
        let mut reports = 0;
        let events = convert(&meta, run.path(), &mut writer, &mut |_| reports += 1).unwrap();
        assert_eq!((events, reports), (5, 1));
        let trace: serde_json::Value = serde_json::from_slice(&writer.finish().unwrap()).unwrap();
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
