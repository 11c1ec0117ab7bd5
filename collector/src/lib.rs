//! `mlprof-collect`: creates the shared-memory ring, runs or serves the profiled processes,
//! drains the ring into `run.bin`, and prints a one-paragraph summary.
//!
//! The program is a library whose one public item is [`main`]: `src/bin/mlprof-collect.rs`
//! calls it, and so does the `mlprof-collect` of the Python wheel (crate `wheel/`), which then
//! reuses this crate as compiled by `cargo build --release` instead of compiling it again.

mod capture;
mod cli;
mod drain;
mod energy;
mod launch;
mod node;
mod sample;
mod segment;
mod shared_map;
#[cfg(test)]
mod testing;
mod timebase;
mod torch_hook;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use mlprof_filewrite::BackgroundFile;
use mlprof_format::ring::{RING_ABI_VERSION, RingGeometry, is_valid_session_name, session_shm_name};
use mlprof_format::runfile::{RunInfo, RunWriter};

use crate::cli::Args;
use crate::drain::{Drainer, Totals};
use crate::segment::Segment;
use crate::timebase::Timebase;

/// The whole `mlprof-collect` program: parses the command line, runs, reports.
pub fn main() -> ExitCode {
    let mut args = Args::parse();
    let env = |name: &str| std::env::var(name).ok();
    let pattern = args.out.clone();
    args.out = node::expand_out(&pattern, &args.command, &hostname(), &env);
    if let Some((out, why)) = node::per_task_out(&pattern, &args.out, &env) {
        if !args.quiet {
            eprintln!("mlprof-collect: {why}");
        }
        args.out = out;
    }
    if !args.no_energy
        && let Some(why) = node::energy_left_to_another(&env)
    {
        if !args.quiet {
            eprintln!("mlprof-collect: energy: not sampled here ({why})");
        }
        args.no_energy = true;
    }
    match run(args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("mlprof-collect: error: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<ExitCode, String> {
    let mut collector = match Collector::prepare(args)? {
        ControlFlow::Continue(collector) => collector,
        ControlFlow::Break(done) => return Ok(done),
    };
    let exit_code = collector.serve()?;
    collector.finish(exit_code)
}

/// One run of the collector: prepared (the checks, the segment, the run file, the energy
/// sampler), served (the launched command and what it leaves, or the session until a signal),
/// finished (the last drain, the end of the run file, the summary).
struct Collector {
    args: Args,
    session: String,
    /// The library to launch the command with; `None` in attach mode.
    preload: Option<PathBuf>,
    /// `--torch` or `--torch-shapes`.
    torch: bool,
    shm_path: PathBuf,
    drainer: Drainer,
    sampler: Option<energy::Sampler>,
    /// CPU samples (`--sample`), once the launched child is attached.
    cpu: Option<sample::Recording>,
    /// Capture ranges: the plan and the `--delay`/`--duration` timer.
    capture: capture::Capture,
    started: Instant,
}

impl Collector {
    /// Checks the options, creates the segment and the run file and starts the energy sampler.
    /// `Break` when there is nothing to serve: `--print-preload`, or a command run unprofiled
    /// because its shared memory cannot hold a ring (its exit code).
    fn prepare(args: Args) -> Result<ControlFlow<ExitCode, Collector>, String> {
        if args.print_preload {
            println!("{}", launch::find_preload(args.preload.as_deref())?.display());
            return Ok(ControlFlow::Break(ExitCode::SUCCESS));
        }
        let geometry = RingGeometry { lane_count: args.lanes, lane_capacity: args.lane_records };
        if !geometry.is_valid() {
            return Err("--lanes must be 1..=65536 and --lane-records a power of two in 64..=16777216".into());
        }
        let launching = !args.command.is_empty();
        let torch = args.torch || args.torch_shapes;
        if torch && !launching {
            return Err(
                "--torch needs a command to launch (in attach mode, start the Python programs yourself \
                 with the hook directory of a launcher run on PYTHONPATH, or use the launcher)"
                    .into(),
            );
        }
        let capture = capture::Capture::from_args(&args, torch, launching)?;
        let session = session_name(&args)?;
        let shm_dir = segment::shm_dir();
        let shm_name = shm_name(launching, &session, &shm_dir, args.quiet)?;
        let preload = if launching { Some(launch::find_preload(args.preload.as_deref())?) } else { None };

        let timebase = Timebase::new(use_tsc(&args));
        // The job must run even when its shared memory cannot hold a ring (a container's small
        // /dev/shm): the launcher then runs it unprofiled and says why.
        let free = segment::free_bytes(&shm_dir).map_err(|e| {
            format!("cannot inspect {} ({e}); set MLPROF_SHM_DIR to a writable tmpfs", shm_dir.display())
        })?;
        let plan = match segment::plan(geometry, free, &shm_dir) {
            Ok(plan) => plan,
            Err(why) if launching => {
                return launch::run_unprofiled(&args.command, &why).map(ControlFlow::Break);
            }
            Err(why) => return Err(why),
        };
        if let Some(note) = &plan.note
            && !args.quiet
        {
            eprintln!("mlprof-collect: warning: {note}");
        }
        let check_period = timebase.ticks_for_ns(100_000_000);
        let segment = match Segment::create(
            &shm_dir,
            &shm_name,
            &plan,
            timebase.source(),
            check_period,
            capture.plan,
        ) {
            Ok(segment) => segment,
            Err(e) => {
                // Safety: geteuid cannot fail.
                let uid = unsafe { libc::geteuid() };
                let attached = (!launching).then_some(session.as_str());
                let why = segment::create_error(&shm_dir.join(&shm_name), &e, uid, attached);
                if launching {
                    return launch::run_unprofiled(&args.command, &why).map(ControlFlow::Break);
                }
                return Err(why);
            }
        };
        let info = run_info(&args, &session, &timebase, plan.geometry);
        let writer = create_run_file(&args.out, &info)
            .and_then(|mut w| capture.write_start(&mut w, info.start_mono_ns).map(|()| w))
            .map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
        let drainer = Drainer::new(segment, timebase, writer, args.quiet);
        let sampler = (!args.no_energy).then(|| energy::Sampler::start(energy_config(&args)));
        launch::install_signal_handlers();
        let started = Instant::now();
        let shm_path = shm_dir.join(&shm_name);
        Ok(ControlFlow::Continue(Collector {
            args,
            session,
            preload,
            torch,
            shm_path,
            drainer,
            sampler,
            cpu: None,
            capture,
            started,
        }))
    }

    /// Drains until the launched command ended and what it left behind is gone (or lingered
    /// long enough), or, attached, until a signal asks to stop. Returns the exit code to exit
    /// with: the command's, 128 + its signal, 0 when attached.
    fn serve(&mut self) -> Result<u8, String> {
        match self.preload.clone() {
            Some(preload) => self.serve_launched(&preload),
            None => self.serve_session(),
        }
    }

    /// Launcher mode: runs the command, drains while it runs and, for up to `--linger-ms`,
    /// while threads it left behind still record.
    fn serve_launched(&mut self, preload: &Path) -> Result<u8, String> {
        let Collector { args, session, torch, shm_path, drainer, sampler, cpu, capture, .. } = self;
        let torch_hook = if *torch { Some(torch_hook::TorchHook::create()?) } else { None };
        let mut extra_env: Vec<(&str, std::ffi::OsString)> =
            torch_hook.iter().map(|hook| ("PYTHONPATH", hook.python_path())).collect();
        if args.torch_shapes {
            extra_env.push(("MLPROF_TORCH_SHAPES", "1".into()));
        }
        if let Some((first, last)) = args.steps {
            extra_env.push(("MLPROF_STEPS", format!("{first}-{last}").into()));
        }
        if args.all_syscalls {
            extra_env.push(("MLPROF_ALL_SYSCALLS", "1".into()));
        }
        if let Some(frames) = args.sites {
            extra_env.push(("MLPROF_SITES", frames.to_string().into()));
        }
        if args.no_gpu_timeline {
            extra_env.push(("MLPROF_CUPTI", "off".into()));
        } else if args.gpu_timeline
            && std::env::var_os("MLPROF_CUPTI").is_none_or(|v| v == "off" || v.is_empty())
        {
            extra_env.push(("MLPROF_CUPTI", "on".into()));
        }
        let mut watch = launch::ChildWatch::new();
        let mut child = match args.sample_hz() {
            None => launch::spawn(&args.command, preload, shm_path, session, &extra_env)?,
            Some(hz) => {
                let cmd = launch::profiled_command(&args.command, preload, shm_path, session, &extra_env);
                let (child, cpu_samples) = sample::start::launched(cmd, hz, drainer.writer_mut())?;
                *cpu = cpu_samples;
                child.map_err(|e| format!("cannot run {}: {e}", args.command[0]))?
            }
        };
        let child_pid = child.id();
        capture.arm();
        drainer.watch_launched(child_pid);
        let mut since = Instant::now();
        let status = loop {
            let exited = if watch.should_ask() { child.try_wait().map_err(|e| e.to_string())? } else { None };
            if exited.is_some() {
                // Backing spare lanes now would only be undone at exit (~3 ms of CPU each).
                drainer.stop_offering_lanes();
                drainer.launched_reaped();
            }
            let wake = drain(drainer, sampler, cpu, capture)?;
            if let Some(status) = exited {
                break status;
            }
            launch::forward_termination(child_pid);
            pause(drainer, wake, &mut since, capture);
        };
        // Children the command left behind (or that are still exiting) get a grace period.
        let deadline = Instant::now() + Duration::from_millis(args.linger_ms);
        while Instant::now() < deadline && drainer.has_live_lanes() {
            let wake = drain(drainer, sampler, cpu, capture)?;
            pause(drainer, wake, &mut since, capture);
        }
        drop(torch_hook);
        let (code, signal) = launch::describe(status);
        drainer.record_exit(child_pid, code, signal).map_err(|e| e.to_string())?;
        Ok(code.map(|c| c as u8).unwrap_or_else(|| 128u8.wrapping_add(signal.unwrap_or(0) as u8)))
    }

    /// Attach mode: serves the session until SIGINT or SIGTERM; with `--sample`, samples each
    /// process that joins it.
    fn serve_session(&mut self) -> Result<u8, String> {
        let Collector { args, session, drainer, sampler, cpu, capture, .. } = self;
        if let Some(hz) = args.sample_hz() {
            *cpu = sample::start::served(hz);
            drainer.note_joined();
        }
        if !args.quiet {
            eprintln!(
                "mlprof-collect: session '{session}' ready; run programs with LD_PRELOAD={}{}; Ctrl-C to finish",
                launch::find_preload(args.preload.as_deref())
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "libmlprof.so".into()),
                if session == "default" { String::new() } else { format!(" MLPROF_SESSION={session}") }
            );
        } else {
            eprintln!("mlprof-collect: session '{session}' ready");
        }
        let mut since = Instant::now();
        capture.arm();
        while !launch::termination_requested() {
            let wake = drain(drainer, sampler, cpu, capture)?;
            pause(drainer, wake, &mut since, capture);
        }
        Ok(0)
    }

    /// Stops the energy sampler, closes the segment, drains the rest, ends the run file and
    /// prints the summary; returns `exit_code` to exit with.
    fn finish(self, exit_code: u8) -> Result<ExitCode, String> {
        let Collector { args, mut drainer, mut sampler, cpu, started, .. } = self;
        let energy_cost = match sampler.take() {
            Some(sampler) => sampler.stop(drainer.writer_mut()).map_err(|e| e.to_string())?,
            None => None,
        };
        let cpu_samples = match cpu {
            Some(cpu) => Some(cpu.stop(drainer.writer_mut()).map_err(|e| e.to_string())?),
            None => None,
        };
        drainer.segment_mut().close();
        let totals = drainer.finish().map_err(|e| format!("cannot finish {}: {e}", args.out.display()))?;
        if !args.quiet {
            report(&args, &totals, started.elapsed());
            if let Some(cost) = energy_cost.filter(|c| c.devices > 0) {
                report_energy(&args, &cost);
            }
            if let (Some(stats), Some(hz)) = (cpu_samples, args.sample_hz()) {
                eprintln!("{}", sample::start::summary(&stats, hz, &args.out));
            }
        }
        Ok(ExitCode::from(exit_code))
    }
}

/// The session to serve: `--session`, else `$MLPROF_SESSION`, else `default`.
fn session_name(args: &Args) -> Result<String, String> {
    let session = args
        .session
        .clone()
        .or_else(|| std::env::var("MLPROF_SESSION").ok())
        .unwrap_or_else(|| "default".into());
    if !is_valid_session_name(&session) {
        return Err(format!("invalid session name {session:?} (letters, digits, '-', '_', '.'; at most 64)"));
    }
    Ok(session)
}

/// Whether producers stamp records with the TSC (`--clock`; `auto`: where it is usable).
fn use_tsc(args: &Args) -> bool {
    match args.clock.as_str() {
        "tsc" => true,
        "monotonic" => false,
        _ => timebase::tsc_usable(),
    }
}

/// The segment's name: the per-user session's in attach mode (refused when a live collector
/// serves it or another user's file has its name), a name of this launcher's own otherwise.
/// Sweeps the segments killed collectors of this user left first, and says what it removed.
fn shm_name(launching: bool, session: &str, shm_dir: &Path, quiet: bool) -> Result<String, String> {
    // Safety: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    for removed in segment::sweep_leftover_segments(shm_dir, uid) {
        if !quiet {
            eprintln!("mlprof-collect: {removed}");
        }
    }
    if launching {
        return Ok(format!(
            "mlprof-{uid}-run-{}-{:x}",
            std::process::id(),
            timebase::realtime_ns() & 0xffff_ffff
        ));
    }
    let name = session_shm_name(uid, session);
    let path = shm_dir.join(&name);
    if let Some(owner) = segment::foreign_owner(&path, uid) {
        return Err(segment::taken_message(&path, owner, Some(session)));
    }
    if let Some(pid) = segment::check_existing(shm_dir, &name, uid).map_err(|e| e.to_string())? {
        return Err(format!(
            "session '{session}' is already served by mlprof-collect pid {pid}; choose another with --session"
        ));
    }
    Ok(name)
}

/// The run file's first frame: what was run, where, when, and on what ring.
fn run_info(args: &Args, session: &str, timebase: &Timebase, geometry: RingGeometry) -> RunInfo {
    let start_mono_ns = timebase::monotonic_ns();
    let start_realtime_ns = timebase::realtime_ns();
    RunInfo {
        mlprof_version: env!("CARGO_PKG_VERSION").into(),
        host: hostname(),
        session: session.into(),
        command: args.command.clone(),
        start_mono_ns,
        start_realtime_ns,
        clock_source: timebase.source_name().into(),
        ring_abi_version: RING_ABI_VERSION,
        lane_count: geometry.lane_count,
        lane_capacity: geometry.lane_capacity,
    }
}

/// The energy sampler's line of the summary: what it sampled and what that cost.
fn report_energy(args: &Args, cost: &energy::SamplerCost) {
    let counters = match cost.counter_spacing {
        Some((gap, read)) => format!(
            " (GPU energy counters every {} ms: one read costs {:.2} ms CPU here)",
            gap / 1_000_000,
            read / 1e6
        ),
        None => String::new(),
    };
    eprintln!(
        "mlprof-collect: energy: sampled {} device(s) every {} ms{counters}; the sampler used {:.1} ms CPU ({:.3}% of a core; {:.3}% after its {:.1} ms start-up). Next: mlprof energy {}",
        cost.devices,
        args.energy_interval,
        cost.cpu_ns as f64 / 1e6,
        cost.core_percent(),
        cost.running_core_percent(),
        cost.setup_cpu_ns as f64 / 1e6,
        args.out.display()
    );
}

/// One drain pass, then the energy samples that arrived meanwhile. Returns the producers' wake
/// count as it was before the pass (see `pause`); the pass's rate is the drainer's own.
fn drain(
    drainer: &mut Drainer,
    sampler: &mut Option<energy::Sampler>,
    cpu: &mut Option<sample::Recording>,
    capture: &mut capture::Capture,
) -> Result<u32, String> {
    let header = drainer.segment().view().header() as *const mlprof_format::ring::RingHeader;
    // Safety: the header lies in the segment's mapping, which outlives this call.
    capture.tick(unsafe { &*header }, drainer.writer_mut()).map_err(|e| e.to_string())?;
    let wake = drainer.segment().wake_count();
    drainer.drain_once().map_err(|e| e.to_string())?;
    if let Some(sampler) = sampler {
        sampler.write_pending(drainer.writer_mut()).map_err(|e| e.to_string())?;
    }
    if let Some(cpu) = cpu {
        for pid in drainer.take_joined() {
            cpu.follow(pid);
        }
        cpu.write_pending(drainer.writer_mut()).map_err(|e| e.to_string())?;
    }
    Ok(wake)
}

fn energy_config(args: &Args) -> energy::EnergyConfig {
    let nvml_lib = args
        .nvml_lib
        .clone()
        .or_else(|| std::env::var_os("MLPROF_NVML_LIB").filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(energy::DEFAULT_NVML_LIB));
    let powercap_dir = std::env::var_os("MLPROF_POWERCAP_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(energy::DEFAULT_POWERCAP_DIR));
    energy::EnergyConfig {
        interval: Duration::from_millis(args.energy_interval),
        nvml_lib,
        powercap_dir,
        cuda_visible: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
        quiet: args.quiet,
    }
}

/// Waits for the next pass. The collector sleeps most of the time: as long as the fullest lane
/// can go before it is an eighth full at the rate of the last pass, 100 ms at most (aggregate
/// snapshots and liveness checks need no more), so an idle run costs ten passes a second; a
/// producer whose lane is a quarter full wakes it at once (`LaneWriter::push`), and so does a thread
/// that found no free lane (`recorder::session::wake_collector`).
///
/// `since` is when the previous pause began: the records of this pass were written over the
/// previous sleep and pass, so that is the time to divide them by. (Measuring from the end of
/// the previous sleep, as before, divided them by this pass's few microseconds: the rate came
/// out hundreds of times too high and a collector at a thousand calls a second slept 20 ms,
/// not 100.)
fn pause(drainer: &Drainer, wake: u32, since: &mut Instant, capture: &capture::Capture) {
    let now = Instant::now();
    let mut sleep = drainer.next_sleep(now.duration_since(*since));
    sleep = capture.until_next().map_or(sleep, |next| sleep.min(next));
    *since = now;
    drainer.segment().sleep(wake, sleep);
}

fn report(args: &Args, totals: &Totals, elapsed: Duration) {
    let size = std::fs::metadata(&args.out).map(|m| m.len()).unwrap_or(0);
    let drops = if totals.dropped == 0 {
        "no records were dropped".to_string()
    } else {
        format!("{} RECORDS WERE DROPPED (ring full or no free lane; see `mlprof summary`)", totals.dropped)
    };
    eprintln!(
        "mlprof-collect: recorded {} calls and {} aggregated clock reads from {} process image(s) and {} thread(s) in {:.2} s; {}; wrote {} ({:.1} MB). Next: mlprof summary {} / mlprof convert {} (a .pftrace beside it for https://ui.perfetto.dev)",
        totals.events,
        totals.aggregated_calls,
        totals.processes,
        totals.threads,
        elapsed.as_secs_f64(),
        drops,
        args.out.display(),
        size as f64 / 1e6,
        args.out.display(),
        args.out.display()
    );
    if totals.refused_records > 0 || totals.corrupt_lanes > 0 {
        eprintln!(
            "mlprof-collect: refused {} records from other users' processes; {} lanes had inconsistent positions",
            totals.refused_records, totals.corrupt_lanes
        );
    }
    if totals.sites_undefined > 0 {
        eprintln!(
            "mlprof-collect: {} records named a call site their process never defined (written without one)",
            totals.sites_undefined
        );
    }
}

/// The run file (private to the user: it names files and command lines), written by a thread
/// of its own (`mlprof_filewrite::BackgroundFile`). It is locked (`flock`) while this collector writes it, so that a
/// second collector given the same `--out` refuses rather than mixing its records into it.
fn create_run_file(path: &std::path::Path, info: &RunInfo) -> std::io::Result<RunWriter<BackgroundFile>> {
    let file = open_exclusive(path)?;
    RunWriter::new(BackgroundFile::new(file)?, info)
}

/// Opens `path` for writing, locked, then empties it: an error, not a truncation of its
/// records, when another collector holds it. A file system without `flock` (some network
/// ones) is written without the lock; what is not a regular file (`/dev/null`, a pipe) is
/// neither locked nor truncated.
fn open_exclusive(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().write(true).create(true).truncate(false).mode(0o600).open(path)?;
    if !file.metadata()?.is_file() {
        return Ok(file);
    }
    // Safety: flock on the descriptor of `file`, which lives across the call; no memory is
    // passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Err(std::io::Error::other(
                "another mlprof-collect is writing it (two collectors given the same --out, e.g. two srun \
                 tasks of one node with a pattern that names the node only); give each its own file",
            ));
        }
    }
    file.set_len(0)?;
    Ok(file)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_collector_on_the_same_file_refuses() {
        let path = std::env::temp_dir().join(format!("mlprof-lock-{}.bin", std::process::id()));
        std::fs::write(&path, b"old records").unwrap();
        let first = open_exclusive(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "emptied once locked");
        std::fs::write(&path, b"records").unwrap();
        let second = open_exclusive(&path).map(|_| ()).unwrap_err().to_string();
        assert!(second.contains("another mlprof-collect"), "{second}");
        assert_eq!(std::fs::read(&path).unwrap(), b"records", "the first one's file is left alone");
        drop(first);
        assert!(open_exclusive(&path).is_ok(), "free again once the first closed it");
        std::fs::remove_file(&path).unwrap();
        let (_a, _b) =
            (open_exclusive("/dev/null".as_ref()).unwrap(), open_exclusive("/dev/null".as_ref()).unwrap());
    }
}
