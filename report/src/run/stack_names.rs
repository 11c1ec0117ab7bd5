//! Frames of sampled stacks ([`mlprof_format::sample`]) named: the function that holds each
//! (from its module's symbol tables, through [`mlprof_symbols`]) and its module's file name,
//! each distinct frame looked up once. The clients that write samples out (`convert`,
//! `export`) share it, so a frame reads the same in a trace and in a table.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use mlprof_format::sample::{NO_MODULE, PYTHON_MODULE, StackFrame};
use mlprof_symbols::Symbolizer;

use super::RunMeta;

/// A frame, named as far as the symbols go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FrameName {
    /// The function, when the module's symbol tables name it.
    pub(crate) function: Option<Rc<str>>,
    /// The module's file name (`libc.so.6`), a Python frame's file as its code object names
    /// it; `None` for an address in no module.
    pub(crate) module: Option<Rc<str>>,
}

impl FrameName {
    /// The function, or where the frame is when no symbol names it: `FILE+0xOFFSET`, or the
    /// address `0xADDRESS` outside any module (as `mlprof hotspots` shows them).
    pub(crate) fn label(&self, frame: StackFrame) -> String {
        match (&self.function, &self.module) {
            (Some(function), _) => function.to_string(),
            (None, Some(module)) => format!("{module}+0x{:x}", frame.offset),
            (None, None) => format!("0x{:x}", frame.offset),
        }
    }
}

/// Names frames, each once.
#[derive(Default)]
pub(crate) struct StackNames {
    symbolizer: Symbolizer,
    /// By frame and whether it is a return address.
    frames: HashMap<(StackFrame, bool), FrameName>,
    /// Module file names, by module id.
    modules: HashMap<u32, Rc<str>>,
}

impl StackNames {
    /// The frames of the run's stack `id`, leaf first: each frame's label
    /// ([`FrameName::label`]) and module file name (empty for none, or an unknown stack).
    pub(crate) fn labels(&mut self, meta: &RunMeta, id: u32) -> Vec<(String, Option<Rc<str>>)> {
        let Some(stack) = meta.stacks.get(&id) else { return Vec::new() };
        let mut out = Vec::with_capacity(stack.frames.len());
        for (at, &frame) in stack.frames.iter().enumerate() {
            let name = self.frame(meta, frame, at > 0);
            out.push((name.label(frame), name.module.clone()));
        }
        out
    }

    /// Frame `frame` of a stack of `meta`; `returns`: it is a return address (every frame but
    /// the leaf), which may lie one past the end of the calling function (a call that is its
    /// last instruction), so the function looked up is the one holding the byte before it.
    pub(crate) fn frame(&mut self, meta: &RunMeta, frame: StackFrame, returns: bool) -> &FrameName {
        let StackNames { symbolizer, frames, modules } = self;
        frames.entry((frame, returns)).or_insert_with(|| {
            if frame.module == PYTHON_MODULE {
                return python_frame(meta, frame.offset);
            }
            let Some(info) = meta.modules.get(&frame.module).filter(|_| frame.module != NO_MODULE) else {
                return FrameName::default();
            };
            let module = modules.entry(frame.module).or_insert_with(|| {
                let path = Path::new(&info.path);
                path.file_name().map_or_else(|| info.path.as_str().into(), |f| f.to_string_lossy().into())
            });
            let offset = frame.offset.saturating_sub(u64::from(returns));
            let function = symbolizer.function_at_offset(Path::new(&info.path), offset).map(Rc::from);
            FrameName { function, module: Some(module.clone()) }
        })
    }
}

/// A Python frame of the run: `function (file.py:line)`, as py-spy names it, in its file.
fn python_frame(meta: &RunMeta, id: u64) -> FrameName {
    let Some(info) = u32::try_from(id).ok().and_then(|id| meta.python_frames.get(&id)) else {
        return FrameName::default();
    };
    let file = Path::new(&info.file).file_name().map_or(info.file.as_str().into(), |f| f.to_string_lossy());
    let function = match info.line {
        0 => format!("{} ({file})", info.function),
        line => format!("{} ({file}:{line})", info.function),
    };
    FrameName { function: Some(function.into()), module: Some(info.file.as_str().into()) }
}
