//! `mlprof-collect`'s command line: its options, their defaults and help, the modes in
//! `--help`, and the `MLPROF_*` variables in `--help`'s long form.

use std::path::PathBuf;

use clap::Parser;
use mlprof_format::ring::RingGeometry;

const AFTER_HELP: &str = "\
Modes:
  mlprof-collect --out run.bin -- CMD ARGS...
      Launcher: runs CMD with libmlprof.so preloaded, records CMD and every process it starts
      (threads, fork/vfork/spawn/exec children, Python multiprocessing workers), waits for it,
      writes run.bin and exits with CMD's exit status.
  mlprof-collect --out run.bin [--session NAME]
      Attach: serves the session until SIGINT/SIGTERM. Any process started elsewhere with
      LD_PRELOAD=$(mlprof-collect --print-preload) (and MLPROF_SESSION=NAME for a session
      other than 'default') joins it.

Then: mlprof summary run.bin, mlprof convert run.bin -o trace.json
Environment variables: see --help.";

fn long_help() -> String {
    format!("{AFTER_HELP}\n\nEnvironment:\n{}", mlprof_format::options::render())
}

#[derive(Parser, Debug)]
#[command(name = "mlprof-collect", version, about = "Record a process tree's file I/O, clock reads and ioctls into run.bin", after_help = AFTER_HELP, after_long_help = long_help())]
pub(crate) struct Args {
    /// Output run file; `%h` is replaced by the host name, `%n` by the node index
    /// (SLURM_NODEID, GROUP_RANK, or torchrun's --node_rank), `%%` by `%`.
    #[arg(long, short, default_value = "run.bin")]
    pub(crate) out: PathBuf,
    /// Session name (attach mode; also usable in launcher mode). Defaults to $MLPROF_SESSION or 'default'.
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// libmlprof.so to preload (default: $MLPROF_PRELOAD, else the one next to this binary,
    /// else the one of the Python package installed with it).
    #[arg(long)]
    pub(crate) preload: Option<PathBuf>,
    /// Print the absolute path of the libmlprof.so the launcher would inject and exit, for
    /// attach mode: `LD_PRELOAD=$(mlprof-collect --print-preload) python train.py`.
    #[arg(long, conflicts_with = "command")]
    pub(crate) print_preload: bool,
    /// Lanes in the ring: threads that can record at the same time.
    #[arg(long, default_value_t = RingGeometry::DEFAULT.lane_count)]
    pub(crate) lanes: u32,
    /// Records per lane (a power of two); a lane that fills drops and counts.
    #[arg(long, default_value_t = RingGeometry::DEFAULT.lane_capacity)]
    pub(crate) lane_records: u32,
    /// Timestamp source for producers: auto (TSC where invariant), tsc, monotonic.
    #[arg(long, default_value = "auto", value_parser = ["auto", "tsc", "monotonic"])]
    pub(crate) clock: String,
    /// After the command exits, how long to keep collecting from processes it left running.
    #[arg(long, default_value_t = 2000)]
    pub(crate) linger_ms: u64,
    /// Energy sampling interval, ms (GPUs through NVML, CPU packages through RAPL).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60000))]
    pub(crate) energy_interval: u64,
    /// NVML library to load for GPU energy (default: $MLPROF_NVML_LIB, else libnvidia-ml.so.1).
    #[arg(long)]
    pub(crate) nvml_lib: Option<PathBuf>,
    /// Record no energy, power or utilization samples.
    #[arg(long)]
    pub(crate) no_energy: bool,
    /// PyTorch without code change: Python processes emit PyTorch's per-op ITT ranges,
    /// training phases (forward, backward, optimizer.step, torch.save/load) and DataLoader and
    /// transform spans, through a start-up hook put first on PYTHONPATH (see README).
    #[arg(long)]
    pub(crate) torch: bool,
    /// With --torch (implied): also record each op's input shapes and dtypes (a marker before
    /// each Python-level torch call, paired with the op by the reports; costs ~7 µs per
    /// call, BENCHMARKS.md). Sets MLPROF_TORCH_SHAPES=1 for the hook.
    #[arg(long)]
    pub(crate) torch_shapes: bool,
    /// Complete mode: also record the system calls no symbol hook sees (glibc's own, raw
    /// syscall(), inline syscall instructions, the dynamic loader inside dlopen), every thread
    /// and child, by trapping each one with Linux's syscall user dispatch (5.11+; not ptrace).
    /// Costs a signal delivery and return per system call (+3.2 µs on a 2-vCPU VM whose
    /// signal round trip costs 3.1 µs; strace -f: +25 to +180 µs, BENCHMARKS.md); off by default. Sets
    /// MLPROF_ALL_SYSCALLS=1 for the library. See README "System calls".
    #[arg(long)]
    pub(crate) all_syscalls: bool,
    /// Record the GPU timeline: CUPTI activity records (when and how long each kernel, copy
    /// and memset ran on the GPU, linked to the call that issued it, and why the GPU sat idle)
    /// in processes that use CUDA. Sets MLPROF_CUPTI=on for the library (attach mode: set it in
    /// the processes' environment), unless MLPROF_CUPTI already names a libcupti. Off by
    /// default: on a launch-bound training loop it costs 20-25 % of step time (ResNet-50 with
    /// a JPEG DataLoader: ~8 %; BENCHMARKS.md); MLPROF_CUPTI_KINDS=kernel costs far less.
    #[arg(long, conflicts_with = "no_gpu_timeline")]
    pub(crate) gpu_timeline: bool,
    /// No GPU timeline (the default; kept for scripts that said so when it was on by default).
    /// Sets MLPROF_CUPTI=off for the library.
    #[arg(long)]
    pub(crate) no_gpu_timeline: bool,
    /// Call sites: each recorded call made while its thread runs Python carries the innermost
    /// Python line that made it (file, function, line), read from the thread's own frames at the
    /// call (CPython 3.10-3.13), so that `mlprof summary --sites` can say which line made which
    /// calls. `--sites=N` (2 to 8) also records the N − 1 lines that called it, so that a
    /// call made inside a library (torch.save's open in torch/serialization.py) shows the
    /// script's line that led to it. Sets MLPROF_SITES=N for the library (attach mode: set it in
    /// the processes' environment).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1", require_equals = true,
          value_parser = clap::value_parser!(u32).range(1..=8))]
    pub(crate) sites: Option<u32>,
    /// Sample the CPU of every thread of every process of the job (forks, spawned workers,
    /// exec'd programs) with perf_event_open's cpu-clock event, user stacks unwound with DWARF
    /// CFI, Python 3.11+ frames (function, line) in place of the interpreter's, `HZ` times a
    /// second per running thread (default 199); `mlprof hotspots` shows where each span's CPU
    /// went. Attach mode samples each process that joins the session, from when it joins. Where
    /// the kernel refuses (kernel.perf_event_paranoid 3 or more, a container without
    /// CAP_PERFMON) one line says why and how to fix it; the job runs on.
    #[arg(long, value_name = "HZ", num_args = 0..=1, require_equals = true,
          value_parser = clap::value_parser!(u32).range(1..=10000))]
    sample: Option<Option<u32>>,
    /// Record only between the program's own markers (the job starts outside a range):
    /// `cudaProfilerApi`: between cudaProfilerStart and cudaProfilerStop (or the driver's
    /// cuProfilerStart/cuProfilerStop; torch.cuda.profiler.start()/stop()), whatever the real
    /// call returns; `itt`: between ITT __itt_resume and __itt_pause/__itt_detach (ittapi's
    /// itt.resume()/pause()/detach(), torch.profiler.itt, C code) or the wheel's
    /// mlprof.start()/stop(). Every process of the tree follows at once; outside a range the
    /// hooks pass straight through (calls there are neither recorded nor dropped).
    #[arg(long, value_name = "SOURCE", value_parser = parse_capture_range)]
    pub(crate) capture_range: Option<mlprof_format::ring::CaptureSource>,
    /// With --capture-range: `stop` (the default) records the first range only; `repeat`
    /// every range; `repeat:N` the first N ranges (later markers are ignored).
    #[arg(long, value_name = "stop|repeat[:N]", value_parser = crate::capture::parse_range_end)]
    pub(crate) capture_range_end: Option<u32>,
    /// Start recording SECONDS after the launch (attach mode: after the collector starts); the
    /// job runs unprofiled until then.
    #[arg(long, value_name = "SECONDS", value_parser = crate::capture::parse_seconds)]
    pub(crate) delay: Option<f64>,
    /// Stop recording SECONDS after it started (after --delay); the job goes on unprofiled and
    /// the launcher still waits for it and exits with its status.
    #[arg(long, value_name = "SECONDS", value_parser = crate::capture::parse_seconds)]
    pub(crate) duration: Option<f64>,
    /// With --torch: record training steps A to B (1-based), counted by the main process's
    /// completed optimizer.step() calls: step k runs from the return of step k-1's
    /// optimizer.step() (the job's start for k = 1) to the return of its own. DataLoader
    /// workers and every other process follow the main process's range.
    #[arg(long, value_name = "A-B", value_parser = crate::capture::parse_steps)]
    pub(crate) steps: Option<(u32, u32)>,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// The command to run (launcher mode); none = attach mode.
    #[arg(last = true)]
    pub(crate) command: Vec<String>,
}

impl Args {
    /// `--sample`'s rate: its HZ, or [`crate::sample::DEFAULT_HZ`] without one; `None` without
    /// `--sample`.
    pub(crate) fn sample_hz(&self) -> Option<u32> {
        self.sample.map(|hz| hz.unwrap_or(crate::sample::DEFAULT_HZ))
    }
}

/// `--capture-range`: `cudaProfilerApi` or `itt` (Nsight Systems' spelling; any case).
fn parse_capture_range(value: &str) -> Result<mlprof_format::ring::CaptureSource, String> {
    use mlprof_format::ring::CaptureSource;
    match value.to_ascii_lowercase().as_str() {
        "cudaprofilerapi" => Ok(CaptureSource::CudaProfilerApi),
        "itt" => Ok(CaptureSource::Itt),
        _ => Err(format!("'{value}': expected cudaProfilerApi or itt")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_without_a_value_is_the_default_rate() {
        let args = |argv: &[&str]| Args::try_parse_from(argv).unwrap().sample_hz();
        assert_eq!(args(&["mlprof-collect", "--sample", "--", "true"]), Some(crate::sample::DEFAULT_HZ));
        assert_eq!(args(&["mlprof-collect", "--sample=499", "--", "true"]), Some(499));
        assert_eq!(args(&["mlprof-collect", "--", "true"]), None);
    }
}
