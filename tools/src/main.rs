//! `mlprof`: reports on run files written by `mlprof-collect`. The reports themselves live in
//! the `mlprof-report` library; this binary parses the command line and prints.

use std::fs::File;
use std::io::{BufWriter, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use mlprof_report::convert::{ConvertError, Progress};
use mlprof_report::run::RunMeta;
use mlprof_report::trace::TraceWriter;
use mlprof_report::trace::chrome::ChromeWriter;
use mlprof_report::{energy, summary};

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
    /// Convert to a Chrome trace (JSON) that opens in Perfetto UI and chrome://tracing.
    Convert {
        /// The run file written by mlprof-collect.
        run: PathBuf,
        /// Output trace file.
        #[arg(long, short, default_value = "trace.json")]
        output: PathBuf,
        /// Report progress every second on stderr (default: when stderr is a terminal).
        #[arg(long)]
        progress: bool,
    },
}

/// Writing a report to stdout failed (a full disk, a closed descriptor; a closed pipe ends
/// the process by SIGPIPE before this).
fn stdout_error(e: std::io::Error) -> String {
    format!("writing the report: {e}")
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away (`| head`).
    // Safety: restoring the default disposition of SIGPIPE before any output.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let result = match Cli::parse().command {
        Command::Summary { run, json, top } => summary_command(&run, json, top),
        Command::Energy { run, json, ops, csv, append, top } => {
            energy_command(&run, EnergyOutput::from_flags(json, ops, csv, append), top)
        }
        Command::Convert { run, output, progress } => {
            convert(&run, &output, progress || std::io::stderr().is_terminal())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mlprof: error: {message}");
            ExitCode::from(1)
        }
    }
}

/// `mlprof summary`: tables, or JSON.
fn summary_command(run: &Path, json: bool, top: usize) -> Result<(), String> {
    let summary = summary::Summary::compute(run)?;
    if json {
        println!("{}", summary::json::render(&summary));
        Ok(())
    } else {
        summary::text::write(&summary, top, &mut std::io::stdout().lock()).map_err(stdout_error)
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

/// `mlprof convert`: the run as Chrome trace JSON, with a line of progress every second when
/// `progress` is set.
fn convert(input: &Path, output: &Path, progress: bool) -> Result<(), String> {
    let meta = RunMeta::load(input)?;
    for warning in &meta.warnings {
        eprintln!("mlprof: warning: {warning}");
    }
    let file = File::create(output).map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    let write_error = |e: std::io::Error| format!("writing {}: {e}", output.display());
    let mut trace = ChromeWriter::new(BufWriter::with_capacity(1 << 20, file), meta.info.start_mono_ns)
        .map_err(write_error)?;
    let mut next_report = Instant::now() + Duration::from_secs(1);
    let mut report = |p: &Progress| {
        if progress && Instant::now() >= next_report {
            next_report += Duration::from_secs(1);
            let done = p.bytes_read as f64 * 100.0 / p.total_bytes.max(1) as f64;
            eprintln!("mlprof convert: {} events ({done:.0}%)", p.events);
        }
    };
    let events =
        mlprof_report::convert::convert(&meta, input, &mut trace, &mut report).map_err(|e| match e {
            ConvertError::Read(message) => message,
            ConvertError::Write(e) => write_error(e),
        })?;
    trace.finish().map_err(write_error)?;
    let bytes = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "mlprof convert: wrote {events} events to {} ({:.1} MB); open it in https://ui.perfetto.dev or chrome://tracing",
        output.display(),
        bytes as f64 / 1e6
    );
    Ok(())
}
