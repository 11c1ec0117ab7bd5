//! `mlprof convert`: a run as a timeline, written to any [`TraceWriter`]. One pass over the
//! file's events, each written as it is read, after a pass over its metadata frames: memory
//! holds the metadata (processes, strings), the fds in use and the writer's handles, never
//! the events.
//!
//! The events come from the run's streaming reader ([`crate::run::stream`]), which learns
//! from them which file each fd named and which threads have spans (ITT tasks, GPU calls)
//! that may enclose their calls, reading ahead; should a record arrive too late for that, the
//! conversion starts over with the run's complete fd history: the trace is always the same.
//! A thread whose first span is found only after some of its calls were written needs no
//! second pass: the span goes out of order with an absolute timestamp (a Perfetto writer's
//! "late parent"), and trace_processor nests slices by time.
//!
//! What becomes what: a recorded call is a slice on its thread named after the function, with
//! its arguments (`calls`); an ITT task a slice named after the task, a marker an instant, a
//! DataLoader batch a flow from its fetch to its wait (`itt`); aggregated clock reads and
//! drop counts are counter tracks of their process; energy samples are counter tracks of one
//! pseudo-process per device ([`crate::energy::tracks`]); CPU samples (`--sample`) are
//! samples of their thread with the stack they ran, its frames named (`samples`).
//!
//! [`Options`] cut a run too big for a browser: a time window, some processes, some kinds of
//! event, and parts of at most N events, each a complete trace with all the metadata.

mod calls;
mod converter;
mod gpu;
mod itt;
mod options;
mod ranges;
mod samples;

use std::io;
use std::path::Path;

use crate::run::RunMeta;
use crate::run::source::{ReadBy, Wants};
use crate::run::stream::{EventStream, Item, LOOKAHEAD_EVENTS, PassError, StreamSpec, read_exactly};
use converter::Converter;
use mlprof_trace::TraceWriter;

pub use options::{Kinds, Options, ProcessNamer, process_name};

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

impl From<io::Error> for PassError<ConvertError> {
    fn from(e: io::Error) -> Self {
        PassError::Fail(ConvertError::Write(e))
    }
}

impl From<String> for ConvertError {
    fn from(message: String) -> Self {
        ConvertError::Read(message)
    }
}

impl From<io::Error> for ConvertError {
    fn from(e: io::Error) -> Self {
        ConvertError::Write(e)
    }
}

/// What a conversion wrote.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Events written (slices and instants), over all parts.
    pub events: u64,
    /// CPU samples (`--sample`) given to the writers, over all parts (a Chrome JSON writer
    /// drops them).
    pub samples: u64,
    /// Traces written (1 unless split).
    pub parts: usize,
    /// Problems with the input met on the way (corrupt data ends the conversion early).
    pub warnings: Vec<String>,
    /// Why the conversion was done again with the run's complete fd history (a record of an
    /// open or close arrived in the file after calls it names), if it was.
    pub second_pass: Option<String>,
}

/// Writes the run at `input`, whose metadata is `meta` (from [`RunMeta::load_metadata`] or any
/// other load), as one trace or (with `split_every`) several: `open(i)` makes the writer of
/// part `i` (from 0), `close(i, w)` finishes it. `on_progress` is called after every batch of
/// events. Corrupt data ends the conversion with a warning: the traces hold what was readable.
///
/// Should the streaming pass meet an fd change too late (see the module documentation), the
/// writers of that pass are dropped unfinished and the conversion starts over: `open(0)` is
/// called again, and `close` again for every part.
pub fn convert<W: TraceWriter>(
    meta: &RunMeta,
    input: &Path,
    options: &Options<'_>,
    open: &mut dyn FnMut(usize) -> io::Result<W>,
    close: &mut dyn FnMut(usize, W) -> io::Result<()>,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<Outcome, ConvertError> {
    convert_looking_ahead(meta, input, options, open, close, on_progress, LOOKAHEAD_EVENTS)
}

/// [`convert`], reading `lookahead` events ahead.
fn convert_looking_ahead<W: TraceWriter>(
    meta: &RunMeta,
    input: &Path,
    options: &Options<'_>,
    open: &mut dyn FnMut(usize) -> io::Result<W>,
    close: &mut dyn FnMut(usize, W) -> io::Result<()>,
    on_progress: &mut dyn FnMut(&Progress),
    lookahead: usize,
) -> Result<Outcome, ConvertError> {
    let spec = StreamSpec {
        read_by: ReadBy::Mapping,
        wants: Wants {
            aggregates: options.only.io,
            drops: true,
            energy: options.only.energy,
            gpu: options.only.gpu,
            sites: true,
            samples: options.only.samples,
        },
        strict: false,
        lookahead,
    };
    let exact = read_exactly(input, meta, &spec, |stream| {
        convert_pass(meta, input, options, open, close, on_progress, stream)
    })?;
    Ok(Outcome { second_pass: exact.second_pass, ..exact.value })
}

/// One pass over the events of `stream`, into writers from `open`.
fn convert_pass<W: TraceWriter>(
    meta: &RunMeta,
    input: &Path,
    options: &Options<'_>,
    open: &mut dyn FnMut(usize) -> io::Result<W>,
    close: &mut dyn FnMut(usize, W) -> io::Result<()>,
    on_progress: &mut dyn FnMut(&Progress),
    stream: &mut EventStream<'_>,
) -> Result<Outcome, PassError<ConvertError>> {
    let total_bytes = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0);
    let mut converter = Converter::new(meta, options, open(0)?);
    converter.declare_named_tracks(&stream.learned().span_threads)?;
    ranges::write(&mut converter)?;
    let mut outcome = Outcome { parts: 1, ..Outcome::default() };
    let mut reported = None;
    let mut report = |events, stream: &EventStream<'_>| {
        let progress = Progress { events, bytes_read: stream.bytes_read(), total_bytes };
        if reported != Some((progress.events, progress.bytes_read)) {
            reported = Some((progress.events, progress.bytes_read));
            on_progress(&progress);
        }
    };
    while let Some(item) = stream.next()? {
        converter.spans_found(stream.new_span_threads());
        match item {
            Item::Events(batch) => {
                converter.events(
                    (batch.records(), batch.sites()),
                    batch.paths(),
                    stream.learned(),
                    &mut outcome,
                    open,
                    close,
                )?;
                stream.recycle(batch);
                report(outcome.events, stream);
            }
            Item::Gpu(records) => converter.gpu(&records, &stream.learned().span_threads)?,
            Item::Samples(samples) => {
                outcome.samples += converter.samples(&samples, &stream.learned().span_threads)?;
            }
            other => converter.item(other)?,
        }
    }
    if let Some(e) = stream.read_error() {
        outcome.warnings.push(format!("{e}; the trace holds what was recorded before it"));
    }
    converter.gpu_busy_counters()?;
    // The end, unless the last batch said it already.
    report(outcome.events, stream);
    close(outcome.parts - 1, converter.out)?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, DATASET, START};
    use mlprof_format::func::Func;
    use mlprof_format::record::{Event, IttSpan};
    use mlprof_format::runfile::{RunEnd, RunInfo, RunWriter};
    use mlprof_trace::chrome::ChromeWriter;
    use mlprof_trace::perfetto::PerfettoWriter;

    /// Converts `path` to Chrome JSON, reading `lookahead` events ahead.
    fn chrome(path: &Path, lookahead: usize) -> (Outcome, serde_json::Value) {
        let meta = RunMeta::load_metadata(path).unwrap();
        let mut json = Vec::new();
        let outcome = convert_looking_ahead(
            &meta,
            path,
            &Options::default(),
            &mut |_| ChromeWriter::new(Vec::new(), START),
            &mut |_, w| {
                json = w.finish()?;
                Ok(())
            },
            &mut |_| {},
            lookahead,
        )
        .unwrap();
        (outcome, serde_json::from_slice(&json).unwrap())
    }

    #[test]
    fn a_span_found_after_its_threads_calls_were_written_still_encloses_them() {
        // Two reads, then (a batch later, as a task is recorded when it ends) the task around
        // them: read ahead, the thread is known to have spans and its reads wait in its
        // forest; not, they were written first and the task goes out as a late parent.
        let path = std::env::temp_dir().join(format!("mlprof-report-late-span-{}.bin", std::process::id()));
        let info = RunInfo { start_mono_ns: START, ..RunInfo::default() };
        let mut w = RunWriter::create(&path, &info).unwrap();
        let read = Event { kind: Func::Read as u16, pid: 10, tid: 10, fd: 0, dur: 100, ..Event::default() };
        w.write_events(&[Event { start: START + 1_000, ..read }, Event { start: START + 2_000, ..read }])
            .unwrap();
        let task = IttSpan {
            kind: Func::IttTask as u16,
            pid: 10,
            tid: 10,
            start: START + 500,
            dur: 4_500,
            ..IttSpan::default()
        };
        w.write_events(&[task.into_event()]).unwrap();
        w.finish(&RunEnd::default()).unwrap();
        let meta = RunMeta::load_metadata(&path).unwrap();
        let convert = |lookahead| {
            let mut stats = None;
            let outcome = convert_looking_ahead(
                &meta,
                &path,
                &Options::default(),
                &mut |_| PerfettoWriter::new(Vec::new(), false),
                &mut |_, w| {
                    stats = Some(w.stats());
                    w.finish().map(drop)
                },
                &mut |_| {},
                lookahead,
            )
            .unwrap();
            (outcome.events, outcome.second_pass, stats.unwrap())
        };
        let (ahead, late) = (convert(LOOKAHEAD_EVENTS), convert(0));
        std::fs::remove_file(&path).unwrap();
        assert_eq!((ahead.0, ahead.1.as_deref()), (3, None));
        assert_eq!((ahead.2.late_parents, ahead.2.clamped), (0, 0));
        // Learning spans late costs no second pass: the writer puts the task out of order,
        // with an absolute timestamp, and trace_processor nests it by time.
        assert_eq!((late.0, late.1.as_deref()), (3, None));
        assert_eq!((late.2.late_parents, late.2.clamped), (1, 0));
    }

    #[test]
    fn an_open_recorded_after_its_reads_names_them_all_the_same() {
        // The collector holds an open back until its path is defined: here its read comes a
        // batch before it in the file.
        let run = testing::write_late_open("late-open");
        let converted = [chrome(run.path(), LOOKAHEAD_EVENTS), chrome(run.path(), 0)];
        for (lookahead, (outcome, trace)) in [LOOKAHEAD_EVENTS, 0].into_iter().zip(converted) {
            let read = trace["traceEvents"].as_array().unwrap().iter().find(|r| r["name"] == "read").unwrap();
            assert_eq!(read["args"]["path"], DATASET, "lookahead {lookahead}");
            // Read ahead, the open was known in time; not, the run was read again.
            assert_eq!(outcome.second_pass.is_some(), lookahead == 0, "{:?}", outcome.second_pass);
        }
    }

    #[test]
    fn a_run_becomes_named_tracks_slices_and_counters() {
        let run = testing::write("convert");
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
