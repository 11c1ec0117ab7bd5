//! `mlprof`: reports on run files written by `mlprof-collect`.
//!
//! The program is a library whose one public item is [`main`]: `src/bin/mlprof.rs` calls it,
//! and so does the `mlprof` of the Python wheel (crate `wheel/`), which then reuses this crate
//! as compiled by `cargo build --release` instead of compiling it again.

mod chrome;
mod energy;
mod pipeline;
mod run;
mod summary;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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

/// The whole `mlprof` program: parses the command line, runs the report.
pub fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away (`| head`).
    // Safety: restoring the default disposition of SIGPIPE before any output.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Summary { run, json, top } => summary::Summary::compute(&run).map(|summary| {
            if json {
                println!("{}", summary.to_json());
            } else {
                summary.print_text(top);
            }
        }),
        Command::Energy { run, json, ops, csv, append, top } => {
            energy::Report::compute(&run).and_then(|report| {
                if csv {
                    energy::write_csv(&report, &run, append.as_deref())
                } else {
                    if ops {
                        report.print_ops();
                    } else if json {
                        println!("{}", report.to_json());
                    } else {
                        report.print_text(top);
                    }
                    Ok(())
                }
            })
        }
        Command::Convert { run, output, progress } => {
            let progress = progress || std::io::stderr().is_terminal();
            chrome::convert(&run, &output, progress).map(|stats| {
                eprintln!(
                    "mlprof convert: wrote {} events to {} ({:.1} MB); open it in https://ui.perfetto.dev or chrome://tracing",
                    stats.events,
                    output.display(),
                    stats.bytes as f64 / 1e6
                );
            })
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
