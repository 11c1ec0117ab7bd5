//! The code objects met in one process: checked to be code objects (again after
//! [`CODE_RECHECK_NS`]: a freed one's address may come back as another object), their names
//! and line table read once, and each (code object, offset) turned into a Python frame id once.
//! A sample's frames then cost the walk's reads and nothing more.

use std::sync::Arc;

use mlprof_format::ids::Ids;
use mlprof_format::sample::PythonFrameInfo;
use mlprof_pyframes::Frame;
use mlprof_pyframes::code::{self, Named};
use mlprof_pyframes::memory::Memory;
use rustc_hash::{FxBuildHasher, FxHashMap};

use super::interpreter::Interpreter;

/// A code object known to be one is checked again after this long.
const CODE_RECHECK_NS: u64 = 1_000_000_000;

/// What one code object holds for every offset into it.
struct Names {
    file: String,
    function: String,
    firstlineno: i32,
    table: Vec<u8>,
}

struct Code {
    /// [`code::identity`] when last checked, and when.
    identity: u64,
    checked_ns: u64,
    /// Read when a frame of it is first described (`None`: not yet, or unreadable).
    names: Option<Arc<Names>>,
}

/// The Python frames met in the run: (file, function, line) → id, and those not written yet.
#[derive(Default)]
pub(super) struct FrameIds {
    ids: Ids<(String, String, u32), FxBuildHasher>,
    pub(super) new_frames: Vec<PythonFrameInfo>,
}

impl FrameIds {
    fn id(&mut self, file: &str, function: &str, line: u32) -> u32 {
        let (id, new) = self.ids.id((file.to_string(), function.to_string(), line));
        if new {
            let (file, function) = (file.to_string(), function.to_string());
            self.new_frames.push(PythonFrameInfo { id, file, function, line });
        }
        id
    }
}

/// One process's code objects.
#[derive(Default)]
pub(super) struct Codes {
    codes: FxHashMap<usize, Code>,
    described: FxHashMap<Frame, u32>,
    /// (code, line) → id: the many offsets of one line share it, found without building the
    /// (file, function, line) key.
    lines: FxHashMap<(usize, u32), u32>,
}

impl Codes {
    /// Whether `at` holds a code object (checked now, unless it was lately).
    pub(super) fn is_code(
        &mut self,
        mem: &impl Memory,
        interp: &Interpreter,
        at: usize,
        now_ns: u64,
    ) -> bool {
        if let Some(known) = self.codes.get(&at)
            && now_ns.saturating_sub(known.checked_ns) < CODE_RECHECK_NS
        {
            return true;
        }
        let identity = code::identity(mem, &interp.layout, interp.types.code, at);
        if identity == 0 {
            return false;
        }
        match self.codes.get_mut(&at) {
            Some(known) if known.identity == identity => known.checked_ns = now_ns,
            _ => {
                // Another object now, or a new one: what was read of the old one goes.
                self.described.retain(|frame, _| frame.code != at);
                self.lines.retain(|&(code, _), _| code != at);
                self.codes.insert(at, Code { identity, checked_ns: now_ns, names: None });
            }
        }
        true
    }

    /// The id of `frame` (a frame the walk found, so its code object was checked).
    pub(super) fn id(
        &mut self,
        mem: &impl Memory,
        interp: &Interpreter,
        frame: Frame,
        ids: &mut FrameIds,
    ) -> u32 {
        if let Some(&id) = self.described.get(&frame) {
            return id;
        }
        let id = match self.names(mem, interp, frame.code) {
            Some(names) => {
                let line = code::line_at(
                    &interp.layout,
                    names.table.iter().copied(),
                    names.firstlineno,
                    frame.offset,
                );
                ids.id(&names.file, &names.function, line.unwrap_or(0))
            }
            // Keeps its place in the stack, unnamed.
            None => ids.id("", "<unreadable>", 0),
        };
        self.described.insert(frame, id);
        id
    }

    fn names(&mut self, mem: &impl Memory, interp: &Interpreter, at: usize) -> Option<Arc<Names>> {
        let known = self.codes.get_mut(&at)?;
        if let Some(names) = &known.names {
            return Some(Arc::clone(names));
        }
        let (mut file, mut function) = ([0u8; 512], [0u8; 256]);
        let Named { file_len, func_len, firstlineno, table, table_len } =
            code::names(mem, &interp.layout, &interp.types, at, &mut file, &mut function)?;
        let mut bytes = vec![0u8; table_len];
        mem.read(table, &mut bytes)?;
        let text =
            |buf: &[u8], len: usize| String::from_utf8_lossy(buf.get(..len).unwrap_or_default()).into_owned();
        let names = Arc::new(Names {
            file: text(&file, file_len),
            function: text(&function, func_len),
            firstlineno,
            table: bytes,
        });
        known.names = Some(Arc::clone(&names));
        Some(names)
    }
}
