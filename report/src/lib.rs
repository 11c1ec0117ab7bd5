//! The reports `mlprof` makes from a `run.bin`, as a library: the `mlprof` binary (crate
//! `tools/`) only parses its command line, calls in here and prints. Its public items are
//! what that command line uses; the rest is `pub(crate)`.
//!
//! Layers, each importing only those above it (ARCHITECTURE.md):
//!
//! 1. [`run`]: a run's metadata (processes, threads, strings, fd intervals), read in a first
//!    pass; the attribution rules every report shares (what a call means, which file an fd
//!    named, system call names); and `run::stream`, the one streaming reader of a run's
//!    events that every whole-run pass is a client of. Beside it, [`human`] (durations for
//!    people) and `prefetch` (a cache hint).
//! 2. `pipeline` (ITT span totals and the DataLoader pipeline), `shapes` (op input shapes,
//!    `--torch-shapes` markers paired with PyTorch op ranges), `host_time` (what a process was
//!    doing at an instant: data wait, GPU sync, file I/O, ops) and `gpu_timeline` (what the GPUs
//!    did: CUPTI activity records, their links to host calls, idle time by what the host did).
//! 3. [`summary`] (per-function, per-process, per-file and GPU statistics, rendered by
//!    [`summary::json`] and [`summary::text`]) and [`energy`] (energy per device, process
//!    and span, with uncertainties).
//! 4. `activity`: where each main process's (rank's) wall time went, and timelines;
//!    [`hotspots`]: where the CPU went inside each span (sampled stacks, `--sample`).
//! 5. [`diff`] (two runs side by side, `mlprof diff`), then [`html`] (the one-page report,
//!    `mlprof report`).
//!
//! Beside them, on the streaming reader or the run file itself: [`convert`] (a run as a
//! timeline, written through any trace writer of the `mlprof-trace` crate,
//! [`mlprof_trace::TraceWriter`]: Perfetto protobuf, Chrome JSON), [`export`] (runs as
//! Hive-partitioned Parquet tables for DuckDB, Spark, Dask, Polars) and [`merge`] (the runs
//! of a job's nodes into one run on one time axis, clocks aligned from the collectives).
//!
//! Computations return plain structs; JSON, text and CSV are renderings of them.

// The crate's documentation is for its maintainers (`cargo doc --document-private-items`):
// its modules' docs link the crate-private items they are made of.
#![allow(rustdoc::private_intra_doc_links)]

mod activity;
pub mod convert;
pub mod diff;
pub mod energy;
pub mod export;
mod gpu_timeline;
mod host_time;
pub mod hotspots;
pub mod html;
pub mod human;
pub mod merge;
mod pipeline;
mod prefetch;
pub mod run;
mod shapes;
pub mod summary;

#[cfg(test)]
mod testing;
