//! Python frames in sampled stacks (`py-spy --native`'s mixed stacks): where a sampled thread
//! ran CPython's evaluation loop (3.11–3.13), its Python frames — function and line — take the
//! place of the loop's native frames.
//!
//! The frames are read from the process (`process_vm_readv`, through [`mlprof_pyframes`], the
//! reader libmlprof.so uses for call sites) as soon as the sampler sees the sample: while a
//! sampled process runs Python, every record wakes the sampler (measured here: under 1 ms
//! after the kernel took it, for 9 samples in 10). A thread may still have moved on by then,
//! so [`merge`] sets only the activations of the loop that the sample's copy of the stack
//! proves were where they are now (3.11, 3.12), and [`Stats`] counts the samples where some
//! were not: their loop frames stay native.
//!
//! Files: `remote` (the process's memory a page at a time), `interpreter` (finding it, its
//! layout, its threads), `merge` (which activations were the sample's, and the frames set in
//! place), here: the per-process state.

mod interpreter;
mod merge;
mod remote;

use std::cell::RefCell;

use mlprof_format::sample::PythonFrameInfo;
use mlprof_pyframes::Frame;
use mlprof_pyframes::code::{self, Described};
use mlprof_pyframes::walk;
use rustc_hash::FxHashMap;

use interpreter::{Interpreter, Statics};
use remote::{Reader, Remote};

use super::modules::ModuleFile;

/// [`super::Sample::frames`] entries from this bit up are Python frames, the
/// [`PythonFrameInfo::id`] in the low 32 bits (user addresses lie below 2^47 on x86-64 and
/// 2^52 on aarch64).
pub(crate) const PYTHON_FRAME_TAG: u64 = 1 << 63;

/// The most Python frames read of one stack.
const MAX_PYTHON_FRAMES: usize = 128;
/// A code object known to be one is checked again after this long: its address may be reused
/// by another object once it is freed (code made by `exec` or `compile`).
const CODE_RECHECK_NS: u64 = 1_000_000_000;

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
    /// Samples whose native stack and Python frames did not agree on the number of the
    /// evaluation loop's activations (the thread moved on before its frames were read, or the
    /// native stack was cut short): their Python frames are kept where they fit.
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
    /// Code objects checked: address → (identity, when checked).
    codes: RefCell<FxHashMap<usize, (u64, u64)>>,
    /// (code, offset) → Python frame id.
    described: RefCell<FxHashMap<Frame, u32>>,
}

impl Process {
    fn new(pid: u32, state: State) -> Process {
        Process {
            state,
            remote: RefCell::new(Remote::new(pid)),
            codes: RefCell::default(),
            described: RefCell::default(),
        }
    }
}

/// The interpreters of the sampled processes, and the Python frames met so far.
#[derive(Default)]
pub(crate) struct PythonStacks {
    processes: FxHashMap<u32, Process>,
    ids: FxHashMap<(String, String, u32), u32>,
    /// Python frames met for the first time, to write before the sample that uses them.
    pub(crate) new_frames: Vec<PythonFrameInfo>,
    pub(crate) stats: Stats,
    frames: Vec<Frame>,
    entries: Vec<bool>,
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
        let Some(process) = self.processes.get_mut(&pid) else { return false };
        if let State::Mapped(statics) = &process.state {
            process.state = match Interpreter::read(statics, &process.remote) {
                Some(interp) => State::Ready(Box::new(interp)),
                None => State::Unreadable,
            };
        }
        let State::Ready(interp) = &mut process.state else { return false };
        process.remote.borrow_mut().forget();
        let mem = Reader(&process.remote);
        let Some(tstate) = interp.thread_state(&mem, tid, time_ns) else { return false };
        let code_type = interp.types.code as u64;
        let is_code = |at: usize| -> bool {
            let mut codes = process.codes.borrow_mut();
            match codes.get(&at) {
                Some(&(_, checked)) if time_ns.saturating_sub(checked) < CODE_RECHECK_NS => true,
                _ => {
                    let identity = code::identity(&mem, &interp.layout, code_type as usize, at);
                    if identity == 0 {
                        return false;
                    }
                    if codes.insert(at, (identity, time_ns)).is_some_and(|(old, _)| old != identity) {
                        process.described.borrow_mut().retain(|frame, _| frame.code != at);
                    }
                    true
                }
            }
        };
        self.frames.resize(MAX_PYTHON_FRAMES, Frame::default());
        self.entries.clear();
        self.entries.resize(MAX_PYTHON_FRAMES, false);
        let walked = walk::frames_and_entries_of(
            &mem,
            &interp.layout,
            &is_code,
            tstate,
            &mut self.frames,
            &mut self.entries,
        );
        if walked.count == 0 {
            return false;
        }
        let mut ids = Vec::with_capacity(walked.count);
        for &frame in self.frames.iter().take(walked.count) {
            let known = process.described.borrow().get(&frame).copied();
            let id = match known {
                Some(id) => id,
                None => {
                    // A code object that cannot be described now keeps its place, unnamed.
                    let key = describe(&mem, interp, frame)
                        .unwrap_or_else(|| (String::new(), "<unreadable>".into(), 0));
                    let id = intern(key, &mut self.ids, &mut self.new_frames);
                    process.described.borrow_mut().insert(frame, id);
                    id
                }
            };
            ids.push(id);
        }
        let entries = self.entries.get(..walked.count).unwrap_or_default();
        let mut activations = merge::activations(&ids, entries);
        merge::check(&mem, &interp.layout, tstate, native.copy, &mut activations);
        let matched = merge::set_in_place(native, &interp.eval, &activations, out);
        self.stats.samples += 1;
        self.stats.unmatched += u64::from(!matched);
        true
    }

    /// The counts, with the reads of the processes still known.
    pub(crate) fn stats(&self) -> Stats {
        let reads: u64 = self.processes.values().map(|p| p.remote.borrow().reads).sum();
        Stats { reads: self.stats.reads + reads, ..self.stats }
    }
}

/// `frame`'s (file, function, line).
fn describe(mem: &Reader<'_>, interp: &Interpreter, frame: Frame) -> Option<(String, String, u32)> {
    let (mut file, mut function) = ([0u8; 512], [0u8; 256]);
    let Described { file_len, func_len, line } = code::describe(
        mem,
        &interp.layout,
        &interp.types,
        frame.code,
        frame.offset,
        &mut file,
        &mut function,
    )?;
    let text =
        |buf: &[u8], len: usize| String::from_utf8_lossy(buf.get(..len).unwrap_or_default()).into_owned();
    Some((text(&file, file_len), text(&function, func_len), line))
}

/// The id of a (file, function, line), a new [`PythonFrameInfo`] when first met.
fn intern(
    key: (String, String, u32),
    ids: &mut FxHashMap<(String, String, u32), u32>,
    new_frames: &mut Vec<PythonFrameInfo>,
) -> u32 {
    let next = ids.len() as u32 + 1;
    let id = *ids.entry(key.clone()).or_insert(next);
    if id == next {
        let (file, function, line) = key;
        new_frames.push(PythonFrameInfo { id, file, function, line });
    }
    id
}
