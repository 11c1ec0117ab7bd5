//! Python frames in sampled stacks (`py-spy --native`'s mixed stacks): where a sampled thread
//! ran CPython's evaluation loop (3.11–3.13), its Python frames — function and line — take the
//! place of the loop's native frames.
//!
//! The frames are read from the process (`process_vm_readv`, through [`mlprof_pyframes`], the
//! reader libmlprof.so uses for call sites) as soon as the sampler sees the sample
//! ([`PythonStacks::read_early`]): while a sampled process runs Python, every record wakes the
//! sampler (measured here: under 1 ms after the kernel took it, for 9 samples in 10). A thread may still have moved on by then,
//! so [`merge`] sets only the activations of the loop that the sample's copy of the stack
//! proves were where they are now (3.11, 3.12), and [`Stats`] counts the samples where some
//! were not: their loop frames stay native.
//!
//! Files: `remote` (the process's memory a page at a time), `interpreter` (finding it, its
//! layout, its threads), `codes` (code objects checked, named and their lines found once),
//! `merge` (which activations were the sample's, and the frames set in place), here: the
//! per-process state, the reading, early (at the sampler's first sight of a sample) or late.

mod codes;
mod interpreter;
mod merge;
mod remote;

use std::cell::RefCell;

use mlprof_format::sample::PythonFrameInfo;
use mlprof_pyframes::Frame;
use mlprof_pyframes::walk::{self, Entry};
use rustc_hash::FxHashMap;

use codes::{Codes, FrameIds};
use interpreter::{Interpreter, Statics};
use merge::{Activation, Seen};
use remote::{Reader, Remote};

use super::modules::ModuleFile;

/// [`super::Sample::frames`] entries from this bit up are Python frames, the
/// [`PythonFrameInfo::id`] in the low 32 bits (user addresses lie below 2^47 on x86-64 and
/// 2^52 on aarch64).
pub(crate) const PYTHON_FRAME_TAG: u64 = 1 << 63;

/// The most Python frames read of one stack.
const MAX_PYTHON_FRAMES: usize = 128;
/// Reads made early whose sample never came (a lost record) are dropped once this old.
const EARLY_KEPT_NS: u64 = 1_000_000_000;

/// A sample's native stack, leaf first, whether the unwinding reached its root, and the user
/// stack the kernel copied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Native<'a> {
    pub(crate) frames: &'a [u64],
    pub(crate) complete: bool,
    pub(crate) copy: Option<StackCopy<'a>>,
}

/// The bytes of a thread's stack from `sp` up, as they were when the sample was taken.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StackCopy<'a> {
    pub(crate) sp: u64,
    pub(crate) bytes: &'a [u8],
}

impl StackCopy<'_> {
    /// The word at `at`, if the copy holds it.
    fn u64(&self, at: u64) -> Option<u64> {
        let offset = usize::try_from(at.checked_sub(self.sp)?).ok()?;
        let word = self.bytes.get(offset..offset.checked_add(8)?)?;
        Some(u64::from_ne_bytes(word.try_into().ok()?))
    }
}

/// What the Python reading counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Samples given Python frames.
    pub(crate) samples: u64,
    /// Samples with an activation of the evaluation loop that was not the sample's (the thread
    /// moved on before its frames were read), or a native stack that did not fit the
    /// activations: their loop frames stay native there.
    pub(crate) unmatched: u64,
    /// `process_vm_readv` calls.
    pub(crate) reads: u64,
}

enum State {
    /// An interpreter is mapped; its layout is read at the first sample.
    Mapped(Statics),
    Ready(Box<Interpreter>),
    /// Not one this reader can read.
    Unreadable,
}

struct Process {
    state: State,
    remote: RefCell<Remote>,
    codes: RefCell<Codes>,
}

impl Process {
    fn new(pid: u32, state: State) -> Process {
        Process { state, remote: RefCell::new(Remote::new(pid)), codes: RefCell::default() }
    }
}

/// A thread's Python frames as read: their ids, innermost first, in activations of the
/// evaluation loop (how many frames each has, and what the sample's stack copy says of it).
struct Read {
    ids: Vec<u32>,
    activations: Vec<(usize, Seen)>,
}

impl Read {
    fn activations(&self) -> Vec<Activation<'_>> {
        let mut start = 0;
        let mut out = Vec::with_capacity(self.activations.len());
        for &(len, seen) in &self.activations {
            let frames = self.ids.get(start..start + len).unwrap_or_default();
            out.push(Activation { frames, innermost: 0, seen });
            start += len;
        }
        out
    }
}

/// The interpreters of the sampled processes, and the Python frames met so far.
#[derive(Default)]
pub(crate) struct PythonStacks {
    processes: FxHashMap<u32, Process>,
    frame_ids: FrameIds,
    /// Frames read at the sampler's first sight of a sample, by (tid, time).
    early: FxHashMap<(u32, u64), Read>,
    stats: Stats,
    frames: Vec<Frame>,
    entries: Vec<Entry>,
}

impl PythonStacks {
    /// `path` mapped into `pid` with load bias `bias`: an interpreter if it is one.
    pub(crate) fn map(&mut self, pid: u32, path: &[u8], file: &ModuleFile, bias: u64) {
        if let Some(statics) = Statics::find(path, file, bias) {
            self.processes.insert(pid, Process::new(pid, State::Mapped(statics)));
        }
    }

    /// Whether a sampled process has an interpreter this reader may read.
    pub(crate) fn any(&self) -> bool {
        self.processes.values().any(|p| !matches!(p.state, State::Unreadable))
    }

    /// `child` was forked from `parent`: the same interpreter at the same addresses.
    pub(crate) fn fork(&mut self, parent: u32, child: u32) {
        let state = match self.processes.get(&parent).map(|p| &p.state) {
            Some(State::Mapped(statics)) => State::Mapped(statics.clone()),
            Some(State::Ready(interp)) => State::Ready(Box::new(interp.forked())),
            _ => return,
        };
        self.processes.insert(child, Process::new(child, state));
    }

    /// `pid` exec'd or exited: its interpreter is gone (a new image maps its own).
    pub(crate) fn gone(&mut self, pid: u32) {
        if let Some(process) = self.processes.remove(&pid) {
            self.stats.reads += process.remote.borrow().reads;
        }
    }

    /// Python frames met for the first time, to write before the next sample.
    pub(crate) fn new_frames(&mut self) -> std::vec::Drain<'_, PythonFrameInfo> {
        self.frame_ids.new_frames.drain(..)
    }

    /// Reads the Python frames of a sample the sampler has just seen, before its turn comes
    /// (the records of the last moments wait for the records of other CPUs): its thread is
    /// most likely still where it was sampled.
    pub(crate) fn read_early(&mut self, pid: u32, tid: u32, time_ns: u64, copy: Option<StackCopy<'_>>) {
        if self.early.contains_key(&(tid, time_ns)) {
            return;
        }
        if let Some(read) = self.read(pid, tid, time_ns, copy) {
            self.early.insert((tid, time_ns), read);
        }
    }

    /// `native` (leaf first, as unwound) with the Python frames of thread `tid` set in place,
    /// into `out`; `false` (and `out` untouched) where the thread runs no Python this reader
    /// can read.
    pub(crate) fn merge(
        &mut self,
        pid: u32,
        tid: u32,
        time_ns: u64,
        native: Native<'_>,
        out: &mut Vec<u64>,
    ) -> bool {
        if self.early.len() > 4096 {
            self.early.retain(|&(_, time), _| time_ns.saturating_sub(time) < EARLY_KEPT_NS);
        }
        let read = match self.early.remove(&(tid, time_ns)) {
            Some(read) => read,
            None => match self.read(pid, tid, time_ns, native.copy) {
                Some(read) => read,
                None => return false,
            },
        };
        let Some(interp) = self.processes.get(&pid).and_then(|p| match &p.state {
            State::Ready(interp) => Some(interp),
            _ => None,
        }) else {
            return false;
        };
        let matched = merge::set_in_place(native, &interp.eval, &read.activations(), out);
        self.stats.samples += 1;
        self.stats.unmatched += u64::from(!matched);
        true
    }

    /// Thread `tid`'s Python frames now, checked against the sample's stack copy.
    fn read(&mut self, pid: u32, tid: u32, time_ns: u64, copy: Option<StackCopy<'_>>) -> Option<Read> {
        let PythonStacks { processes, frame_ids, frames, entries, .. } = self;
        let process = processes.get_mut(&pid)?;
        if let State::Mapped(statics) = &process.state {
            process.state = match Interpreter::read(statics, &process.remote) {
                Some(interp) => State::Ready(Box::new(interp)),
                None => State::Unreadable,
            };
        }
        let State::Ready(interp) = &mut process.state else { return None };
        process.remote.borrow_mut().forget();
        let mem = Reader(&process.remote);
        let tstate = interp.thread_state(&mem, tid, time_ns)?;
        let interp: &Interpreter = interp;
        let is_code = |at: usize| process.codes.borrow_mut().is_code(&mem, interp, at, time_ns);
        frames.clear();
        frames.resize(MAX_PYTHON_FRAMES, Frame::default());
        entries.clear();
        entries.resize(MAX_PYTHON_FRAMES, Entry::default());
        let (walked, cframe) =
            walk::frames_and_entries_of(&mem, &interp.layout, &is_code, tstate, frames, entries);
        if walked.count == 0 {
            return None;
        }
        let mut codes = process.codes.borrow_mut();
        let ids: Vec<u32> =
            frames.iter().take(walked.count).map(|&frame| codes.id(&mem, interp, frame, frame_ids)).collect();
        let mut activations = merge::activations(&ids, entries.get(..walked.count).unwrap_or_default());
        merge::check(&mem, &interp.layout, cframe, copy, &mut activations);
        let activations = activations.iter().map(|a| (a.frames.len(), a.seen)).collect();
        Some(Read { ids, activations })
    }

    /// The counts, with the reads of the processes still known.
    pub(crate) fn stats(&self) -> Stats {
        let reads: u64 = self.processes.values().map(|p| p.remote.borrow().reads).sum();
        Stats { reads: self.stats.reads + reads, ..self.stats }
    }
}
