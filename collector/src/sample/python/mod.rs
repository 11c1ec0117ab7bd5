//! Python frames in sampled stacks (`py-spy --native`'s mixed stacks): where a sampled thread
//! ran CPython's evaluation loop, its Python frames — function and line — take the place of
//! the loop's native frames.
//!
//! The frames are read from the process (`process_vm_readv`, through [`mlprof_pyframes`], the
//! reader libmlprof.so uses for call sites) when the sampler takes the sample, a few to ~20 ms
//! after the kernel did. A thread in native code called from Python (the case this is for:
//! which Python line called the code that burns the CPU) keeps its Python frames while it
//! stays there, so they are the sample's. A thread that moved on meanwhile may show the frames
//! it has now; the activations of the evaluation loop, counted in the native stack and in the
//! Python one, must agree for the frames to be set in place, and [`Stats`] counts the samples
//! where they did not.
//!
//! Files: `remote` (the process's memory a page at a time), `interpreter` (finding it, its
//! layout, its threads), here: the per-process state and the merge.

mod interpreter;
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
        native: &[u64],
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
        let matched = set_in_place(native, &interp.eval, &ids, entries, out);
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

/// `native` into `out` with each activation of the evaluation loop (a frame in `eval`)
/// replaced by its Python frames (`python`, innermost first; `entries[i]`: frame `i` is the
/// outermost of its activation). Activations the native stack did not reach (it was cut
/// short) go at its root end. Whether both counted the same activations.
///
/// More loop frames than activations cannot be the sample's frames (the thread returned
/// from Python before they were read): `out` is then `native` as it is.
fn set_in_place(
    native: &[u64],
    eval: &std::ops::Range<u64>,
    python: &[u32],
    entries: &[bool],
    out: &mut Vec<u64>,
) -> bool {
    let mut activations: Vec<&[u32]> = Vec::new();
    let mut start = 0;
    for (i, &entry) in entries.iter().enumerate() {
        if entry || i + 1 == entries.len() {
            activations.push(python.get(start..=i).unwrap_or_default());
            start = i + 1;
        }
    }
    let tag = |id: &u32| PYTHON_FRAME_TAG | u64::from(*id);
    out.clear();
    let mut next = activations.iter();
    let mut loops = 0;
    let loops_in_native = native
        .iter()
        .enumerate()
        .filter(|&(i, &address)| eval.contains(&if i == 0 { address } else { address.wrapping_sub(1) }))
        .count();
    if loops_in_native > activations.len() {
        out.extend_from_slice(native);
        return false;
    }
    for (i, &address) in native.iter().enumerate() {
        // A return address points after its call: the call itself is the byte before.
        let at = if i == 0 { address } else { address.wrapping_sub(1) };
        if eval.contains(&at) {
            loops += 1;
            if let Some(frames) = next.next() {
                out.extend(frames.iter().map(tag));
                continue;
            }
        }
        out.push(address);
    }
    for frames in next {
        out.extend(frames.iter().map(tag));
    }
    loops == activations.len()
}

#[cfg(test)]
mod tests;
