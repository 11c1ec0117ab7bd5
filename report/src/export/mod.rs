//! `mlprof export --parquet DIR RUN.bin...`: runs as Hive-partitioned Parquet tables, for
//! the engines that query many runs at once (DuckDB, Spark, Dask, Polars). We write files;
//! querying is theirs.
//!
//! ```text
//! DIR/events/run=<id>/rank=<r>/part-0.parquet      file calls (C library)
//! DIR/spans/run=<id>/rank=<r>/part-0.parquet       ITT tasks, frames, markers: ops, phases, DataLoader
//! DIR/gpu_calls/run=<id>/rank=<r>/part-0.parquet   CUDA runtime, driver and NCCL calls
//! DIR/gpu_activity/run=<id>/rank=<r>/part-0.parquet what the GPUs ran (CUPTI)
//! DIR/samples/run=<id>/rank=<r>/part-0.parquet     CPU samples (`--sample`), with span and stack
//! DIR/processes/run=<id>/part-0.parquet            one row per process image
//! DIR/files/run=<id>/part-0.parquet                per-path totals
//! DIR/energy/run=<id>/part-0.parquet               energy and device samples
//! DIR/runs/run=<id>/part-0.parquet                 one row: the run itself
//! DIR/ranges/run=<id>/part-0.parquet               capture ranges (one, the whole run, without)
//! ```
//!
//! `run` and `rank` are partition columns: they are in the paths, not in the files (an engine
//! reading with Hive partitioning adds them as columns). `rank` is `none` for processes
//! without one, so engines type it as a string. The run id is the run's start time (UTC)
//! and a hash of its identity (host, clocks, session): exports of different runs into one
//! folder never meet, and exporting the same run again replaces its own files.
//!
//! Times are ns on the run's axis (CLOCK_MONOTONIC of the recording host, or of the merged
//! run's reference node); `runs.start_realtime_ns − runs.start_mono_ns` converts them to Unix
//! time. Memory is bounded: rows are buffered per table up to a fixed count and written as
//! row groups, the metadata of the run aside.

mod encoding;
mod exporter;
mod lookups;
mod rows;
mod samples;
mod table;

use std::path::{Path, PathBuf};

use crate::run::RunMeta;
use crate::run::source::{ReadBy, Wants};
use crate::run::stream::{EventStream, Item, LOOKAHEAD_EVENTS, PassError, StreamSpec, read_exactly};
use exporter::Exporter;

/// What one run's export wrote.
#[derive(Debug, Clone, Default)]
pub struct Exported {
    pub run_id: String,
    /// Rows per table.
    pub rows: Vec<(&'static str, u64)>,
    /// Parquet bytes of the events table (for bytes per event).
    pub events_bytes: u64,
    /// Parquet bytes of all tables.
    pub bytes: u64,
    pub warnings: Vec<String>,
    /// Why the run was read twice (its fd histories learned in a first pass): a change of an
    /// fd came too late for the single pass.
    pub second_pass: Option<String>,
}

/// `YYYYmmddTHHMMSS` (UTC) of Unix time `ns`.
fn utc_stamp(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + (month <= 2) as i64;
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}", rem / 3600, rem / 60 % 60, rem % 60)
}

/// The run's id in the partition paths: start time and a hash of what identifies it.
pub(crate) fn run_id(meta: &RunMeta) -> String {
    let info = &meta.info;
    let identity = format!(
        "{}\0{}\0{}\0{}\0{}",
        info.host, info.session, info.start_mono_ns, info.start_realtime_ns, info.mlprof_version
    );
    let hash = mlprof_format::string_id(identity.as_bytes());
    format!("{}-{:08x}", utc_stamp(info.start_realtime_ns), hash as u32)
}

/// Exports one run into `dir` (see the module documentation).
///
/// One pass over the file: the metadata frames first (event frames skipped), then the events
/// through the run's streaming reader ([`crate::run::stream`]), which learns from them which
/// files their fds named, reading ahead. Should a change of an fd arrive too late for that,
/// what was written is dropped and the export starts over with the run's complete fd
/// histories, from a full first pass: the rows are always the same.
///
/// `on_progress` is called after each batch of events (a few hundred thousand), from the
/// start again should the export start over.
pub fn export_parquet(
    path: &Path,
    dir: &Path,
    on_progress: &mut dyn FnMut(&ExportProgress),
) -> Result<Exported, String> {
    export_looking_ahead(path, dir, LOOKAHEAD_EVENTS, on_progress)
}

/// How far an export is.
#[derive(Clone, Copy, Debug)]
pub struct ExportProgress {
    /// Events exported so far.
    pub events: u64,
    /// The run's events, when its end record says (a run cut short has none).
    pub total: Option<u64>,
}

/// [`export_parquet`], noting fd changes `lookahead` events ahead.
fn export_looking_ahead(
    path: &Path,
    dir: &Path,
    lookahead: usize,
    on_progress: &mut dyn FnMut(&ExportProgress),
) -> Result<Exported, String> {
    let meta = RunMeta::load_without_events(path)?;
    // Read on a thread of its own: the copy of the file from the page cache runs beside the
    // export (whose tables are encoded on threads of theirs too).
    let spec = StreamSpec {
        read_by: ReadBy::Thread,
        wants: Wants { energy: true, gpu: true, sites: true, ..Wants::default() },
        strict: true,
        lookahead,
    };
    let id = run_id(&meta);
    let exact =
        read_exactly(path, &meta, &spec, |stream| export_pass(path, dir, &meta, &id, stream, on_progress))?;
    Ok(Exported { second_pass: exact.second_pass, ..exact.value })
}

/// One pass over the events of `stream` into the tables of run `id` in `dir`.
fn export_pass(
    path: &Path,
    dir: &Path,
    meta: &RunMeta,
    id: &str,
    stream: &mut EventStream<'_>,
    on_progress: &mut dyn FnMut(&ExportProgress),
) -> Result<Exported, PassError<String>> {
    let io_err = |e: std::io::Error| PassError::Fail(format!("writing {}: {e}", dir.display()));
    let mut progress = ExportProgress { events: 0, total: meta.end.as_ref().map(|e| e.events) };
    let mut exporter = Exporter::new(meta, dir, id).map_err(PassError::Fail)?;
    while let Some(item) = stream.next()? {
        match item {
            Item::Events(batch) => {
                exporter.events(&batch, stream.learned()).map_err(io_err)?;
                progress.events += batch.records().len() as u64;
                on_progress(&progress);
                stream.recycle(batch);
            }
            Item::EnergyDevice(device) => exporter.energy_device(&device),
            Item::EnergySamples(samples) => exporter.energy_samples(&samples).map_err(io_err)?,
            Item::Gpu(records) => exporter.gpu_activity(&records).map_err(io_err)?,
            Item::Aggregates(_) | Item::Drops(_) | Item::EventSites(_) | Item::Samples(_) => {}
        }
    }
    let end = stream.end();
    let mut warnings = end.warnings;
    if end.skipped_frames > 0 {
        warnings
            .push(format!("{} frames of kinds this mlprof does not know were skipped", end.skipped_frames));
    }
    exporter.finish(path, warnings).map_err(io_err)
}

/// Where `export_parquet` puts table `table` of run `id` (for messages and tests).
pub(crate) fn table_dir(dir: &Path, table: &str, id: &str) -> PathBuf {
    dir.join(table).join(format!("run={id}"))
}

#[cfg(test)]
mod tests;
