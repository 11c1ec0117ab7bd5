//! The reports `mlprof` makes from a `run.bin`, as a library: the `mlprof` binary (crate
//! `tools/`) only parses its command line, calls in here and prints.
//!
//! * [`run`]: a run's metadata (processes, threads, strings, fd intervals), read in a first
//!   pass, and the attribution rules every report shares.
//! * [`summary`]: per-function, per-process, per-file and GPU statistics
//!   ([`summary::Summary`]), rendered by [`summary::json`] and [`summary::text`].
//! * [`pipeline`]: ITT span totals and the DataLoader pipeline.
//! * [`html`]: the one-page HTML report with plots (`mlprof report`).
//! * [`diff`]: two runs side by side (`mlprof diff`).
//! * [`activity`]: where each main process's (rank's) wall time went, and timelines.
//! * [`energy`]: energy per device, process and span, with uncertainties.
//! * [`export`]: runs as Hive-partitioned Parquet tables for DuckDB, Spark, Dask, Polars.
//! * [`merge`]: the runs of a job's nodes into one run on one time axis (clock alignment
//!   from the collectives).
//! * [`shapes`]: op input shapes (`--torch-shapes` markers paired with PyTorch op ranges).
//! * [`convert`]: a run as a timeline, written through any trace writer of the `mlprof-trace`
//!   crate ([`mlprof_trace::TraceWriter`]: Perfetto protobuf, Chrome JSON).
//!
//! Computations return plain structs; JSON, text and CSV are renderings of them.

pub mod activity;
pub mod convert;
pub mod diff;
pub mod energy;
pub mod export;
pub mod html;
pub mod human;
pub mod merge;
pub mod pipeline;
mod prefetch;
pub mod run;
pub mod shapes;
pub mod summary;

#[cfg(test)]
mod testing;
