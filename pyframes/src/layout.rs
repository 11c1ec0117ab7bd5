//! Where CPython keeps what the reader needs, per version: one plain struct of offsets, chosen
//! once, so the walk is the same handful of loads whatever the version (no trait object, no
//! per-call version test beyond a few always-taken branches).
//!
//! The numbers for 3.10–3.12 (and 3.13's fields that `_Py_DebugOffsets` does not carry) were
//! taken with `offsetof` from each version's own headers (`Include/cpython/*.h`,
//! `Include/internal/pycore_frame.h`, `pycore_code.h`, `pycore_runtime.h`; 3.10.13, 3.11.7,
//! 3.12.1, 3.13.0) on x86-64. aarch64 Linux has the same layouts: both are LP64 with natural
//! alignment, and none of these structures has an architecture-dependent member. The
//! structures are fixed within a minor version (they are part of what extensions built for
//! it rely on), so a table per minor version holds for every patch release; the tests read
//! live interpreters of each version through these tables.

use super::memory::Memory;

/// How a thread's innermost frame is reached and what a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// 3.10: `PyFrameObject`, `f_lasti` an index in code units (-1 before the first one).
    Object,
    /// 3.11–3.13: `_PyInterpreterFrame`, with a pointer into the code object's bytecode.
    Interpreter,
}

/// What "absent" is for an optional offset.
pub const NONE: u32 = u32::MAX;

/// The offsets of one CPython version (all in bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub major: u8,
    pub minor: u8,
    pub kind: FrameKind,
    /// `PyThreadState` → its frame pointer (3.10 `frame`, 3.11/3.12 `cframe`, 3.13
    /// `current_frame`).
    pub tstate_frame: u32,
    /// `_PyCFrame` → `current_frame` (3.11/3.12: a second hop), or [`NONE`].
    pub cframe_current: u32,
    /// `_PyCFrame` → `previous` (3.11/3.12), or [`NONE`]. A `_PyCFrame` is a local of each
    /// activation of the evaluation loop, on the C stack, so a sampled stack's copy holds the
    /// current frame each activation had when the sample was taken.
    pub cframe_previous: u32,
    /// Frame → code object (`f_code`, 3.13 `f_executable`).
    pub frame_code: u32,
    /// Frame → its caller (`f_back`, `previous`).
    pub frame_previous: u32,
    /// Frame → the instruction (3.10 `f_lasti`, an i32 index; 3.11/3.12 `prev_instr`, 3.13
    /// `instr_ptr`, pointers).
    pub frame_instr: u32,
    /// Frame → `owner` (a byte), or [`NONE`] where no frame belongs to C (3.10, 3.11).
    pub frame_owner: u32,
    /// Code object → first code unit (`co_code_adaptive`; [`NONE`] for 3.10, whose frames
    /// hold an index).
    pub code_start: u32,
    pub code_filename: u32,
    /// `co_qualname` from 3.11, `co_name` before.
    pub code_name: u32,
    /// `co_firstlineno`, an i32.
    pub code_firstlineno: u32,
    /// `co_linetable`, a bytes object (3.10's format, or PEP 657's from 3.11).
    pub code_linetable: u32,
    /// Size of `PyASCIIObject` (where a compact ASCII string's bytes start) and of
    /// `PyCompactUnicodeObject` (where other compact strings' code points start).
    pub ascii_size: u32,
    pub compact_size: u32,
    /// `_PyRuntime` → `interpreters.head`; interpreter → `threads.head`; thread → `next`:
    /// only for reading another process, which has no "this thread".
    pub runtime_interpreters: u32,
    pub interp_threads: u32,
    pub tstate_next: u32,
    /// Thread → `native_thread_id`, the kernel's tid (3.11+; [`NONE`] for 3.10): how a
    /// sampled thread finds its thread state from outside.
    pub tstate_native_thread_id: u32,
    /// Frame → `is_entry` (a bool; 3.11 only: the frame C code called into the interpreter
    /// with, the outermost of its activation of the evaluation loop). 3.12+ mark an
    /// activation with a C-owned frame instead ([`Layout::frame_owner`]), 3.10 has one
    /// activation a frame.
    pub frame_is_entry: u32,
}

/// The owner value of a frame that C code pushed to enter the interpreter (3.12+).
pub const FRAME_OWNED_BY_CSTACK: u8 = 3;
/// Fixed by `PyObject`'s head (in every version here, without `Py_TRACE_REFS`).
pub const OB_TYPE: usize = 8;
/// `PyTypeObject.tp_name`.
pub const TP_NAME: usize = 24;
/// `PyASCIIObject.length` (isize) and `.state` (the bit field: kind in bits 2–4, compact
/// bit 5, ascii bit 6, in every version here).
pub const UNICODE_LENGTH: usize = 16;
pub const UNICODE_STATE: usize = 32;
/// `PyBytesObject.ob_size` and `.ob_sval`.
pub const BYTES_SIZE: usize = 16;
pub const BYTES_DATA: usize = 32;

const fn interp(
    minor: u8,
    tstate_frame: u32,
    cframe_current: u32,
    frame: [u32; 4],
    code: [u32; 5],
) -> Layout {
    let [frame_code, frame_previous, frame_instr, frame_owner] = frame;
    let [code_start, code_filename, code_name, code_firstlineno, code_linetable] = code;
    Layout {
        major: 3,
        minor,
        kind: FrameKind::Interpreter,
        tstate_frame,
        cframe_current,
        cframe_previous: if cframe_current == NONE { NONE } else { cframe_current + 8 },
        frame_code,
        frame_previous,
        frame_instr,
        frame_owner,
        code_start,
        code_filename,
        code_name,
        code_firstlineno,
        code_linetable,
        ascii_size: 40,
        compact_size: 56,
        runtime_interpreters: 40,
        interp_threads: 72,
        tstate_next: 8,
        tstate_native_thread_id: 144,
        frame_is_entry: NONE,
    }
}

pub const V3_10: Layout = Layout {
    major: 3,
    minor: 10,
    kind: FrameKind::Object,
    tstate_frame: 24,
    cframe_current: NONE,
    cframe_previous: NONE,
    frame_code: 32,
    frame_previous: 24,
    frame_instr: 96,
    frame_owner: NONE,
    code_start: NONE,
    code_filename: 104,
    code_name: 112,
    code_firstlineno: 40,
    code_linetable: 120,
    // With `wstr` (removed in 3.12) the string heads are 8 bytes longer.
    ascii_size: 48,
    compact_size: 72,
    runtime_interpreters: 32,
    interp_threads: 8,
    tstate_next: 8,
    tstate_native_thread_id: NONE,
    frame_is_entry: NONE,
};

pub const V3_11: Layout = Layout {
    ascii_size: 48,
    compact_size: 72,
    interp_threads: 16,
    tstate_native_thread_id: 160,
    frame_is_entry: 68,
    // No C-owned frames in 3.11: an "entry" frame is a Python function called from C.
    ..interp(11, 56, 8, [32, 48, 56, NONE], [184, 112, 128, 72, 136])
};

pub const V3_12: Layout = interp(12, 56, 0, [0, 8, 56, 70], [192, 112, 128, 68, 136]);

/// 3.13 as its headers have it: what a process's `_Py_DebugOffsets` is checked against
/// (see [`from_debug_offsets`]), and the tests' synthetic images.
pub const V3_13: Layout = Layout {
    runtime_interpreters: 632,
    interp_threads: 7344,
    tstate_native_thread_id: 160,
    ..interp(13, 72, NONE, [0, 8, 56, 70], [200, 112, 128, 68, 136])
};

/// The layout for a version (3.13: as built, before its debug offsets are read).
pub fn for_version(major: u8, minor: u8) -> Option<Layout> {
    match (major, minor) {
        (3, 10) => Some(V3_10),
        (3, 11) => Some(V3_11),
        (3, 12) => Some(V3_12),
        (3, 13) => Some(V3_13),
        _ => None,
    }
}

/// Why a process's `_Py_DebugOffsets` was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugOffsetsError {
    Unreadable,
    /// No "xdebugpy" cookie at the start of `_PyRuntime`.
    Cookie,
    /// Its version is not 3.13 (3.14 reordered the structure).
    Version,
    /// A free-threaded build: its objects have another head.
    FreeThreaded,
    /// An offset that cannot be right (past the size of its structure, or one this reader
    /// relies on that differs from the headers').
    Implausible,
}

/// `_Py_DebugOffsets` as 3.13 lays it out (`Include/internal/pycore_runtime.h`): the byte
/// offset of each field used here, within the structure at the start of `_PyRuntime`.
mod debug {
    pub const VERSION: usize = 8;
    pub const FREE_THREADED: usize = 16;
    pub const INTERPRETERS_HEAD: usize = 40;
    pub const INTERP_THREADS_HEAD: usize = 72;
    pub const TSTATE_SIZE: usize = 152;
    pub const TSTATE_NEXT: usize = 168;
    pub const TSTATE_CURRENT_FRAME: usize = 184;
    pub const TSTATE_NATIVE_THREAD_ID: usize = 200;
    pub const FRAME_SIZE: usize = 224;
    pub const FRAME_PREVIOUS: usize = 232;
    pub const FRAME_EXECUTABLE: usize = 240;
    pub const FRAME_INSTR_PTR: usize = 248;
    pub const FRAME_OWNER: usize = 264;
    pub const CODE_SIZE: usize = 272;
    pub const CODE_FILENAME: usize = 280;
    pub const CODE_QUALNAME: usize = 296;
    pub const CODE_LINETABLE: usize = 304;
    pub const CODE_FIRSTLINENO: usize = 312;
    pub const CODE_ADAPTIVE: usize = 344;
    pub const OB_TYPE: usize = 360;
    pub const TP_NAME: usize = 376;
    pub const BYTES_SIZE: usize = 520;
    pub const BYTES_DATA: usize = 528;
    pub const UNICODE_STATE: usize = 544;
    pub const UNICODE_LENGTH: usize = 552;
    pub const UNICODE_ASCII_SIZE: usize = 560;
}

/// The 3.13 layout from the interpreter's own `_Py_DebugOffsets` at `runtime`
/// (`_PyRuntime`): what a 3.13 build says of itself wins over the table, so a patch release
/// that moved a field is still read right. Fields the debug offsets do not carry, or that
/// this reader takes as fixed (object and string heads), must agree with the headers.
pub fn from_debug_offsets<M: Memory + ?Sized>(mem: &M, runtime: usize) -> Result<Layout, DebugOffsetsError> {
    let field = |at: usize| mem.u64(runtime.wrapping_add(at)).ok_or(DebugOffsetsError::Unreadable);
    let mut cookie = [0u8; 8];
    mem.read(runtime, &mut cookie).ok_or(DebugOffsetsError::Unreadable)?;
    if &cookie != b"xdebugpy" {
        return Err(DebugOffsetsError::Cookie);
    }
    if field(debug::VERSION)? >> 16 != 0x030d {
        return Err(DebugOffsetsError::Version);
    }
    if field(debug::FREE_THREADED)? != 0 {
        return Err(DebugOffsetsError::FreeThreaded);
    }
    // Each offset must lie inside its structure (whose size is the first field of its group).
    let within = |size_at: usize, at: usize| -> Result<u32, DebugOffsetsError> {
        let (size, offset) = (field(size_at)?, field(at)?);
        if offset < size && size < 1 << 20 { Ok(offset as u32) } else { Err(DebugOffsetsError::Implausible) }
    };
    let fixed = [
        (debug::OB_TYPE, OB_TYPE as u64),
        (debug::TP_NAME, TP_NAME as u64),
        (debug::BYTES_SIZE, BYTES_SIZE as u64),
        (debug::BYTES_DATA, BYTES_DATA as u64),
        (debug::UNICODE_STATE, UNICODE_STATE as u64),
        (debug::UNICODE_LENGTH, UNICODE_LENGTH as u64),
        (debug::UNICODE_ASCII_SIZE, V3_13.ascii_size as u64),
    ];
    for (at, expected) in fixed {
        if field(at)? != expected {
            return Err(DebugOffsetsError::Implausible);
        }
    }
    let small = |at: usize| -> Result<u32, DebugOffsetsError> {
        let offset = field(at)?;
        if offset < 1 << 20 { Ok(offset as u32) } else { Err(DebugOffsetsError::Implausible) }
    };
    Ok(Layout {
        tstate_frame: within(debug::TSTATE_SIZE, debug::TSTATE_CURRENT_FRAME)?,
        tstate_next: within(debug::TSTATE_SIZE, debug::TSTATE_NEXT)?,
        tstate_native_thread_id: within(debug::TSTATE_SIZE, debug::TSTATE_NATIVE_THREAD_ID)?,
        frame_code: within(debug::FRAME_SIZE, debug::FRAME_EXECUTABLE)?,
        frame_previous: within(debug::FRAME_SIZE, debug::FRAME_PREVIOUS)?,
        frame_instr: within(debug::FRAME_SIZE, debug::FRAME_INSTR_PTR)?,
        frame_owner: within(debug::FRAME_SIZE, debug::FRAME_OWNER)?,
        code_filename: within(debug::CODE_SIZE, debug::CODE_FILENAME)?,
        code_name: within(debug::CODE_SIZE, debug::CODE_QUALNAME)?,
        code_linetable: within(debug::CODE_SIZE, debug::CODE_LINETABLE)?,
        code_firstlineno: within(debug::CODE_SIZE, debug::CODE_FIRSTLINENO)?,
        // The bytecode follows the fixed part, so this one equals the size, not below it.
        code_start: small(debug::CODE_ADAPTIVE)?,
        runtime_interpreters: small(debug::INTERPRETERS_HEAD)?,
        interp_threads: small(debug::INTERP_THREADS_HEAD)?,
        ..V3_13
    })
}

/// The version in `Py_Version` (3.11+: `0xMMmmppRS`).
pub fn version_from_hex(hex: u64) -> (u8, u8) {
    ((hex >> 24) as u8, (hex >> 16) as u8)
}

/// The version at the start of `Py_GetVersion()`'s text ("3.10.13 (main, ...").
pub fn version_from_text(text: &[u8]) -> Option<(u8, u8)> {
    let mut parts = text.split(|&b| !b.is_ascii_digit());
    let number = |part: Option<&[u8]>| -> Option<u8> {
        let part = part.filter(|p| !p.is_empty() && p.len() <= 3)?;
        part.iter().try_fold(0u8, |n, &d| n.checked_mul(10)?.checked_add(d - b'0'))
    };
    let major = number(parts.next())?;
    // The text must go on with ".minor".
    let rest = text.get(text.iter().position(|&b| !b.is_ascii_digit())?..)?;
    if rest.first() != Some(&b'.') {
        return None;
    }
    Some((major, number(parts.next())?))
}
