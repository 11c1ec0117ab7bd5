//! The hot path: from a thread state to its innermost Python frames, as (code object,
//! instruction offset) pairs. A handful of dependent loads a frame; everything decoded later,
//! once per code object and offset ([`super::code`]).

use super::Frame;
use super::layout::{FRAME_OWNED_BY_CSTACK, FrameKind, Layout, NONE, OB_TYPE};
use super::memory::{Memory, plausible};

/// What a walk found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walked {
    /// Frames written to the start of `out`.
    pub count: usize,
    /// The chain was cut short by something that cannot be a live frame (a pointer out of
    /// range, a code object of another type, a loop): the frames before it are kept.
    pub broken: bool,
}

/// The most frames one walk visits per frame asked for: C-owned frames (one per entry into
/// the interpreter from C) are skipped, so a walk may visit more frames than it returns, but
/// a loop in a damaged chain must end.
const VISITS_PER_FRAME: usize = 4;
/// A code offset beyond this is a damaged pointer, not bytecode (a code object of 256 MiB).
const MAX_OFFSET: usize = 1 << 28;

/// The innermost frames of the thread whose `PyThreadState` is at `tstate`, into `out`.
/// `code_type` is the address of `PyCode_Type`: a frame's code object must have it, which
/// both skips frames that run no Python code (3.13's `f_executable` may be another object)
/// and keeps a damaged chain from being believed.
#[inline]
pub fn frames_of<M: Memory + ?Sized>(
    mem: &M,
    layout: &Layout,
    code_type: usize,
    tstate: usize,
    out: &mut [Frame],
) -> Walked {
    let is_code = |code: usize| mem.u64(code.wrapping_add(OB_TYPE)) == Some(code_type as u64);
    frames_and_entries_of(mem, layout, &is_code, tstate, out, &mut []).0
}

/// What a reader outside the process learns of a frame beside its (code, offset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// The outermost frame of its activation of the evaluation loop (the one C code called
    /// the interpreter with).
    pub outermost: bool,
    /// Where the frame is.
    pub address: usize,
}

/// [`frames_of`] for a reader outside the process (the collector's sampler), which also needs
/// the evaluation loop's activations, so that the frames can be set in place of the loop's
/// native frames of a sampled stack: `entries[i]` is about `out[i]`. `is_code` says whether an
/// address holds a code object (a reader may know many already). Also returns the thread's
/// innermost `_PyCFrame` (3.11, 3.12; 0 for the others): a local of the innermost activation,
/// on the C stack.
#[inline(always)]
pub fn frames_and_entries_of<M: Memory + ?Sized>(
    mem: &M,
    layout: &Layout,
    is_code: &impl Fn(usize) -> bool,
    tstate: usize,
    out: &mut [Frame],
    entries: &mut [Entry],
) -> (Walked, usize) {
    let mut walked = Walked { count: 0, broken: false };
    let Some(mut frame) = mem.u64(tstate.wrapping_add(layout.tstate_frame as usize)) else {
        walked.broken = true;
        return (walked, 0);
    };
    let mut cframe = 0;
    if layout.cframe_current != NONE && frame != 0 {
        cframe = frame as usize;
        match mem.u64((frame as usize).wrapping_add(layout.cframe_current as usize)) {
            Some(current) => frame = current,
            None => {
                walked.broken = true;
                return (walked, cframe);
            }
        }
    }
    let wants_entries = !entries.is_empty();
    let mut visits = out.len().saturating_mul(VISITS_PER_FRAME);
    let mut frame = frame as usize;
    while frame != 0 && walked.count < out.len() {
        let step = visit(mem, layout, is_code, frame);
        let Some((found, previous)) = step.filter(|_| visits > 0) else {
            walked.broken = true;
            break;
        };
        visits -= 1;
        match found {
            Some(found) => {
                if let Some(slot) = out.get_mut(walked.count) {
                    *slot = found;
                }
                if wants_entries && let Some(entry) = entries.get_mut(walked.count) {
                    let outermost = match layout.kind {
                        FrameKind::Object => true,
                        _ if layout.frame_is_entry != NONE => {
                            mem.u8(frame.wrapping_add(layout.frame_is_entry as usize)).unwrap_or(0) != 0
                        }
                        _ => false,
                    };
                    *entry = Entry { outermost, address: frame };
                }
                walked.count += 1;
            }
            // A C-owned frame: the Python frame before it began its activation.
            None if wants_entries => {
                if let Some(entry) = walked.count.checked_sub(1).and_then(|last| entries.get_mut(last)) {
                    entry.outermost = true;
                }
            }
            None => {}
        }
        frame = previous;
    }
    (walked, cframe)
}

/// One frame: what it holds (`None` for a frame to skip) and its caller's address; `None`
/// when it cannot be a live frame.
#[inline(always)]
fn visit<M: Memory + ?Sized>(
    mem: &M,
    layout: &Layout,
    is_code: &impl Fn(usize) -> bool,
    frame: usize,
) -> Option<(Option<Frame>, usize)> {
    if !plausible(frame) {
        return None;
    }
    let at = |offset: u32| frame.wrapping_add(offset as usize);
    let previous = mem.u64(at(layout.frame_previous))? as usize;
    if layout.frame_owner != NONE && mem.u8(at(layout.frame_owner))? == FRAME_OWNED_BY_CSTACK {
        // A frame C code pushed to call into the interpreter: no Python of its own.
        return Some((None, previous));
    }
    let code = mem.pointer(at(layout.frame_code));
    let code = match (code, code.is_some_and(is_code)) {
        (Some(code), true) => code,
        // 3.13: the executable of a frame that runs no Python code (None, or a non-code
        // object) is not a damaged chain.
        _ if layout.minor >= 13 => return Some((None, previous)),
        _ => return None,
    };
    let offset = match layout.kind {
        // An index in 2-byte code units; -1 before the first instruction.
        FrameKind::Object => (mem.u32(at(layout.frame_instr))? as i32).max(0) as usize * 2,
        FrameKind::Interpreter => {
            let instr = mem.u64(at(layout.frame_instr))? as usize;
            // 3.11/3.12 point one unit before the code while the frame has not started.
            instr.saturating_sub(code.wrapping_add(layout.code_start as usize))
        }
    };
    if offset > MAX_OFFSET {
        return None;
    }
    Some((Some(Frame { code, offset: offset as u32 }), previous))
}
