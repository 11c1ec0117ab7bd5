//! `mlprof convert`: a run as a Perfetto or Chrome trace, in one file or several, with
//! progress and a word on whether the Perfetto UI can open it.

use std::fs::File;
use std::path::{Path, PathBuf};

use mlprof_filewrite::BackgroundFile;
use mlprof_report::convert::{ConvertError, Kinds, Options, Outcome, Progress};
use mlprof_report::run::RunMeta;
use mlprof_trace::TraceWriter;
use mlprof_trace::chrome::ChromeWriter;
use mlprof_trace::perfetto::PerfettoWriter;

use crate::EverySecond;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TraceFormat {
    /// Perfetto's native protobuf (TrackEvent; CPU samples as PerfSample).
    Perfetto,
    /// Chrome trace event JSON (no CPU samples: Perfetto reads no stacks from JSON).
    Chrome,
}

/// What `mlprof convert` was asked for.
pub(crate) struct ConvertRequest {
    pub(crate) output: Option<PathBuf>,
    pub(crate) format: Option<TraceFormat>,
    pub(crate) compress: bool,
    pub(crate) from: Option<f64>,
    pub(crate) to: Option<f64>,
    pub(crate) pids: Vec<u32>,
    pub(crate) only: Option<String>,
    pub(crate) split_every: Option<u64>,
    /// `--progress` (without it, progress shows when stderr is a terminal).
    pub(crate) progress: bool,
}

/// Trace bytes the Perfetto UI holds in a browser tab (it builds 2-4× that in memory, and a
/// tab gets about 2 GB); JSON costs it several times more per event than protobuf.
const UI_BUDGET_PERFETTO: u64 = 500_000_000;
const UI_BUDGET_JSON: u64 = 250_000_000;

/// Part `index` of a split trace: `trace.pftrace` → `trace.001.pftrace`.
fn part_path(output: &Path, index: usize) -> PathBuf {
    let stem = output.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match output.extension() {
        Some(ext) => format!("{stem}.{:03}.{}", index + 1, ext.to_string_lossy()),
        None => format!("{stem}.{:03}", index + 1),
    };
    output.with_file_name(name)
}

/// Seconds from the run start as ns on the run's clock.
fn run_time(meta: &RunMeta, seconds: Option<f64>, flag: &str) -> Result<Option<u64>, String> {
    match seconds {
        None => Ok(None),
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(meta.info.start_mono_ns + (s * 1e9) as u64)),
        Some(s) => Err(format!("{flag} {s}: expected seconds from the run start (>= 0)")),
    }
}

/// `mlprof convert`: the run as a Perfetto or Chrome trace (or several), with a line of
/// progress every second when asked, and a line on how big the trace is and how to open it.
pub(crate) fn convert(input: &Path, request: ConvertRequest) -> Result<(), String> {
    let meta = RunMeta::load_metadata(input)?;
    for warning in &meta.warnings {
        eprintln!("mlprof: warning: {warning}");
    }
    let format = match (request.format, &request.output) {
        (Some(format), _) => format,
        (None, Some(out)) if out.extension().is_some_and(|e| e == "json") => TraceFormat::Chrome,
        (None, _) => TraceFormat::Perfetto,
    };
    if request.compress && format == TraceFormat::Chrome {
        return Err("--compress applies to Perfetto output, not Chrome JSON".into());
    }
    let output = request.output.clone().unwrap_or_else(|| {
        input.with_extension(if format == TraceFormat::Chrome { "json" } else { "pftrace" })
    });
    let only = match &request.only {
        Some(list) => Kinds::parse(list)?,
        None => Kinds::ALL,
    };
    let namer = |pid: u32, images: &[mlprof_report::run::Image]| process_track_name(&meta, pid, images);
    let mut options = Options {
        from_ns: run_time(&meta, request.from, "--from")?,
        to_ns: run_time(&meta, request.to, "--to")?,
        pids: &request.pids,
        only,
        split_every: request.split_every,
        ..Options::default()
    };
    options.process_name = &namer;
    let path_of = |index: usize| {
        if request.split_every.is_some() { part_path(&output, index) } else { output.clone() }
    };
    let create = |index: usize| {
        let path = path_of(index);
        // Written by a thread of its own, past the page cache where it can: through the page
        // cache the kernel's copying and writeback of a trace cost more CPU than encoding it.
        File::create(&path)
            .and_then(BackgroundFile::paced)
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))
    };
    let mut every_second = EverySecond::new(request.progress);
    let mut report = |p: &Progress| {
        if every_second.due() {
            let done = p.bytes_read as f64 * 100.0 / p.total_bytes.max(1) as f64;
            eprintln!("mlprof convert: {} events ({done:.0}%)", p.events);
        }
    };
    // Per part: a conversion that starts over closes its parts again.
    let mut clamped = Vec::new();
    let result = match format {
        TraceFormat::Chrome => mlprof_report::convert::convert(
            &meta,
            input,
            &options,
            &mut |i| ChromeWriter::new(create(i)?, meta.info.start_mono_ns),
            &mut |_, w| w.finish().and_then(BackgroundFile::close),
            &mut report,
        ),
        TraceFormat::Perfetto => mlprof_report::convert::convert(
            &meta,
            input,
            &options,
            &mut |i| PerfettoWriter::new(create(i)?, request.compress),
            &mut |i, w| {
                clamped.resize(clamped.len().max(i + 1), 0);
                clamped[i] = w.stats().clamped;
                w.finish().and_then(BackgroundFile::close)
            },
            &mut report,
        ),
    };
    let outcome = result.map_err(|e| match e {
        ConvertError::Read(message) => message,
        ConvertError::Write(e) => format!("writing {}: {e}", output.display()),
    })?;
    for warning in &outcome.warnings {
        eprintln!("mlprof: warning: {warning}");
    }
    if let Some(reason) = &outcome.second_pass {
        eprintln!("mlprof convert: read the run twice to name every fd's file exactly ({reason})");
    }
    let clamped: u64 = clamped.iter().sum();
    if clamped > 0 {
        eprintln!(
            "mlprof: warning: {clamped} slices started inside the slice before them on their thread without \
             nesting in it (clock jitter, a signal handler); they are shown from that slice's end"
        );
    }
    report_size(&outcome, format, &(0..outcome.parts).map(path_of).collect::<Vec<_>>());
    Ok(())
}

/// The line after a conversion: what was written, and whether the UI can open it.
fn report_size(outcome: &Outcome, format: TraceFormat, paths: &[PathBuf]) {
    let sizes: Vec<u64> = paths.iter().map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)).collect();
    let (total, largest) = (sizes.iter().sum::<u64>(), sizes.iter().copied().max().unwrap_or(0));
    let (kind, budget) = match format {
        TraceFormat::Perfetto => ("Perfetto protobuf", UI_BUDGET_PERFETTO),
        TraceFormat::Chrome => ("Chrome JSON", UI_BUDGET_JSON),
    };
    let what = match paths {
        [one] => one.display().to_string(),
        _ => format!("{} files {} … {}", paths.len(), paths[0].display(), paths[paths.len() - 1].display()),
    };
    // CPU samples are named only when the run has them (`--sample`), and a Chrome trace holds
    // none (see ChromeWriter).
    let samples = match format {
        TraceFormat::Perfetto if outcome.samples > 0 => format!(" and {} CPU samples", outcome.samples),
        _ => String::new(),
    };
    eprintln!(
        "mlprof convert: wrote {} events{samples} to {what} ({:.1} MB, {kind})",
        outcome.events,
        total as f64 / 1e6
    );
    if largest <= budget {
        eprintln!(
            "mlprof convert: opens in https://ui.perfetto.dev (under its ~{} MB budget)",
            budget / 1_000_000
        );
    } else {
        let example = paths.iter().zip(&sizes).max_by_key(|(_, s)| **s).map(|(p, _)| p.display().to_string());
        eprintln!(
            "mlprof convert: {:.0} MB is over the ~{} MB the Perfetto UI holds in a browser tab: run \
             `trace_processor --httpd {}` and open https://ui.perfetto.dev (it uses the native trace \
             processor), or cut the trace with --from/--to, --pid, --only or --split-every",
            largest as f64 / 1e6,
            budget / 1_000_000,
            example.unwrap_or_default()
        );
    }
}

/// A process's track name in a trace: its programs and pid, after its host (merged runs) and
/// rank, so tracks group by node and rank.
fn process_track_name(meta: &RunMeta, pid: u32, images: &[mlprof_report::run::Image]) -> String {
    let base = mlprof_report::convert::process_name(pid, images);
    let Some(first) = images.first() else { return base };
    let host =
        if meta.nodes.is_empty() { String::new() } else { format!("{}: ", meta.host_of(first.info.node)) };
    let rank = match (&first.info.rank, meta.rank_main(pid, 0)) {
        (Some(r), Some(main)) if main == pid => format!("rank {}: ", r.rank),
        (Some(r), _) => format!("rank {} worker: ", r.rank),
        _ => String::new(),
    };
    format!("{host}{rank}{base}")
}
