//! Writes a synthetic but realistic `run.bin` of N events, with `RunWriter` only (no
//! collector, no preload): for benchmarking `mlprof convert` and `mlprof summary` on long runs
//! (bench/convert_bench.py).
//!
//! ```text
//! cargo run --release -p mlprof-format --example synth_run -- OUT N [--threads T] [--procs P]
//!                                       [--paths K] [--open-every E] [--seed S]
//! ```
//!
//! The run looks like a PyTorch job with DataLoader workers: process 0 (the trainer) and P-1
//! forked workers, T threads each. Worker threads (and the trainer's extra threads) read
//! dataset files: `open64` (a path from a pool of K dataset files, cycled like epochs), the
//! `ioctl(TCGETS)` Python's `open()` makes (fails with ENOTTY), `lseek64`, 1-5 `read`s (the
//! last one returns 0), `close`; now and then an `mmap64`/`munmap` pair. The trainer's main
//! thread writes checkpoints: `open64(O_WRONLY|O_CREAT|O_TRUNC)`, 8-64 64 KiB `write`s,
//! `fsync`, `close`, and appends lines to a log through `fopen64`/`fwrite`/`fclose`. That is
//! an open (and a close) every ~7 events, a pathological rate for the fd tables of the
//! reports; `--open-every E` reads and writes files in more calls (E-4 reads per dataset file
//! on average, E-3 writes per checkpoint, E-2 lines per log open) for about one open per E
//! events. Every thread reads the clock (aggregated `clock_gettime` counters, one sample per
//! thread per batch).
//!
//! Threads run on one clock: each call starts a little after its thread's previous one ended,
//! and the thread whose next call starts first makes it, so the records of all threads are in
//! time order as a collector would drain them. fds are allocated per process (lowest free
//! number, as the kernel does), paths are defined as string frames the first time they are
//! used, events go out in batches of 64 Ki sorted by end time (as the collector writes them).
//! Deterministic for a given seed.

use std::path::PathBuf;
use std::process::ExitCode;

use mlprof_format::func::Func;
use mlprof_format::record::{Event, FLAG_ERROR};
use mlprof_format::ring::RING_ABI_VERSION;
use mlprof_format::runfile::{
    AggregateSample, ProcessExit, ProcessInfo, RunEnd, RunInfo, RunWriter, ThreadInfo,
};
use mlprof_format::string_id;

const BATCH: usize = 65536;
const O_RDONLY_CLOEXEC: u32 = 0o2000000;
const O_WRONLY_CREAT_TRUNC: u32 = 0o1 | 0o100 | 0o1000 | 0o2000000;
const ENOTTY: i32 = 25;
const TCGETS: u64 = 0x5401;
const CLOCK_MONOTONIC: i32 = 1;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// What a thread is doing: a list of calls it still has to make on its current file.
#[derive(Clone, Copy, PartialEq)]
enum Step {
    Idle,
    Ioctl,
    Seek,
    Read { left: u32 },
    Write { left: u32 },
    Fsync,
    Close,
    Munmap { len: u64 },
}

struct Thread {
    proc_index: usize,
    pid: u32,
    tid: u32,
    writer: bool,
    step: Step,
    fd: i32,
    file_bytes: u64,
    last_end: u64,
    /// When the thread's next call starts.
    next_start: u64,
    stream: u64,
    clock_calls: u64,
    clock_ns: u64,
    events: u64,
}

struct Process {
    pid: u32,
    /// Per fd number: `None` while open, `Some(t)`: closed since time t.
    fds: Vec<Option<u64>>,
}

impl Process {
    /// The lowest fd that was closed before `at` (threads run on their own clocks, so a
    /// number freed later in generation order may still be open at `at`).
    fn alloc_fd(&mut self, at: u64) -> i32 {
        // 0-4: stdio and the interpreter's own files.
        let first = 5;
        if self.fds.len() < first {
            self.fds.resize(first, None);
        }
        for fd in first..self.fds.len() {
            if matches!(self.fds[fd], Some(t) if t < at) {
                self.fds[fd] = None;
                return fd as i32;
            }
        }
        self.fds.push(None);
        (self.fds.len() - 1) as i32
    }
    fn free_fd(&mut self, fd: i32, at: u64) {
        if let Some(slot) = self.fds.get_mut(fd as usize) {
            *slot = Some(at);
        }
    }
}

struct Args {
    out: PathBuf,
    n: u64,
    threads: u32,
    procs: u32,
    paths: u64,
    /// Events per open (0: the default shapes, one open every ~7 events).
    open_every: u64,
    seed: u64,
}

fn usage() -> String {
    "usage: synth_run OUT N [--threads T (4)] [--procs P (3)] [--paths K (20000)] [--open-every E] \
     [--seed S (1)]"
        .into()
}

fn parse_args() -> Result<Args, String> {
    let mut positional = Vec::new();
    let mut args =
        Args { out: PathBuf::new(), n: 0, threads: 4, procs: 3, paths: 20000, open_every: 0, seed: 1 };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = it.next().ok_or_else(|| format!("{name} needs a value\n{}", usage()))?;
            parse_count(&v).ok_or_else(|| format!("bad value for {name}: {v}\n{}", usage()))
        };
        match arg.as_str() {
            "--threads" => args.threads = value("--threads")?.clamp(1, 1024) as u32,
            "--procs" => args.procs = value("--procs")?.clamp(1, 1024) as u32,
            "--paths" => args.paths = value("--paths")?.max(1),
            "--open-every" => args.open_every = value("--open-every")?.max(5),
            "--seed" => args.seed = value("--seed")?,
            "-h" | "--help" => return Err(usage()),
            _ if arg.starts_with("--") => return Err(format!("unknown option {arg}\n{}", usage())),
            _ => positional.push(arg),
        }
    }
    if positional.len() != 2 {
        return Err(usage());
    }
    args.out = PathBuf::from(&positional[0]);
    args.n = parse_count(&positional[1]).ok_or_else(|| format!("bad N: {}\n{}", positional[1], usage()))?;
    Ok(args)
}

/// `1000000`, `1e6`, `10M`, `1_000_000`.
fn parse_count(s: &str) -> Option<u64> {
    let s = s.replace('_', "");
    if let Some(m) = s.strip_suffix(['M', 'm']) {
        return m.parse::<f64>().ok().map(|x| (x * 1e6) as u64);
    }
    if let Some(k) = s.strip_suffix(['K', 'k']) {
        return k.parse::<f64>().ok().map(|x| (x * 1e3) as u64);
    }
    s.parse::<u64>().ok().or_else(|| s.parse::<f64>().ok().filter(|x| *x >= 0.0).map(|x| x as u64))
}

fn dataset_path(i: u64) -> String {
    format!("/data/imagenet-mini/train/n{:08}/ILSVRC2012_val_{:08}.JPEG", 1_440_000 + i % 1000, i)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("synth_run: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let mut rng = Rng(args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let start_ns: u64 = 1_000_000_000_000;
    let command: Vec<String> =
        ["python", "train.py", "--epochs", "90", "--data", "/data/imagenet-mini"].map(String::from).into();
    let info = RunInfo {
        mlprof_version: format!("{} (synth_run)", env!("CARGO_PKG_VERSION")),
        host: "synth".into(),
        session: "default".into(),
        command: command.clone(),
        start_mono_ns: start_ns,
        start_realtime_ns: 1_700_000_000_000_000_000,
        clock_source: "synthetic".into(),
        ring_abi_version: RING_ABI_VERSION,
        lane_count: 256,
        lane_capacity: 65536,
    };
    let io_err = |e: std::io::Error| format!("{}: {e}", args.out.display());
    let mut w = RunWriter::create(&args.out, &info).map_err(io_err)?;

    // Processes: the trainer, then forked DataLoader workers.
    let argv_id = string_id(command.join("\0").as_bytes());
    w.write_string(argv_id, command.join("\0").as_bytes()).map_err(io_err)?;
    let mut procs = Vec::new();
    let mut threads = Vec::new();
    let main_pid = 4000u32;
    for p in 0..args.procs {
        let pid = main_pid + p * 100;
        let forked = p > 0;
        w.write_process(&ProcessInfo {
            pid,
            ppid: if forked { main_pid } else { 1 },
            argv: command.clone(),
            start_ns: start_ns + 1_000_000 + p as u64 * 50_000_000,
            forked,
        })
        .map_err(io_err)?;
        procs.push(Process { pid, fds: Vec::new() });
        for t in 0..args.threads {
            let tid = pid + t;
            let name = match (p, t) {
                (0, 0) => "python".to_string(),
                (0, _) => format!("pt_thread_{t}"),
                (_, 0) => "pt_data_worker".to_string(),
                (_, _) => format!("pt_worker_{t}"),
            };
            w.write_thread(&ThreadInfo { pid, tid, name }).map_err(io_err)?;
            threads.push(Thread {
                proc_index: p as usize,
                pid,
                tid,
                writer: p == 0 && t == 0,
                step: Step::Idle,
                fd: -1,
                file_bytes: 0,
                last_end: start_ns + 2_000_000 + p as u64 * 50_000_000,
                next_start: start_ns + 100_000_000 + p as u64 * 50_000_000 + rng.range(0, 10_000),
                stream: threads.len() as u64 + 1,
                clock_calls: 0,
                clock_ns: 0,
                events: 0,
            });
        }
    }
    let ckpt = b"/scratch/ckpt/model_latest.pt".to_vec();
    let log = b"/scratch/logs/train.log".to_vec();
    let (ckpt_id, log_id) = (string_id(&ckpt), string_id(&log));
    w.write_string(ckpt_id, &ckpt).map_err(io_err)?;
    w.write_string(log_id, &log).map_err(io_err)?;

    let mut defined = vec![false; args.paths as usize];
    let mut next_path = 0u64;
    let mut batch: Vec<Event> = Vec::with_capacity(BATCH);
    let mut now = start_ns + 100_000_000;
    // Calls per file: (first, last) of a uniform count (averaging E-4 reads, E-3 writes, E-2 lines).
    let per_file = |default: (u64, u64), fixed_calls: u64| match args.open_every {
        0 => default,
        e => (1, (2 * (e - fixed_calls) - 1).max(1)),
    };
    let (reads, writes, lines) = (per_file((1, 5), 4), per_file((8, 64), 3), per_file((1, 1), 2));
    let (mut opens, mut closes) = (0u64, 0u64);
    let mut written = 0u64;
    let mut strings = 3u64;
    while written < args.n {
        let want = (args.n - written).min(BATCH as u64) as usize;
        batch.clear();
        while batch.len() < want {
            // The thread whose next call starts first (a few dozen threads: a scan is enough).
            let ti = (0..threads.len()).min_by_key(|&i| threads[i].next_start).unwrap_or(0);
            let th = &mut threads[ti];
            let process = &mut procs[th.proc_index];
            let start = th.next_start;
            now = start;
            let mut e = Event { pid: th.pid, tid: th.tid, fd: th.fd, start, ..Default::default() };
            match th.step {
                Step::Idle => {
                    if rng.below(40) == 0 {
                        // A tensor storage mapped and unmapped.
                        let len = 4096 * rng.range(16, 4096);
                        e.kind = Func::Mmap64 as u16;
                        e.fd = -1;
                        e.arg = len;
                        e.arg2 = 3; // PROT_READ|PROT_WRITE
                        e.extra = 0x22; // MAP_PRIVATE|MAP_ANONYMOUS
                        e.ret = 0x7f00_0000_0000 + (rng.below(1 << 28) << 12) as i64;
                        e.dur = rng.range(1_000, 20_000);
                        th.step = Step::Munmap { len };
                    } else if th.writer && rng.below(8) == 0 {
                        // A log line through stdio.
                        let fd = process.alloc_fd(start);
                        e.kind = Func::Fopen64 as u16;
                        e.fd = fd;
                        e.arg = 0o644;
                        e.arg2 = log_id;
                        e.extra = 0o1 | 0o100 | 0o2000; // O_WRONLY|O_CREAT|O_APPEND
                        e.ret = 0x5555_0000 + fd as i64;
                        e.dur = rng.range(3_000, 15_000);
                        th.fd = fd;
                        th.step = Step::Write { left: rng.range(lines.0, lines.1) as u32 };
                        th.file_bytes = u64::MAX; // marks the stdio log
                    } else if th.writer {
                        let fd = process.alloc_fd(start);
                        e.kind = Func::Open64 as u16;
                        e.fd = fd;
                        e.ret = fd as i64;
                        e.arg = 0o644;
                        e.arg2 = ckpt_id;
                        e.extra = O_WRONLY_CREAT_TRUNC;
                        e.dur = rng.range(5_000, 40_000);
                        th.fd = fd;
                        th.step = Step::Write { left: rng.range(writes.0, writes.1) as u32 };
                        th.file_bytes = 0;
                    } else {
                        let path = next_path % args.paths;
                        next_path += 1 + rng.below(3);
                        if !defined[path as usize] {
                            defined[path as usize] = true;
                            let p = dataset_path(path);
                            w.write_string(string_id(p.as_bytes()), p.as_bytes()).map_err(io_err)?;
                            strings += 1;
                        }
                        let fd = process.alloc_fd(start);
                        e.kind = Func::Open64 as u16;
                        e.fd = fd;
                        e.ret = fd as i64;
                        e.arg = 0;
                        e.arg2 = string_id(dataset_path(path).as_bytes());
                        e.extra = O_RDONLY_CLOEXEC;
                        e.dur = rng.range(2_000, 30_000);
                        th.fd = fd;
                        th.file_bytes = rng.range(20_000, 180_000);
                        th.step = Step::Ioctl;
                    }
                }
                Step::Ioctl => {
                    e.kind = Func::Ioctl as u16;
                    e.arg = TCGETS;
                    e.ret = -1;
                    e.errno = ENOTTY;
                    e.flags = FLAG_ERROR;
                    e.dur = rng.range(300, 1_500);
                    th.step = Step::Seek;
                }
                Step::Seek => {
                    e.kind = Func::Lseek64 as u16;
                    e.arg = 0;
                    e.extra = 1; // SEEK_CUR
                    e.ret = 0;
                    e.dur = rng.range(200, 1_000);
                    let left = rng.range(reads.0, reads.1);
                    if args.open_every > 0 {
                        // A file big enough for its reads: 64 KiB each, the last one returns 0.
                        th.file_bytes = (left.saturating_sub(1) * 65536).saturating_sub(rng.below(32768));
                    }
                    th.step = Step::Read { left: left as u32 };
                }
                Step::Read { left } => {
                    // Python reads the size it stat'ed plus one, then reads to EOF.
                    e.kind = Func::Read as u16;
                    let chunk = if left <= 1 { 0 } else { th.file_bytes.min(65536) };
                    th.file_bytes -= chunk;
                    e.arg = if left <= 1 { 8192 } else { chunk.max(1) };
                    e.arg2 = chunk;
                    e.ret = chunk as i64;
                    e.dur = rng.range(1_000, 5_000) + chunk / 4;
                    th.step = if left <= 1 { Step::Close } else { Step::Read { left: left - 1 } };
                }
                Step::Write { left } => {
                    let stdio = th.file_bytes == u64::MAX;
                    if stdio {
                        let len = rng.range(40, 200);
                        e.kind = Func::Fwrite as u16;
                        e.arg = len;
                        e.arg2 = len;
                        e.ret = 1;
                        e.dur = rng.range(200, 2_000);
                    } else {
                        e.kind = Func::Write as u16;
                        e.arg = 65536;
                        e.arg2 = 65536;
                        e.ret = 65536;
                        e.dur = rng.range(15_000, 80_000);
                        th.file_bytes += 65536;
                    }
                    th.step = if left > 1 {
                        Step::Write { left: left - 1 }
                    } else if stdio {
                        Step::Close
                    } else {
                        Step::Fsync
                    };
                }
                Step::Fsync => {
                    e.kind = Func::Fsync as u16;
                    e.dur = rng.range(200_000, 3_000_000);
                    th.step = Step::Close;
                }
                Step::Close => {
                    e.kind = if th.file_bytes == u64::MAX { Func::Fclose } else { Func::Close } as u16;
                    e.dur = rng.range(500, 4_000);
                    process.free_fd(th.fd, start);
                    th.fd = -1;
                    th.file_bytes = 0;
                    th.step = Step::Idle;
                }
                Step::Munmap { len } => {
                    e.kind = Func::Munmap as u16;
                    e.fd = -1;
                    e.arg = len;
                    e.dur = rng.range(2_000, 30_000);
                    th.step = Step::Idle;
                }
            }
            th.last_end = e.start + e.dur;
            th.next_start = th.last_end + rng.range(200, 3000);
            let kind = Func::from_id(e.kind).map(Func::class);
            opens += (kind == Some(mlprof_format::func::Class::Open)) as u64;
            closes += (kind == Some(mlprof_format::func::Class::Close)) as u64;
            th.events += 1;
            // Python, torch and the DataLoader read the clock a few times per call.
            let reads = rng.range(0, 4);
            th.clock_calls += reads;
            th.clock_ns += reads * 25;
            batch.push(e);
        }
        batch.sort_by_key(|e| e.start.saturating_add(e.dur));
        w.write_events(&batch).map_err(io_err)?;
        written += batch.len() as u64;
        // Clock aggregates: cumulative per thread, as the collector snapshots them.
        let sample_time = batch.last().map_or(now, |e| e.start + e.dur);
        let samples: Vec<AggregateSample> = threads
            .iter()
            .filter(|t| t.clock_calls > 0)
            .map(|t| AggregateSample {
                stream: t.stream,
                pid: t.pid,
                tid: t.tid,
                func: Func::ClockGettime as u16,
                clock_id: Some(CLOCK_MONOTONIC),
                time_ns: sample_time,
                count: t.clock_calls,
                timed: t.clock_calls / 64,
                timed_ns: t.clock_ns / 64,
            })
            .collect();
        if !samples.is_empty() {
            w.write_aggregates(&samples).map_err(io_err)?;
        }
    }
    let end_ns = threads.iter().map(|t| t.last_end).max().unwrap_or(now) + 1_000_000;
    for p in procs.iter().rev() {
        w.write_process_exit(&ProcessExit { pid: p.pid, time_ns: end_ns, exit_code: Some(0), signal: None })
            .map_err(io_err)?;
    }
    let clock: u64 = threads.iter().map(|t| t.clock_calls).sum();
    let bytes = w.bytes_written();
    w.finish(&RunEnd { end_ns, events: written, dropped: 0 }).map_err(io_err)?;
    println!(
        "events={written} clock_calls={clock} processes={} threads={} strings={strings} bytes={bytes} \
         opens={opens} closes={closes}",
        procs.len(),
        threads.len()
    );
    Ok(())
}
