//! `mlprof convert`: a run as a timeline, written to any [`TraceWriter`]. One pass over the
//! file's events, each written as it is read, after a pass over its metadata frames: memory
//! holds the metadata (processes, strings), the fds in use and the writer's handles, never
//! the events.
//!
//! Which file a call's fd named, and whether a thread has spans (ITT tasks, GPU calls) that
//! may enclose its calls, are learned from the events themselves: batches are read
//! [`LOOKAHEAD_EVENTS`] ahead of the one converted, and their opens, closes and spans noted
//! first ([`FdIntervals::observe_streaming`]), because the collector writes records in drain
//! order, not causal order. Should a record arrive later than that (see
//! [`FdIntervals::inexact`]), the conversion starts over with the run's complete fd history
//! from a full metadata pass (a second read of the file): the trace is always the same.
//! A thread whose first span is found only after some of its calls were written needs no
//! second pass: the span goes out of order with an absolute timestamp (a Perfetto writer's
//! "late parent"), and trace_processor nests slices by time.
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
mod converter;
mod itt;
mod options;
mod read;

use std::io;
use std::path::Path;

use mlprof_trace::TraceWriter;
use rustc_hash::FxHashSet;

use crate::run::{FdIntervals, RunMeta};
use read::{Learned, convert_with};

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

/// Why a pass stopped early.
enum Stop {
    Error(ConvertError),
    /// A streaming pass met a record it would have needed earlier: `convert` starts over with
    /// the complete fd history.
    Inexact(String),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Self {
        Stop::Error(ConvertError::Write(e))
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
    /// Traces written (1 unless split).
    pub parts: usize,
    /// Problems with the input met on the way (corrupt data ends the conversion early).
    pub warnings: Vec<String>,
    /// Why the conversion was done again with the run's complete fd history (a record of an
    /// open or close arrived in the file after calls it names), if it was.
    pub second_pass: Option<String>,
}

/// Events read ahead of the batch being converted, so that their opens, closes and spans are
/// known before the calls they concern (the collector writes in drain order, and holds an
/// open back until its path is defined). 16 MiB of records.
pub const LOOKAHEAD_EVENTS: usize = 1 << 18;

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
    let streaming = Learned {
        fds: FdIntervals::streaming(meta.images.values().flatten()),
        span_threads: FxHashSet::default(),
        lookahead: Some(lookahead),
    };
    match convert_with(meta, input, options, open, close, on_progress, streaming) {
        Ok(outcome) => Ok(outcome),
        Err(Stop::Error(e)) => Err(e),
        Err(Stop::Inexact(reason)) => {
            let complete = RunMeta::load_readable(input).map_err(ConvertError::Read)?;
            let learned = Learned { fds: complete.fds, span_threads: complete.span_threads, lookahead: None };
            match convert_with(meta, input, options, open, close, on_progress, learned) {
                Ok(outcome) => Ok(Outcome { second_pass: Some(reason), ..outcome }),
                Err(Stop::Error(e)) => Err(e),
                Err(Stop::Inexact(reason)) => unreachable!("a complete fd history is exact: {reason}"),
            }
        }
    }
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
