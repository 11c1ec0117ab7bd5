//! The Python frames of the calling thread, for a recorded call's site (issue 36): read from
//! the thread's own interpreter state at call time, with no GIL and no call into Python. The
//! hook runs on the thread that owns those frames, in C code that Python called (a builtin
//! such as `os.stat`, an extension's reads), so the chain cannot change while it is read, and
//! its innermost Python frame is the line that called into C.
//!
//! CPython 3.10–3.13 ([`layout`]: one struct of offsets a version, 3.13's from the
//! interpreter's own `_Py_DebugOffsets`). Use:
//!
//! - [`discover`] (cold) at start-up and after each `dlopen` that loaded something: finds the
//!   interpreter, if any; until then [`frames`] finds nothing;
//! - [`frames`] (hot) on each recorded call: (code object, instruction offset) pairs;
//! - [`describe`] (cold) once per pair: file, function, line; [`identity`] (hot) on a cache
//!   hit, since a freed code object's address may come back as another one.
//!
//! Never hurts the job: anything that does not look like a live frame ends the walk (what was
//! read before it is kept, and [`broken`] counts it); an unknown version or build makes the
//! reader unavailable ([`status`] says why).

mod discover;

// The reader itself is its own crate, shared with the collector (which reads sampled threads'
// frames from outside); this module is its in-process use: finding the interpreter through
// the loader, and the calling thread's own thread state.
pub use mlprof_pyframes::{Described, Frame, code, layout, linetable, memory, walk};

#[cfg(test)]
mod tests;

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use discover::Interpreter;
use memory::{Checked, Direct, Memory};

/// Why the reader is unavailable in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Reason {
    /// A Python other than 3.10–3.13.
    UnknownVersion = 1,
    /// The interpreter lacks a symbol the reader needs.
    MissingSymbol = 2,
    /// Its type objects are not where this build's layout says (a `Py_TRACE_REFS` build).
    UnexpectedLayout = 3,
    /// A free-threaded build (3.13t).
    FreeThreaded = 4,
    /// 3.13's `_Py_DebugOffsets` missing or implausible.
    DebugOffsets = 5,
}

/// Where the reader stands in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// No interpreter found (yet: a later [`discover`] may find one).
    NotFound,
    Ready {
        major: u8,
        minor: u8,
    },
    Unavailable(Reason),
}

const NOT_FOUND: u8 = 0;
const LOOKING: u8 = 1;
const READY: u8 = 2;
const UNAVAILABLE: u8 = 3;

/// `STATE` is the only synchronization: `INTERPRETER` is written once, by the thread that
/// moved `STATE` to `LOOKING`, before it publishes `READY` (release); readers read it only
/// after seeing `READY` (acquire), and nothing writes it again.
static STATE: AtomicU8 = AtomicU8::new(NOT_FOUND);
static REASON: AtomicU8 = AtomicU8::new(0);
static INTERPRETER: Slot = Slot(UnsafeCell::new(MaybeUninit::uninit()));
/// Walks and descriptions that met something that was not a live frame or code object.
static BROKEN: AtomicU64 = AtomicU64::new(0);

struct Slot(UnsafeCell<MaybeUninit<Interpreter>>);

// Safety: written once before `READY` is published, only read after (see `STATE`).
unsafe impl Sync for Slot {}

/// Looks for the interpreter unless it was found (or found unreadable) before: cheap then.
/// Call it at start-up and after a `dlopen` (an embedding application may load Python late).
/// It calls `dlsym` and `dlopen(RTLD_NOLOAD)`: not from a signal handler, and with the
/// caller's hooks passing those through.
#[cold]
pub fn discover() -> Status {
    if STATE.compare_exchange(NOT_FOUND, LOOKING, Ordering::Acquire, Ordering::Acquire).is_ok() {
        match discover::find() {
            Ok(found) => {
                // Safety: only the thread that moved STATE to LOOKING writes, and no reader
                // reads before READY is published below.
                unsafe { (*INTERPRETER.0.get()).write(found) };
                STATE.store(READY, Ordering::Release);
            }
            Err(Some(reason)) => {
                REASON.store(reason as u8, Ordering::Relaxed);
                STATE.store(UNAVAILABLE, Ordering::Release);
            }
            Err(None) => STATE.store(NOT_FOUND, Ordering::Release),
        }
    }
    status()
}

/// Where the reader stands (another thread may be looking: that reads as not found yet).
pub fn status() -> Status {
    match STATE.load(Ordering::Acquire) {
        READY => match interpreter() {
            Some(found) => Status::Ready { major: found.layout.major, minor: found.layout.minor },
            None => Status::NotFound,
        },
        UNAVAILABLE => Status::Unavailable(match REASON.load(Ordering::Relaxed) {
            1 => Reason::UnknownVersion,
            2 => Reason::MissingSymbol,
            3 => Reason::UnexpectedLayout,
            4 => Reason::FreeThreaded,
            _ => Reason::DebugOffsets,
        }),
        _ => Status::NotFound,
    }
}

#[inline(always)]
fn interpreter() -> Option<&'static Interpreter> {
    if STATE.load(Ordering::Acquire) != READY {
        return None;
    }
    // Safety: READY is published only after the slot was written, and it is never written
    // again (see `STATE`).
    Some(unsafe { (*INTERPRETER.0.get()).assume_init_ref() })
}

/// The calling thread's innermost Python frames into `out` (innermost first), skipping frames
/// that run no Python code; how many. 0 when the thread runs no Python (or no interpreter was
/// discovered). No allocation, lock or system call.
#[inline]
pub fn frames(out: &mut [Frame]) -> usize {
    let Some(found) = interpreter() else { return 0 };
    type ThisThreadState = unsafe extern "C" fn() -> usize;
    // Safety: `PyGILState_GetThisThreadState` of this interpreter: no arguments, returns a
    // pointer (null for a thread Python does not know), needs neither the GIL nor any lock.
    let tstate = unsafe { crate::real::as_fn::<ThisThreadState>(found.this_thread_state)() };
    if tstate == 0 {
        return 0;
    }
    let walked = walk::frames_of(&Direct, &found.layout, found.types.code, tstate, out);
    if walked.broken {
        BROKEN.fetch_add(1, Ordering::Relaxed);
    }
    walked.count
}

/// What `code` is now, to compare with the value stored when a (code, offset) pair was
/// described: a different value means the address now holds another object (0: no code
/// object at all). A few loads from one object; what [`frames`] returned is safe to pass.
#[inline]
pub fn identity(code: usize) -> u64 {
    match interpreter() {
        Some(found) => code::identity(&Direct, &found.layout, found.types.code, code),
        None => 0,
    }
}

/// File, function and line of `frame` into the buffers given (cold: a few system calls,
/// since every read here is a checked copy that cannot fault). `None` when the reader is not
/// ready or the code object cannot be read (counted in [`broken`]).
#[cold]
pub fn describe(frame: Frame, file: &mut [u8], func: &mut [u8]) -> Option<Described> {
    let found = interpreter()?;
    let checked = Checked::new(crate::sys::getpid() as libc::pid_t);
    let mem: &dyn Memory = match &checked {
        Some(checked) => checked,
        None => &Direct,
    };
    let described = code::describe(mem, &found.layout, &found.types, frame.code, frame.offset, file, func);
    if described.is_none() {
        BROKEN.fetch_add(1, Ordering::Relaxed);
    }
    described
}

/// How many walks and descriptions met something that was not a live frame or code object
/// (a frame being torn down, a damaged pointer): no site, counted here.
pub fn broken() -> u64 {
    BROKEN.load(Ordering::Relaxed)
}
