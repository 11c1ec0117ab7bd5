//! `mlprof`: reports on run files written by `mlprof-collect`. The reports themselves live in
//! the `mlprof-report` library; this crate parses the command line and prints.
//!
//! The program is a library whose one public item is [`main`]: `src/bin/mlprof.rs` calls it,
//! and so does the `mlprof` of the Python wheel (crate `wheel/`), which then reuses this crate
//! as compiled by `cargo build --release` instead of compiling it again.

mod convert;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use convert::{ConvertRequest, TraceFormat, convert};
use mlprof_report::diff::{Diff, RunFigures};
use mlprof_report::{diff, energy, export, hotspots, html, merge, summary};

#[derive(Parser)]
#[command(name = "mlprof", version, about = "Reports on mlprof run files (run.bin)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Per-function table for the whole process tree and per process, top files, drops.
    Summary {
        /// The run file written by mlprof-collect.
        run: PathBuf,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// Rows in the top-files tables.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// The calls as the system calls they make, like `strace -c -f` (libc calls folded into
        /// the system calls glibc makes for them).
        #[arg(long)]
        syscalls: bool,
        /// The calls by call site (runs recorded with `mlprof-collect --sites`): which Python
        /// line made how many of which calls, for how long (the JSON always has `sites`).
        #[arg(long, conflicts_with = "syscalls")]
        sites: bool,
    },
    /// Energy per device, per process and per span name (the recorded calls), with
    /// uncertainties and coverage; `--ops` for the operator table.
    Energy {
        /// The run file written by mlprof-collect.
        run: PathBuf,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// Operator table: calls, median and 3σ-trimmed mean time, energy per call, share.
        #[arg(long)]
        ops: bool,
        /// With --ops: CSV instead of a table.
        #[arg(long, requires = "ops")]
        csv: bool,
        /// With --ops --csv: append the rows to FILE (header only when FILE is new or empty).
        #[arg(long, value_name = "FILE", requires = "csv")]
        append: Option<PathBuf>,
        /// Rows in the per-span table.
        #[arg(long, default_value_t = 20)]
        top: usize,
    },
    /// Where the CPU went inside each span (runs recorded with `mlprof-collect --sample`): per
    /// span name (an op, a transform, a batch fetch, a phase; "(outside any span)"), the samples,
    /// the CPU time they stand for, and the functions by self and total share, with their module.
    Hotspots {
        /// The run file written by mlprof-collect.
        run: PathBuf,
        /// Only spans of this name (e.g. `transform:RandomResizedCrop`, `aten::conv2d`).
        #[arg(long, value_name = "NAME")]
        span: Option<String>,
        /// Functions per span.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Print JSON instead of tables.
        #[arg(long, conflicts_with = "folded")]
        json: bool,
        /// Folded stacks (`span;root;…;leaf COUNT`), for inferno's flamegraph or speedscope.
        #[arg(long)]
        folded: bool,
    },
    /// One self-contained HTML page with plots (no network, every style inline): where each
    /// main process's wall time went, timelines, the data pipeline, top files, ops, calls, GPU
    /// and energy; with --baseline, compared with another run.
    Report {
        /// The run file written by mlprof-collect.
        run: PathBuf,
        /// The HTML file to write (default: RUN with the extension .html).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// A run to compare with (A; RUN is B): bars of both and the biggest changes.
        #[arg(long, value_name = "A.bin")]
        baseline: Option<PathBuf>,
    },
    /// Two runs side by side: per function, file, span name and rank, count, time and bytes in
    /// A and B, biggest absolute time change first; data-wait share and energy of both.
    Diff {
        /// The first run (A).
        a: PathBuf,
        /// The second run (B).
        b: PathBuf,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// Rows in each table.
        #[arg(long, default_value_t = 15)]
        top: usize,
    },
    /// Convert to a trace for https://ui.perfetto.dev: Perfetto's protobuf (default), or Chrome
    /// JSON (`-o X.json`, or `--format chrome`).
    Convert {
        /// The run file written by mlprof-collect.
        run: PathBuf,
        /// Output trace file (default: RUN with the extension .pftrace, or .json for Chrome).
        /// `.json` means Chrome JSON, anything else Perfetto.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Output format, whatever the extension.
        #[arg(long, value_enum)]
        format: Option<TraceFormat>,
        /// Perfetto: deflate the packets (compressed_packets; about 3× smaller).
        #[arg(long)]
        compress: bool,
        /// Only events that end at or after S seconds from the run start.
        #[arg(long, value_name = "S")]
        from: Option<f64>,
        /// Only events that start at or before S seconds from the run start.
        #[arg(long, value_name = "S")]
        to: Option<f64>,
        /// Only these processes (repeat, or separate with commas).
        #[arg(long, value_name = "PID", value_delimiter = ',')]
        pid: Vec<u32>,
        /// Only these kinds of event: io (C library calls, clock counters), itt (tasks, ops,
        /// phases, DataLoader spans), gpu (CUDA, NCCL), energy (device counters), samples (CPU
        /// samples of `mlprof-collect --sample`, with their stacks; Perfetto only).
        #[arg(long, value_name = "KINDS")]
        only: Option<String>,
        /// Files of at most N events each, every one complete with the metadata, named
        /// OUTPUT with .001, .002, … before the extension.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        split_every: Option<u64>,
        /// Report progress every second on stderr (default: when stderr is a terminal).
        #[arg(long)]
        progress: bool,
    },
    /// Export runs as Hive-partitioned Parquet (DIR/<table>/run=<id>/[rank=<r>/]part-0.parquet)
    /// for DuckDB, Spark, Dask or Polars. Runs exported into one folder sit side by side;
    /// exporting a run again replaces its own files.
    Export {
        /// The folder to write the tables into (created if missing).
        #[arg(long, value_name = "DIR", required = true)]
        parquet: PathBuf,
        /// Run files (single-node or merged).
        #[arg(required = true, num_args = 1..)]
        runs: Vec<PathBuf>,
        /// Report progress every second on stderr (default: when stderr is a terminal).
        #[arg(long)]
        progress: bool,
    },
    /// Merge the runs of a job's nodes (one mlprof-collect per node) into one run on one time
    /// axis: clocks aligned from the realtime anchors, then from the collectives both sides
    /// recorded. Prints the offset applied to each node and the residual skew.
    Merge {
        /// The nodes' run files.
        #[arg(required = true, num_args = 1..)]
        runs: Vec<PathBuf>,
        /// The merged run file to write.
        #[arg(long, short, required = true)]
        output: PathBuf,
    },
}

/// Writing a report to stdout failed (a full disk, a closed descriptor; a closed pipe ends
/// the process by SIGPIPE before this).
fn stdout_error(e: std::io::Error) -> String {
    format!("writing the report: {e}")
}

/// The whole `mlprof` program: parses the command line, runs the report.
pub fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away (`| head`).
    // Safety: restoring the default disposition of SIGPIPE before any output.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let result = match Cli::parse().command {
        Command::Summary { run, json, top, syscalls, sites } => {
            summary_command(&run, json, top, syscalls, sites)
        }
        Command::Energy { run, json, ops, csv, append, top } => {
            energy_command(&run, EnergyOutput::from_flags(json, ops, csv, append), top)
        }
        Command::Report { run, output, baseline } => report_command(&run, output, baseline.as_deref()),
        Command::Diff { a, b, json, top } => diff_command(&a, &b, json, top),
        Command::Convert { run, output, format, compress, from, to, pid, only, split_every, progress } => {
            let request =
                ConvertRequest { output, format, compress, from, to, pids: pid, only, split_every, progress };
            convert(&run, request)
        }
        Command::Merge { runs, output } => merge_command(&runs, &output),
        Command::Hotspots { run, span, top, json, folded } => hotspots_command(&run, span, top, json, folded),
        Command::Export { parquet, runs, progress } => export_command(&parquet, &runs, progress),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mlprof: error: {message}");
            ExitCode::from(1)
        }
    }
}

/// `mlprof summary`: tables, or JSON; the system call view with `--syscalls`, the call sites
/// with `--sites`.
fn summary_command(run: &Path, json: bool, top: usize, syscalls: bool, sites: bool) -> Result<(), String> {
    let summary = summary::Summary::compute(run)?;
    let mut out = std::io::stdout().lock();
    match (json, syscalls) {
        (true, false) => writeln!(out, "{}", summary::json::render(&summary)).map_err(stdout_error),
        (true, true) => writeln!(out, "{}", summary::json::render_syscalls(&summary)).map_err(stdout_error),
        (false, false) if sites => summary::sites::write(&summary, top, &mut out).map_err(stdout_error),
        (false, false) => summary::text::write(&summary, top, &mut out).map_err(stdout_error),
        (false, true) => summary::text::write_syscalls(&summary, &mut out).map_err(stdout_error),
    }
}

/// `mlprof hotspots`: tables, JSON or folded stacks.
fn hotspots_command(
    run: &Path,
    span: Option<String>,
    top: usize,
    json: bool,
    folded: bool,
) -> Result<(), String> {
    let hotspots = hotspots::compute(run, &hotspots::Options { span, top })?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", hotspots::render::json(&hotspots)).map_err(stdout_error)
    } else if folded {
        hotspots::render::folded(&hotspots, &mut out).map_err(stdout_error)
    } else {
        hotspots::render::text(&hotspots, &mut out).map_err(stdout_error)
    }
}

/// When a progress line is due: a second after the start, then a second after the last line
/// (not one per elapsed second: a slow batch is followed by one line, not a burst).
pub(crate) struct EverySecond {
    next: Option<Instant>,
}

impl EverySecond {
    /// `asked`: `--progress` was given; without it, progress is shown when stderr is a
    /// terminal (else never due).
    pub(crate) fn new(asked: bool) -> EverySecond {
        let on = asked || std::io::stderr().is_terminal();
        EverySecond { next: on.then(|| Instant::now() + Duration::from_secs(1)) }
    }

    pub(crate) fn due(&mut self) -> bool {
        match self.next {
            Some(next) if Instant::now() >= next => {
                self.next = Some(Instant::now() + Duration::from_secs(1));
                true
            }
            _ => false,
        }
    }
}

/// `mlprof export --parquet`: one line per run, and a line every second while a run is
/// exported with `progress` (`--progress`) or on a terminal.
fn export_command(dir: &Path, runs: &[PathBuf], progress: bool) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for run in runs {
        let started = Instant::now();
        let mut every_second = EverySecond::new(progress);
        let mut report = |p: &export::ExportProgress| {
            if every_second.due() {
                match p.total {
                    Some(total) if total > 0 => {
                        let done = (p.events as f64 * 100.0 / total as f64).min(100.0);
                        eprintln!("mlprof export: {} events ({done:.0}%)", p.events);
                    }
                    _ => eprintln!("mlprof export: {} events", p.events),
                }
            }
        };
        let exported = export::export_parquet(run, dir, &mut report)?;
        for warning in &exported.warnings {
            eprintln!("mlprof: warning: {}: {warning}", run.display());
        }
        if let Some(reason) = &exported.second_pass {
            eprintln!("mlprof export: read the run twice to name every fd's file exactly ({reason})");
        }
        let events = exported.rows.iter().find(|r| r.0 == "events").map_or(0, |r| r.1);
        let rows: Vec<String> = exported.rows.iter().map(|(t, n)| format!("{t} {n}")).collect();
        eprintln!(
            "mlprof export: {} → {}/*/run={}/ ({}; {:.1} MB, {:.1} bytes/event in events, {:.2} s)",
            run.display(),
            dir.display(),
            exported.run_id,
            rows.join(", "),
            exported.bytes as f64 / 1e6,
            exported.events_bytes as f64 / events.max(1) as f64,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// `mlprof merge`: one line per node with its clock offset and how it was found.
fn merge_command(runs: &[PathBuf], output: &Path) -> Result<(), String> {
    if runs.iter().any(|r| r == output) {
        return Err(format!("{} is both an input and the output", output.display()));
    }
    let outcome = merge::merge(runs, output)?;
    for warning in &outcome.warnings {
        eprintln!("mlprof: warning: {warning}");
    }
    for n in &outcome.nodes {
        let how = match n.alignment.as_str() {
            "reference" => "the reference: the merged time axis is its CLOCK_MONOTONIC".to_string(),
            "collectives" => format!(
                "{} collectives matched with node {}, residual skew {} (realtime anchors alone: {:+.6} s)",
                n.matched,
                n.aligned_to,
                mlprof_report::human::format_ns(n.residual_ns.unwrap_or(0)),
                n.realtime_offset_ns as f64 / 1e9
            ),
            _ => "realtime anchors only (no collective in common)".to_string(),
        };
        let pids = if n.pid_offset > 0 { format!(", pids +{}", n.pid_offset) } else { String::new() };
        eprintln!(
            "mlprof merge: node {} {} ({}): offset {:+.9} s{pids}; {how}",
            n.node,
            n.host,
            n.source,
            n.offset_ns as f64 / 1e9
        );
    }
    eprintln!(
        "mlprof merge: wrote {} events of {} process image(s) from {} node(s) to {}",
        outcome.events,
        outcome.processes,
        outcome.nodes.len(),
        output.display()
    );
    Ok(())
}

/// `mlprof report`: the HTML page, written next to the run unless `-o` says where.
fn report_command(run: &Path, output: Option<PathBuf>, baseline: Option<&Path>) -> Result<(), String> {
    let figures = RunFigures::load(run)?;
    let baseline = baseline.map(RunFigures::load).transpose()?;
    let page = html::render(&figures, baseline.as_ref());
    let output = output.unwrap_or_else(|| run.with_extension("html"));
    std::fs::write(&output, page.as_bytes()).map_err(|e| format!("{}: {e}", output.display()))?;
    eprintln!("mlprof: wrote {} ({} KiB); open it in a browser", output.display(), page.len().div_ceil(1024));
    Ok(())
}

/// `mlprof diff`: tables, or JSON.
fn diff_command(a: &Path, b: &Path, json: bool, top: usize) -> Result<(), String> {
    let diff = Diff::compute(&RunFigures::load(a)?, &RunFigures::load(b)?);
    if json {
        println!("{}", diff::json::render(&diff));
        Ok(())
    } else {
        diff::text::write(&diff, top, &mut std::io::stdout().lock()).map_err(stdout_error)
    }
}

/// What `mlprof energy` prints.
enum EnergyOutput {
    Text,
    Json,
    Ops,
    Csv,
    /// CSV rows appended to a file.
    CsvAppend(PathBuf),
}

impl EnergyOutput {
    /// From the flags, which clap has checked (`--append` needs `--csv`, `--csv` needs `--ops`);
    /// CSV wins over `--json`.
    fn from_flags(json: bool, ops: bool, csv: bool, append: Option<PathBuf>) -> Self {
        match (csv, append) {
            (true, Some(file)) => EnergyOutput::CsvAppend(file),
            (true, None) => EnergyOutput::Csv,
            _ if ops => EnergyOutput::Ops,
            _ if json => EnergyOutput::Json,
            _ => EnergyOutput::Text,
        }
    }
}

/// `mlprof energy`.
fn energy_command(run: &Path, output: EnergyOutput, top: usize) -> Result<(), String> {
    let report = energy::EnergyReport::compute(&energy::EnergyRun::load(run)?);
    // CSV rows name the run as it was given on the command line.
    let run_name = run.display().to_string();
    match output {
        EnergyOutput::CsvAppend(file) => energy::csv::append(&report, &run_name, &file),
        EnergyOutput::Csv => {
            print!("{}{}", energy::csv::HEADER, energy::csv::rows(&report, &run_name));
            Ok(())
        }
        EnergyOutput::Ops => {
            energy::text::write_ops(&report, &mut std::io::stdout().lock()).map_err(stdout_error)
        }
        EnergyOutput::Json => {
            println!("{}", energy::json::render(&report));
            Ok(())
        }
        EnergyOutput::Text => {
            energy::text::write(&report, top, &mut std::io::stdout().lock()).map_err(stdout_error)
        }
    }
}
