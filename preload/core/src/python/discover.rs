//! Finding the interpreter loaded in this process (cold: once a process, and again when a
//! `dlopen` may have brought one in): its version, and from it the layout; the function that
//! gives a thread its own thread state; the type objects the reader checks against.
//!
//! Symbols are looked up through the loader with glibc's own `dlsym` (not the library's hook):
//! first in the global scope (a `python` executable exports them, as does a libpython loaded
//! globally), then in a libpython that some embedding application loaded `RTLD_LOCAL`.

use core::ffi::{CStr, c_char, c_void};

use super::Reason;
use super::code::Types;
use super::layout::{self, Layout, TP_NAME};
use super::memory::{Checked, Direct, Memory};

/// What the walk needs of this process's interpreter.
#[derive(Clone, Copy, Debug)]
pub struct Interpreter {
    pub layout: Layout,
    /// `PyGILState_GetThisThreadState`: the calling thread's own thread state, from a
    /// thread-specific key (no GIL, no lock, no allocation, in every version here). Unlike
    /// `PyThreadState_Get` it still answers while the thread has released the GIL, which is
    /// when blocking I/O runs.
    pub this_thread_state: usize,
    pub types: Types,
}

/// The libraries an embedding application may have loaded privately, newest first.
const LIBRARIES: [&CStr; 4] =
    [c"libpython3.13.so.1.0", c"libpython3.12.so.1.0", c"libpython3.11.so.1.0", c"libpython3.10.so.1.0"];

/// Where symbols are looked up: the global scope, or one library's handle.
#[derive(Clone, Copy)]
struct Scope(*mut c_void);

impl Scope {
    fn symbol(self, name: &CStr) -> usize {
        // Safety: a pseudo-handle or a handle we keep open, and a NUL-terminated name.
        unsafe { crate::real::glibc_dlsym(self.0, name.as_ptr()) as usize }
    }
}

/// The interpreter, or why it cannot be read; `Err(None)` when there is none (yet).
#[cold]
pub fn find() -> Result<Interpreter, Option<Reason>> {
    let mut scope = Scope(libc::RTLD_DEFAULT);
    if scope.symbol(c"PyCode_Type") == 0 {
        scope = LIBRARIES.iter().find_map(|name| loaded(name)).ok_or(None)?;
    }
    let symbol = |name: &CStr| match scope.symbol(name) {
        0 => Err(Some(Reason::MissingSymbol)),
        addr => Ok(addr),
    };
    let types = Types {
        code: symbol(c"PyCode_Type")?,
        unicode: symbol(c"PyUnicode_Type")?,
        bytes: symbol(c"PyBytes_Type")?,
    };
    let this_thread_state = symbol(c"PyGILState_GetThisThreadState")?;
    let (major, minor) = version(scope)?;
    let mut layout = layout::for_version(major, minor).ok_or(Some(Reason::UnknownVersion))?;
    // Our own reads of the interpreter's statics cannot fault, and are rare: checked ones where
    // the system allows them.
    let checked = Checked::new(crate::sys::getpid() as libc::pid_t);
    let mem: &dyn Memory = match &checked {
        Some(checked) => checked,
        None => &Direct,
    };
    if minor >= 13 {
        layout = layout::from_debug_offsets(mem, symbol(c"_PyRuntime")?).map_err(|error| {
            Some(match error {
                layout::DebugOffsetsError::FreeThreaded => Reason::FreeThreaded,
                _ => Reason::DebugOffsets,
            })
        })?;
    }
    // The type objects must be what they say: a build whose objects have another head
    // (`Py_TRACE_REFS`, free-threaded) fails here rather than being misread.
    let named = |ty: usize, name: &[u8]| -> bool {
        let mut buf = [0u8; 8];
        let Some(text) = mem.pointer(ty + TP_NAME) else { return false };
        mem.read(text, buf.get_mut(..name.len() + 1).unwrap_or_default()).is_some()
            && buf.get(..name.len()) == Some(name)
            && buf.get(name.len()) == Some(&0)
    };
    if !(named(types.code, b"code") && named(types.unicode, b"str") && named(types.bytes, b"bytes")) {
        return Err(Some(Reason::UnexpectedLayout));
    }
    Ok(Interpreter { layout, this_thread_state, types })
}

/// The handle of `name` if it is loaded already. The reference it takes is kept: the
/// interpreter's code must stay mapped for as long as we may read its structures.
fn loaded(name: &CStr) -> Option<Scope> {
    // Safety: RTLD_NOLOAD loads nothing; it only finds a library that is in the process.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    (!handle.is_null()).then_some(Scope(handle))
}

/// The version: `Py_Version` from 3.11, the text of `Py_GetVersion()` before.
fn version(scope: Scope) -> Result<(u8, u8), Option<Reason>> {
    let hex = scope.symbol(c"Py_Version");
    if hex != 0 {
        let value = Checked::new(crate::sys::getpid() as libc::pid_t)
            .and_then(|mem| mem.u64(hex))
            .or_else(|| Direct.u64(hex));
        return value.map(layout::version_from_hex).ok_or(Some(Reason::UnknownVersion));
    }
    let text = scope.symbol(c"Py_GetVersion");
    if text == 0 {
        return Err(Some(Reason::MissingSymbol));
    }
    type GetVersion = unsafe extern "C" fn() -> *const c_char;
    // Safety: `Py_GetVersion` takes nothing and returns a NUL-terminated static string; it
    // formats constants and needs no interpreter state.
    let text = unsafe { crate::real::as_fn::<GetVersion>(text)() };
    if text.is_null() {
        return Err(Some(Reason::UnknownVersion));
    }
    // Safety: as above.
    let text = unsafe { CStr::from_ptr(text) }.to_bytes();
    layout::version_from_text(text).ok_or(Some(Reason::UnknownVersion))
}
