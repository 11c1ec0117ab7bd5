//! One process's interpreter, seen from outside: found in the file that defines `_PyRuntime`
//! when it is mapped, its layout read at the first sample (from the process's own
//! `Py_Version`, and 3.13's `_Py_DebugOffsets`), its threads found by their kernel tid in the
//! interpreter's list of thread states.

use std::cell::RefCell;
use std::ops::Range;

use mlprof_pyframes::code::Types;
use mlprof_pyframes::layout::{self, Layout, NONE, TP_NAME};
use mlprof_pyframes::memory::Memory;
use rustc_hash::FxHashMap;

use super::remote::{Reader, Remote};
use crate::sample::modules::ModuleFile;

/// A thread Python does not know (a CUDA or OpenMP thread) is looked for again in the
/// interpreter's list at most this often, whatever its sampling rate.
const LOOK_AGAIN_NS: u64 = 50_000_000;
/// The longest list of thread states believed: a loop in a damaged list must end.
const MAX_THREADS: usize = 4096;

/// Where a mapped interpreter's statics are in the process.
#[derive(Clone, Debug)]
pub(crate) struct Statics {
    runtime: usize,
    version: usize,
    types: Types,
    /// `_PyEval_EvalFrameDefault`: a native frame there is an activation of the evaluation
    /// loop, whose Python frames replace it.
    pub(crate) eval: Range<u64>,
}

const NAMES: [&str; 6] =
    ["_PyRuntime", "Py_Version", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type", "_PyEval_EvalFrameDefault"];

impl Statics {
    /// The interpreter in `file`, mapped with load bias `bias`, if the file is one: a
    /// `python3.X` executable or `libpython3.X.so` that defines every symbol needed.
    pub(crate) fn find(path: &[u8], file: &ModuleFile, bias: u64) -> Option<Statics> {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        if !name.windows(6).any(|w| w == b"python") {
            return None;
        }
        let found = file.symbols(&NAMES);
        let at = |i: usize| found.get(i).copied().flatten().map(|(a, size)| (a.wrapping_add(bias), size));
        let (runtime, version, code, unicode, bytes) = (at(0)?, at(1)?, at(2)?, at(3)?, at(4)?);
        let (eval, size) = at(5)?;
        let types = Types { code: code.0 as usize, unicode: unicode.0 as usize, bytes: bytes.0 as usize };
        Some(Statics {
            runtime: runtime.0 as usize,
            version: version.0 as usize,
            types,
            eval: eval..eval + size.max(1),
        })
    }
}

/// A process's interpreter once its layout is known.
#[derive(Clone)]
pub(crate) struct Interpreter {
    pub(crate) layout: Layout,
    pub(crate) types: Types,
    pub(crate) eval: Range<u64>,
    runtime: usize,
    /// Thread states by kernel tid, as last found in the list.
    threads: FxHashMap<u32, usize>,
    looked_at_ns: Option<u64>,
}

impl Interpreter {
    /// The layout of the interpreter at `statics`, read from the process; `None` for a
    /// version or build this reader does not know (3.10 has no kernel tid in its thread
    /// states; a free-threaded 3.13; a `Py_TRACE_REFS` build).
    pub(crate) fn read(statics: &Statics, remote: &RefCell<Remote>) -> Option<Interpreter> {
        let mem = Reader(remote);
        let (major, minor) = layout::version_from_hex(mem.u64(statics.version)?);
        let mut layout = layout::for_version(major, minor)?;
        if minor >= 13 {
            layout = layout::from_debug_offsets(&mem, statics.runtime).ok()?;
        }
        if layout.tstate_native_thread_id == NONE {
            return None;
        }
        let named = |ty: usize, name: &[u8]| -> bool {
            let mut buf = [0u8; 8];
            let Some(text) = mem.pointer(ty + TP_NAME) else { return false };
            let Some(buf) = buf.get_mut(..name.len() + 1) else { return false };
            mem.read(text, buf).is_some() && buf.get(..name.len()) == Some(name) && buf.last() == Some(&0)
        };
        let types = statics.types;
        if !(named(types.code, b"code") && named(types.unicode, b"str") && named(types.bytes, b"bytes")) {
            return None;
        }
        Some(Interpreter {
            layout,
            types,
            eval: statics.eval.clone(),
            runtime: statics.runtime,
            threads: FxHashMap::default(),
            looked_at_ns: None,
        })
    }

    /// A copy for a fork child: the same statics and layout; its one thread is looked for anew.
    pub(crate) fn forked(&self) -> Interpreter {
        Interpreter { threads: FxHashMap::default(), looked_at_ns: None, ..self.clone() }
    }

    /// The thread state of thread `tid` at `now_ns`, if the interpreter knows the thread.
    pub(crate) fn thread_state(&mut self, mem: &impl Memory, tid: u32, now_ns: u64) -> Option<usize> {
        let native_id = self.layout.tstate_native_thread_id as usize;
        if let Some(&tstate) = self.threads.get(&tid) {
            // A thread state is freed when its thread ends, and its tid may come back.
            if mem.u64(tstate + native_id) == Some(u64::from(tid)) {
                return Some(tstate);
            }
            self.threads.remove(&tid);
        }
        if self.looked_at_ns.is_some_and(|at| now_ns.saturating_sub(at) < LOOK_AGAIN_NS) {
            return None;
        }
        self.looked_at_ns = Some(now_ns);
        self.threads.clear();
        let interp = mem.pointer(self.runtime + self.layout.runtime_interpreters as usize)?;
        let mut tstate = mem.pointer(interp + self.layout.interp_threads as usize);
        for _ in 0..MAX_THREADS {
            let Some(at) = tstate else { break };
            if let Some(id) = mem.u64(at + native_id).and_then(|id| u32::try_from(id).ok()) {
                self.threads.insert(id, at);
            }
            tstate = mem.pointer(at + self.layout.tstate_next as usize);
        }
        self.threads.get(&tid).copied()
    }
}
