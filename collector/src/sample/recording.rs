//! The sampler on a thread of its own, its records turned into run-file frames
//! ([`mlprof_format::sample`]): each sampled address becomes (module, offset in the module's
//! file) through the process's mappings, modules and stacks are interned (a [`ModuleInfo`] or
//! [`StackInfo`] written before the first sample that uses it), samples go in batches. The
//! drain loop writes what the thread handed over ([`Recording::write_pending`]), like the
//! energy sampler's.
//!
//! The thread waits on the rings at most [`WAIT`] at a time: a CPU's ring holds ~32 samples,
//! ~64 ms of one busy CPU at the default rate, so the drain loop's pace would lose samples.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use mlprof_format::runfile::RunWriter;
// Every sample hashes its stack: std's SipHash showed in a profile of the sampler thread.
use mlprof_format::ids::Ids;
use mlprof_format::sample::{
    CpuSample, ModuleInfo, NO_MODULE, PYTHON_MODULE, PythonFrameInfo, SamplingInfo, StackFrame, StackInfo,
};
use rustc_hash::{FxBuildHasher, FxHashMap as HashMap};

use super::python::PYTHON_FRAME_TAG;
use super::{Mapping, Record, Sampler, Stats};

/// The longest wait on the rings between two drains.
const WAIT: Duration = Duration::from_millis(20);

/// What the thread hands to the drain loop.
enum Msg {
    Module(ModuleInfo),
    PythonFrame(PythonFrameInfo),
    Stack(StackInfo),
    Samples(Vec<CpuSample>),
}

/// The sampler running.
pub(crate) struct Recording {
    stop: Arc<AtomicBool>,
    rx: mpsc::Receiver<Msg>,
    handle: Option<JoinHandle<Outcome>>,
    hz: u32,
    /// Processes to follow (attach mode).
    follow: mpsc::Sender<u32>,
}

/// What the thread ends with: its counts, and why it sampled nothing (attach mode).
#[derive(Default)]
struct Outcome {
    stats: Stats,
    refused: Option<String>,
}

impl Recording {
    /// Starts draining `sampler` (sampling at `hz`) on a thread of its own.
    pub(crate) fn start(sampler: Sampler, hz: u32) -> io::Result<Recording> {
        Recording::spawn(Some(sampler), hz)
    }

    /// Starts the thread with nothing to sample yet (attach mode): it samples the processes it
    /// is told of ([`Recording::follow`]).
    pub(crate) fn serve(hz: u32) -> io::Result<Recording> {
        Recording::spawn(None, hz)
    }

    fn spawn(sampler: Option<Sampler>, hz: u32) -> io::Result<Recording> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (follow, followed) = mpsc::channel();
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("mlprof-sample".into())
            .spawn(move || run(sampler, hz, &followed, &tx, &flag))?;
        Ok(Recording { stop, rx, handle: Some(handle), hz, follow })
    }

    /// Samples process `pid` too, from now on (a process that joined the session).
    pub(crate) fn follow(&self, pid: u32) {
        let _ = self.follow.send(pid);
    }

    /// Writes what the thread has handed over so far.
    pub(crate) fn write_pending(&mut self, writer: &mut RunWriter<impl Write>) -> io::Result<()> {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                Msg::Module(module) => writer.write_module(&module)?,
                Msg::PythonFrame(frame) => writer.write_python_frame(&frame)?,
                Msg::Stack(stack) => writer.write_stack(&stack)?,
                Msg::Samples(samples) => writer.write_samples(&samples)?,
            }
        }
        Ok(())
    }

    /// Stops the events, drains the rest, writes it and the sampling note; the counts.
    pub(crate) fn stop(mut self, writer: &mut RunWriter<impl Write>) -> io::Result<Stats> {
        self.stop.store(true, Ordering::Release);
        let Outcome { stats, refused } = self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default();
        self.write_pending(writer)?;
        writer.write_sampling(&SamplingInfo {
            hz: self.hz,
            samples: stats.samples,
            lost: stats.lost,
            refused: refused.unwrap_or_default(),
            stack_bytes: super::STACK_BYTES,
        })?;
        Ok(stats)
    }
}

/// The thread: drain, convert, hand over, until asked to stop; then the last drain. In attach
/// mode the first process it is told of opens the events, the others follow into their rings;
/// a refusal is said once and ends the sampling.
fn run(
    mut sampler: Option<Sampler>,
    hz: u32,
    followed: &mpsc::Receiver<u32>,
    tx: &mpsc::Sender<Msg>,
    stop: &AtomicBool,
) -> Outcome {
    let mut frames = Frames::default();
    let mut refused: Option<String> = None;
    while !stop.load(Ordering::Acquire) {
        for pid in followed.try_iter() {
            if refused.is_some() {
                continue;
            }
            let done = match &mut sampler {
                None => super::attach(pid, hz).map(|s| sampler = Some(s)),
                Some(s) => {
                    // Its fork record, if it was forked from a process followed, comes first.
                    s.drain(&mut |record| frames.take(record));
                    s.follow(pid).map(drop)
                }
            };
            if let Err(refusal) = done {
                eprintln!("mlprof-collect: no CPU samples: {refusal}");
                refused = Some(refusal.to_string());
            }
        }
        match &mut sampler {
            Some(s) => {
                s.wait(WAIT);
                s.drain(&mut |record| frames.take(record));
            }
            None => std::thread::sleep(WAIT),
        }
        frames.hand_over(tx);
    }
    let stats = sampler.map(|s| s.finish(&mut |record| frames.take(record))).unwrap_or_default();
    frames.hand_over(tx);
    Outcome { stats, refused }
}

/// A mapping of a process: its end, the file offset it starts at, and the module.
type Mapped = (u64, u64, u32);

/// The conversion's state: each process's mappings, the modules and stacks met, and what is
/// waiting to be handed over.
#[derive(Default)]
struct Frames {
    /// Per process: start address → (end, file offset, module).
    mappings: HashMap<u32, BTreeMap<u64, Mapped>>,
    modules: Ids<(String, Vec<u8>), FxBuildHasher>,
    stacks: Ids<Vec<StackFrame>, FxBuildHasher>,
    /// The frames of the sample being interned (kept: most samples repeat a known stack, and
    /// need no allocation to find it).
    scratch: Vec<StackFrame>,
    out: Vec<Msg>,
    samples: Vec<CpuSample>,
}

impl Frames {
    fn take(&mut self, record: Record<'_>) {
        match record {
            Record::Mapping(mapping) => self.map(mapping),
            Record::PythonFrame(frame) => self.out.push(Msg::PythonFrame(frame)),
            Record::Sample(sample) => {
                let stack = self.stack(sample.pid, sample.frames);
                self.samples.push(CpuSample {
                    time_ns: sample.time_ns,
                    pid: sample.pid,
                    tid: sample.tid,
                    stack,
                });
            }
            Record::Fork { pid, ppid, .. } if pid != ppid => {
                // A fork child starts with its parent's address space.
                let inherited = self.mappings.get(&ppid).cloned().unwrap_or_default();
                self.mappings.insert(pid, inherited);
            }
            Record::Comm { pid, exec: true, .. } => {
                // A new program: its mappings follow this record.
                self.mappings.remove(&pid);
            }
            Record::Exit { pid, tid, .. } if pid == tid => {
                self.mappings.remove(&pid);
            }
            _ => {}
        }
    }

    fn map(&mut self, mapping: Mapping) {
        let key = (mapping.path, mapping.build_id.unwrap_or_default());
        let (module, new) = self.modules.id(key.clone());
        if new {
            self.out.push(Msg::Module(ModuleInfo { id: module, path: key.0, build_id: key.1 }));
        }
        let process = self.mappings.entry(mapping.pid).or_default();
        // A mapping replaces whatever it overlaps (mmap over an old mapping).
        let overlapping: Vec<u64> = process
            .range(..mapping.end)
            .filter(|(_, (end, ..))| *end > mapping.start)
            .map(|(s, _)| *s)
            .collect();
        for start in overlapping {
            process.remove(&start);
        }
        process.insert(mapping.start, (mapping.end, mapping.pgoff, module));
    }

    /// The id of the stack of `addresses` in process `pid` (interned; 0 for none).
    fn stack(&mut self, pid: u32, addresses: &[u64]) -> u32 {
        if addresses.is_empty() {
            return 0;
        }
        let process = self.mappings.get(&pid);
        let mut frames = std::mem::take(&mut self.scratch);
        frames.clear();
        frames.extend(addresses.iter().map(|&address| {
            if address >= PYTHON_FRAME_TAG {
                return StackFrame { module: PYTHON_MODULE, offset: address & u64::from(u32::MAX) };
            }
            let mapped = process.and_then(|p| p.range(..=address).next_back());
            match mapped {
                Some((start, &(end, pgoff, module))) if address < end => {
                    StackFrame { module, offset: address - start + pgoff }
                }
                _ => StackFrame { module: NO_MODULE, offset: address },
            }
        }));
        let id = match self.stacks.get(&frames) {
            Some(id) => id,
            None => {
                let (id, _) = self.stacks.id(frames.clone());
                self.out.push(Msg::Stack(StackInfo { id, frames: frames.clone(), truncated: false }));
                id
            }
        };
        self.scratch = frames;
        id
    }

    /// Sends what is waiting: modules and stacks before the samples that use them.
    fn hand_over(&mut self, tx: &mpsc::Sender<Msg>) {
        for msg in self.out.drain(..) {
            let _ = tx.send(msg);
        }
        if !self.samples.is_empty() {
            let _ = tx.send(Msg::Samples(std::mem::take(&mut self.samples)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Sample;

    fn mapping(pid: u32, start: u64, end: u64, pgoff: u64, path: &str) -> Record<'static> {
        Record::Mapping(Mapping { pid, start, end, pgoff, path: path.into(), build_id: None, time_ns: 0 })
    }

    /// Addresses become offsets in their module's file; a fork child inherits its parent's
    /// mappings; an exec clears them; the same stack is one id; modules come before stacks.
    #[test]
    fn addresses_become_module_offsets_and_stacks_are_interned() {
        let mut f = Frames::default();
        f.take(mapping(1, 0x1000, 0x3000, 0x400, "/bin/prog"));
        f.take(mapping(1, 0x7000, 0x8000, 0, "/lib/libc.so.6"));
        let frames = [0x1010, 0x7020, 0x9999];
        f.take(Record::Sample(Sample { pid: 1, tid: 1, time_ns: 5, frames: &frames }));
        f.take(Record::Fork { pid: 2, ppid: 1, tid: 2, time_ns: 6 });
        f.take(Record::Sample(Sample { pid: 2, tid: 2, time_ns: 7, frames: &frames }));
        f.take(Record::Comm { pid: 2, tid: 2, name: "x".into(), exec: true, time_ns: 8 });
        f.take(Record::Sample(Sample { pid: 2, tid: 2, time_ns: 9, frames: &frames[..1] }));
        let stacks: Vec<(u32, Vec<(u32, u64)>)> = f
            .out
            .iter()
            .filter_map(|m| match m {
                Msg::Stack(s) => Some((s.id, s.frames.iter().map(|f| (f.module, f.offset)).collect())),
                _ => None,
            })
            .collect();
        assert_eq!(stacks, [(1, vec![(1, 0x410), (2, 0x20), (0, 0x9999)]), (2, vec![(0, 0x1010)])]);
        assert!(matches!(f.out[0], Msg::Module(ModuleInfo { id: 1, .. })));
        let ids: Vec<u32> = f.samples.iter().map(|s| s.stack).collect();
        assert_eq!(ids, [1, 1, 2]);
    }
}
