//! The sampler: the events and rings of every online CPU, and the passes that read them in
//! time order into [`Record`]s.

use std::time::Duration;

use super::attr::{self, Start};
use super::parse::{self, Raw};
use super::python::{self, PythonStacks};
use super::refusal::{Refusal, Stage};
use super::ring::{self, RecordBytes, Ring};
use super::unwind::{self, REGS_MASK, Unwinding};
use super::{Mapping, Record, STACK_BYTES, Sample};

/// Data pages of a CPU's ring: 128 (512 KiB) with the header page make the 516 KiB that
/// `kernel.perf_event_mlock_kb` grants each CPU by default without `ulimit -l`: 32 samples of
/// 16 KiB, 64 ms of a busy CPU at 499 Hz. Halved down to [`MIN_RING_PAGES`] when refused.
const RING_PAGES: usize = 128;
const MIN_RING_PAGES: usize = 16;

/// Records this recent stay in their ring for the next pass (unless it is the last): a
/// mapping written on one CPU just before a sample on another may not be visible yet when the
/// second ring is read, and a sample unwound before the mapping it ran in loses its stack.
const SETTLE_NS: u64 = 200_000;

/// What the sampler counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Samples handed out.
    pub(crate) samples: u64,
    /// Samples whose stack was unwound past the leaf.
    pub(crate) unwound: u64,
    /// Records (mostly samples) lost because a ring was full (`PERF_RECORD_LOST`), and samples
    /// the kernel dropped before writing them (`PERF_RECORD_LOST_SAMPLES`).
    pub(crate) lost: u64,
    /// Records too short for their kind (a kernel bug or a corrupt ring): skipped.
    pub(crate) malformed: u64,
    /// Distinct files mapped (loaded, or found unreadable).
    pub(crate) files: u64,
    /// Python frames read into the stacks.
    pub(crate) python: python::Stats,
}

/// The sampling events of one job, their rings and the processes' code maps.
pub(crate) struct Sampler {
    rings: Vec<Ring>,
    /// The CPU of each ring.
    cpus: Vec<u32>,
    hz: u32,
    /// Events of processes followed after the first (attach mode), writing into the rings.
    followers: Vec<std::os::fd::OwnedFd>,
    /// Rings whose event hung up (the target and all it inherited to are gone): left out of
    /// `wait`, which would otherwise return at once forever.
    hung_up: Vec<bool>,
    unwinding: Unwinding,
    python: PythonStacks,
    /// A sample's frames with its Python frames set in place.
    merged: Vec<u64>,
    /// Mappings read from `/proc` at open, handed out by the first pass.
    initial: Vec<Mapping>,
    stats: Stats,
}

/// Samples `pid` and everything it starts, from its next exec ([`Start::OnExec`]): the
/// launcher's child, held before exec by [`super::gate::spawn_attached`], at `hz` per second
/// of each thread's CPU time.
pub(crate) fn open(pid: u32, hz: u32) -> Result<Sampler, Refusal> {
    open_with(pid, hz, Start::OnExec)
}

/// [`open`], choosing when sampling starts. With [`Start::Now`] the process's current code
/// mappings are read from `/proc/PID/maps` (the kernel reports only new ones); its children
/// that already exist are not followed (`inherit` applies to those forked after).
pub(crate) fn open_with(pid: u32, hz: u32, start: Start) -> Result<Sampler, Refusal> {
    let cpus = attr::online_cpus();
    if cpus.is_empty() || !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return Err(Refusal { errno: 0, stage: Stage::Unsupported, paranoid: attr::paranoid() });
    }
    let mut pages = RING_PAGES;
    let mut rings = Vec::with_capacity(cpus.len());
    let mut ring_cpus = Vec::with_capacity(cpus.len());
    for cpu in cpus {
        // Woken at every record while it waits ([`Sampler::wait`]): the Python frames of a sample
        // must be read before its thread moves on.
        let wakeup = 1;
        let event = attr::sampling_attr(hz, STACK_BYTES, REGS_MASK, wakeup, start);
        let fd = match attr::perf_event_open(&event, pid as i32, cpu as i32) {
            Ok(fd) => fd,
            // A CPU that went offline since the list was read.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => continue,
            Err(e) => return Err(Refusal::new(Stage::Open, &e)),
        };
        rings.push(map_ring(fd, &mut pages)?);
        ring_cpus.push(cpu);
    }
    let mut sampler = Sampler {
        hung_up: vec![false; rings.len()],
        rings,
        cpus: ring_cpus,
        hz,
        followers: Vec::new(),
        unwinding: Unwinding::new(),
        python: PythonStacks::default(),
        merged: Vec::new(),
        initial: Vec::new(),
        stats: Stats::default(),
    };
    if start == Start::Now {
        sampler.read_initial_mappings(pid);
    }
    Ok(sampler)
}

/// Samples a running process (attach mode: the first to join the session) and every thread
/// it has and starts from now on; [`Sampler::follow`] adds the others.
pub(crate) fn attach(pid: u32, hz: u32) -> Result<Sampler, Refusal> {
    let mut sampler = open_with(pid, hz, Start::Now)?;
    let others: Vec<u32> = threads_of(pid).into_iter().filter(|&tid| tid != pid).collect();
    sampler.follow_threads(&others)?;
    Ok(sampler)
}

/// Every thread of a running process (`/proc/PID/task`): its main thread at least.
fn threads_of(pid: u32) -> Vec<u32> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|dir| dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    if tids.is_empty() {
        tids.push(pid);
    }
    tids
}

/// Maps the event's ring with `pages` data pages, halving them (for this CPU and the next
/// ones) while the kernel refuses the locked memory.
fn map_ring(mut fd: std::os::fd::OwnedFd, pages: &mut usize) -> Result<Ring, Refusal> {
    loop {
        match Ring::map(fd, *pages) {
            Ok(ring) => return Ok(ring),
            Err((e, back)) if e.raw_os_error() == Some(libc::EPERM) && *pages > MIN_RING_PAGES => {
                *pages /= 2;
                fd = back;
            }
            Err((e, _)) => return Err(Refusal::new(Stage::Mmap, &e)),
        }
    }
}

/// CLOCK_MONOTONIC now, in ns: the clock of the events' timestamps.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: clock_gettime writes the timespec we pass; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Sampler {
    fn read_initial_mappings(&mut self, pid: u32) {
        let time_ns = now_ns();
        for line in super::maps::read(pid) {
            let file = self.unwinding.map(pid, line.start, line.end, line.pgoff, &line.path, line.inode);
            if let Some(file) = &file
                && let Some(bias) = file.bias(line.start, line.pgoff, line.end - line.start)
            {
                self.python.map(pid, &line.path, file, bias);
            }
            self.initial.push(Mapping {
                pid,
                start: line.start,
                end: line.end,
                pgoff: line.pgoff,
                path: String::from_utf8_lossy(&line.path).into_owned(),
                build_id: file.and_then(|f| f.build_id.clone()),
                time_ns,
            });
        }
    }

    /// Samples a running process too (attach mode: one that joined the session), each of its
    /// threads and what they start from now on, into the rings there are. `false` when it is
    /// sampled already (forked from a process followed: it inherited the events).
    pub(crate) fn follow(&mut self, pid: u32) -> Result<bool, Refusal> {
        if self.unwinding.knows(pid) {
            return Ok(false);
        }
        self.follow_threads(&threads_of(pid))?;
        self.read_initial_mappings(pid);
        Ok(true)
    }

    /// Events on `tids` for every ring's CPU, writing into that ring.
    fn follow_threads(&mut self, tids: &[u32]) -> Result<(), Refusal> {
        // Woken at every record, as the rings' own events ([`open_with`]).
        let event = attr::sampling_attr(self.hz, STACK_BYTES, REGS_MASK, 1, Start::Now);
        for &tid in tids {
            for (ring, &cpu) in self.rings.iter().zip(&self.cpus) {
                let fd = match attr::perf_event_open(&event, tid as i32, cpu as i32) {
                    Ok(fd) => fd,
                    // Gone meanwhile (the thread, or the CPU).
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ESRCH | libc::ENODEV)) => continue,
                    Err(e) => return Err(Refusal::new(Stage::Open, &e)),
                };
                attr::set_output(&fd, &ring.fd).map_err(|e| Refusal::new(Stage::Mmap, &e))?;
                self.followers.push(fd);
            }
        }
        Ok(())
    }

    /// Reads what the rings hold, up to a millisecond ago, and hands it to `out` in time
    /// order (see [`SETTLE_NS`]).
    pub(crate) fn drain(&mut self, out: &mut impl FnMut(Record<'_>)) {
        self.pass(now_ns().saturating_sub(SETTLE_NS), out);
    }

    /// Stops the events (the job goes on unsampled) and drains everything left.
    pub(crate) fn finish(mut self, out: &mut impl FnMut(Record<'_>)) -> Stats {
        for fd in self.rings.iter().map(|r| &r.fd).chain(&self.followers) {
            attr::disable(fd);
        }
        self.pass(u64::MAX, out);
        self.stats
    }

    /// Waits for records, at most `timeout`; whether a ring has data to read. While a sampled
    /// process runs Python, every record wakes it (the events' watermark is one byte), so that
    /// the sample's Python frames are read while its thread is still where it was sampled;
    /// otherwise it sleeps `timeout` (the rings hold 32 samples, ~64 ms of a busy CPU at
    /// 499 Hz: the caller's loop should wait at most ~30 ms).
    pub(crate) fn wait(&mut self, timeout: Duration) -> bool {
        use std::os::fd::AsRawFd;
        if !self.python.any() || self.hung_up.iter().all(|&h| h) {
            std::thread::sleep(timeout);
            return false;
        }
        let mut polls: Vec<libc::pollfd> = (self.rings.iter().zip(&self.hung_up))
            .map(|(ring, &hup)| libc::pollfd {
                fd: if hup { -1 } else { ring.fd.as_raw_fd() },
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // Safety: `polls` is a live array of as many pollfd as we pass.
        let ready = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, ms) };
        for (poll, hup) in polls.iter().zip(self.hung_up.iter_mut()) {
            *hup |= poll.revents & libc::POLLHUP != 0;
        }
        // A ring's poll answers each wake-up once (the kernel clears it), so records left for
        // the next pass do not wake the next poll at once.
        ready > 0 && polls.iter().any(|p| p.revents & libc::POLLIN != 0)
    }

    /// One pass: every record of every ring up to `cutoff`, sorted by time (the rings are each
    /// in order, but a process's mapping and its samples may lie in different CPUs' rings),
    /// handed out, then given back to the kernel.
    fn pass(&mut self, cutoff: u64, out: &mut impl FnMut(Record<'_>)) {
        for mapping in std::mem::take(&mut self.initial) {
            out(Record::Mapping(mapping));
        }
        let mut pending: Vec<(u64, RecordBytes<'_>)> = Vec::new();
        let mut unsettled: Vec<RecordBytes<'_>> = Vec::new();
        let early = self.python.any();
        let mut consumed = Vec::with_capacity(self.rings.len());
        for ring in &self.rings {
            let (first, second, tail) = ring.readable();
            let (mut taken, mut settled) = (0, true);
            let end = ring::split_records(first, second, |record| {
                let time = parse::time(record.bytes());
                settled &= time <= cutoff;
                if settled {
                    taken += record.bytes().len();
                    pending.push((time, record));
                    return true;
                }
                // Left for the next pass; its Python frames are read now, if it is a sample.
                unsettled.push(record);
                early
            });
            // All of it settled: up to where the records end (a malformed one ends them all).
            consumed.push((tail, if settled { end } else { taken }));
        }
        for record in &unsettled {
            if let Some(Raw::Sample { pid, tid, time, regs, stack, .. }) = parse::decode(record.bytes()) {
                let copy = unwind::stack_pointer(regs).map(|sp| python::StackCopy { sp, bytes: stack });
                self.python.read_early(pid, tid, time, copy);
            }
        }
        drop(unsettled);
        // Stable: records of one time keep their ring order.
        pending.sort_by_key(|(time, _)| *time);
        let mut state = State {
            unwinding: &mut self.unwinding,
            python: &mut self.python,
            merged: &mut self.merged,
            stats: &mut self.stats,
        };
        for (_, record) in &pending {
            handle(record.bytes(), &mut state, out);
        }
        drop(pending);
        for (ring, (tail, taken)) in self.rings.iter().zip(consumed) {
            ring.release(tail, taken);
        }
        self.stats.files = self.unwinding.files_seen() as u64;
        self.stats.python = self.python.stats();
    }
}

/// What handling a record changes.
struct State<'a> {
    unwinding: &'a mut Unwinding,
    python: &'a mut PythonStacks,
    merged: &'a mut Vec<u64>,
    stats: &'a mut Stats,
}

/// One record: the code maps follow mappings, execs, forks and exits; samples are unwound,
/// their Python frames set in place.
fn handle(bytes: &[u8], state: &mut State<'_>, out: &mut impl FnMut(Record<'_>)) {
    let State { unwinding, python, merged, stats } = state;
    let Some(raw) = parse::decode(bytes) else {
        stats.malformed += 1;
        return;
    };
    match raw {
        Raw::Sample { pid, tid, time, ip, regs, stack } => {
            let (frames, complete) = unwinding.unwind(pid, ip, regs, stack);
            stats.samples += 1;
            stats.unwound += u64::from(frames.len() > 1);
            let copy = unwind::stack_pointer(regs).map(|sp| python::StackCopy { sp, bytes: stack });
            let native = python::Native { frames, complete, copy };
            let frames = if python.merge(pid, tid, time, native, merged) { &merged[..] } else { frames };
            for frame in python.new_frames() {
                out(Record::PythonFrame(frame));
            }
            out(Record::Sample(Sample { pid, tid, time_ns: time, frames }));
        }
        Raw::Mmap2 { pid, time, start, len, pgoff, ino, path, .. } => {
            let file = unwinding.map(pid, start, start + len, pgoff, path, ino);
            if let Some(file) = &file
                && let Some(bias) = file.bias(start, pgoff, len)
            {
                python.map(pid, path, file, bias);
            }
            out(Record::Mapping(Mapping {
                pid,
                start,
                end: start + len,
                pgoff,
                path: String::from_utf8_lossy(path).into_owned(),
                build_id: file.and_then(|f| f.build_id.clone()),
                time_ns: time,
            }));
        }
        Raw::Comm { pid, tid, time, exec, name } => {
            if exec {
                unwinding.exec(pid);
                python.gone(pid);
            }
            let name = String::from_utf8_lossy(name).into_owned();
            out(Record::Comm { pid, tid, name, exec, time_ns: time });
        }
        Raw::Fork { pid, ppid, tid, time } => {
            if pid != ppid {
                unwinding.fork(ppid, pid);
                python.fork(ppid, pid);
            }
            out(Record::Fork { pid, ppid, tid, time_ns: time });
        }
        Raw::Exit { pid, tid, time, .. } => {
            if pid == tid {
                unwinding.exit(pid);
                python.gone(pid);
            }
            out(Record::Exit { pid, tid, time_ns: time });
        }
        Raw::Lost { records, time } => {
            stats.lost += records;
            out(Record::Lost { records, time_ns: time });
        }
        Raw::LostSamples { samples, time } => {
            stats.lost += samples;
            out(Record::Lost { records: samples, time_ns: time });
        }
        Raw::Other { .. } => {}
    }
}
