//! mlprof's trace writers: what a timeline format must take to show a run, and two formats
//! that take it. The crate knows nothing of runs (it depends on no crate of mlprof's but
//! `mlprof-filewrite`); `mlprof-report`'s converter is written once against its interface.
//!
//! * [`TraceWriter`]: the interface, with typed handles for what it declares:
//!   [`ProcessHandle`], [`ThreadHandle`], [`CounterHandle`], [`StringHandle`] for interned
//!   names, categories and repeated argument values, and [`ModuleHandle`], [`FrameHandle`],
//!   [`StackHandle`] for the code that CPU samples ran.
//! * [`perfetto::PerfettoWriter`]: Perfetto's native protobuf (TrackEvent packets), to any
//!   [`perfetto::TraceOutput`] (a file written on a thread of its own, a `Vec<u8>`).
//! * [`chrome::ChromeWriter`]: Chrome's trace event JSON, to any `Write`.
//!
//! ```
//! use mlprof_trace::chrome::ChromeWriter;
//! use mlprof_trace::{ArgList, ArgShape, ArgValue, Slice, TraceWriter};
//!
//! let mut writer = ChromeWriter::new(Vec::new(), 1_000)?;
//! let process = writer.process(42, Some("train"))?;
//! let thread = writer.thread(process, 43, None)?;
//! let (name, category) = (writer.intern("read"), writer.intern("io"));
//! let mut args = ArgList::<2>::new();
//! args.push("fd", ArgValue::Int(3));
//! let read = Slice {
//!     start_ns: 3_000,
//!     dur_ns: 1_500,
//!     name,
//!     category,
//!     args: args.as_slice(),
//!     shape: ArgShape::NONE,
//!     outermost: true,
//! };
//! writer.slice(thread, &read)?;
//! let json = String::from_utf8(writer.finish()?).unwrap();
//! assert!(json.contains(r#""ph":"X","name":"read","cat":"io","pid":42,"tid":43,"ts":2.000,"dur":1.500"#));
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! The model follows both formats' common ground:
//!
//! * **Processes** and **threads** are declared once and referred to by typed handles.
//! * **Slices** (an interval on a thread), **instants** (a point on a thread) and **flows** (an
//!   arrow from one slice to another, possibly in another process) carry a name and a category,
//!   interned as [`StringHandle`]s because the same few strings repeat on millions of events,
//!   and arguments.
//! * **Counters** are tracks of values over time, belonging to a process.
//! * **CPU samples** are points on a thread, each with the stack it was running: stacks are
//!   declared once (frames in files of native code, [`CodeFrame`]) and named by handles, as
//!   the same few stacks repeat on thousands of samples. Chrome JSON writes none (Perfetto
//!   reads no stacks from JSON).
//!
//! Arguments are a borrowed slice of `(key, value)` pairs, so a caller builds them on the
//! stack ([`ArgList`]) and no event allocates. Times are ns on the run's clock; each writer
//! chooses its origin. Writers stream: a handle's table lives as long as the writer, events
//! go out as they come.

#![deny(missing_docs)]

pub mod chrome;
pub mod perfetto;
mod proto;

use std::io;
use std::mem::MaybeUninit;

/// A process track. Handles are minted by one writer and mean nothing to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessHandle(u32);

/// A thread track, inside a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ThreadHandle(u32);

/// A counter track, inside a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CounterHandle(u32);

/// An interned string: an event name, a category, a repeated argument value (a path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StringHandle(u32);

macro_rules! handle_index {
    ($($handle:ident),*) => {$(
        impl $handle {
            /// For writers: the handle of entry `index` of the writer's own table.
            pub fn from_index(index: usize) -> Self {
                $handle(u32::try_from(index).expect("fewer than 2^32 tracks and strings"))
            }
            /// For writers: the entry of the writer's table this handle names.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    )*};
}
/// A file of native code that frames of sampled stacks lie in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModuleHandle(u32);

/// A frame of a sampled stack ([`CodeFrame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameHandle(u32);

/// A sampled stack: frames, leaf first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StackHandle(u32);

handle_index!(
    ProcessHandle,
    ThreadHandle,
    CounterHandle,
    StringHandle,
    ModuleHandle,
    FrameHandle,
    StackHandle
);

/// An argument's value. Variants map onto Perfetto's debug annotations (int, uint, double,
/// bool, string, pointer, array) and onto JSON.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgValue<'a> {
    /// A signed integer (an fd, a return value).
    Int(i64),
    /// An unsigned integer (a size, an offset).
    UInt(u64),
    /// A fractional number.
    Double(f64),
    /// A flag.
    Bool(bool),
    /// A string given for this event only.
    Str(&'a str),
    /// A string interned with [`TraceWriter::intern`] (one that repeats, like a path).
    Interned(StringHandle),
    /// An address, handle or request code: shown in hex (`"0x7f00"` in JSON).
    Hex(u64),
    /// A small array of numbers (grid and block dimensions).
    UInts(&'a [u64]),
}

/// Arguments of an event: `(key, value)`. Keys are identifiers (letters, digits, `_`).
pub type Args<'a> = &'a [(&'static str, ArgValue<'a>)];

/// A promise about a slice's arguments, which lets a writer reuse what it learned from an
/// earlier slice instead of looking at each key: every slice given with the same name,
/// category and non-zero shape has the same keys in the same order, each value of the same
/// variant (an `Int` where it had an `Int`). [`ArgShape::NONE`] promises nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgShape(pub u32);

impl ArgShape {
    /// No promise: the writer looks at every key of the slice.
    pub const NONE: ArgShape = ArgShape(0);
}

/// An interval on a thread.
#[derive(Debug, Clone, Copy)]
pub struct Slice<'a> {
    /// Start, in ns on the run's clock.
    pub start_ns: u64,
    /// Duration in ns.
    pub dur_ns: u64,
    /// The slice's name (a function, a task).
    pub name: StringHandle,
    /// Its category (an API, an ITT domain).
    pub category: StringHandle,
    /// Its arguments.
    pub args: Args<'a>,
    /// What [`Slice::args`] are like (see [`ArgShape`]).
    pub shape: ArgShape,
    /// No slice of this thread given after this one can enclose it (an outermost ITT task, any
    /// call of a thread without spans). Writers that must emit a thread's slices in time
    /// order (Perfetto's BEGIN/END) hold slices back until such a slice comes; the others
    /// ignore it.
    pub outermost: bool,
}

/// A point in time on a thread.
#[derive(Debug, Clone, Copy)]
pub struct Instant<'a> {
    /// When, in ns on the run's clock.
    pub time_ns: u64,
    /// The instant's name (a marker).
    pub name: StringHandle,
    /// Its category.
    pub category: StringHandle,
    /// Its arguments.
    pub args: Args<'a>,
}

/// One end of an arrow between two slices; both ends carry the same `id`.
#[derive(Debug, Clone, Copy)]
pub struct Flow<'a> {
    /// Unique per arrow over the whole trace (53 bits keep it exact as a JSON number).
    pub id: u64,
    /// The arrow's name. Perfetto's flows are bare ids: name, category and arguments show
    /// in Chrome JSON only.
    pub name: StringHandle,
    /// Its category.
    pub category: StringHandle,
    /// Its arguments.
    pub args: Args<'a>,
}

/// What a counter's values are: the name of the series (Chrome shows it as the value's key,
/// Perfetto as the unit) and, for fractional values, the decimals the source is good for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterUnit {
    /// The series' name or unit (`"W"`, `"calls"`).
    pub name: &'static str,
    /// Decimals of [`CounterValue::Double`] values (text formats print exactly these).
    pub decimals: u8,
}

/// A counter's value from a point in time on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CounterValue {
    /// A signed integer value.
    Int(i64),
    /// An unsigned integer value (a count).
    UInt(u64),
    /// A fractional value, good for [`CounterUnit::decimals`] decimals.
    Double(f64),
}

/// A frame of a sampled stack: an address in a file of native code, or in none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeFrame<'a> {
    /// The file the address lies in (`None`: none, as JIT code; `offset` is then the address).
    pub module: Option<ModuleHandle>,
    /// The address's offset in the module's file.
    pub offset: u64,
    /// The function that holds it, when the file's symbols name it.
    pub function: Option<&'a str>,
}

/// A timeline output format. Calls must come in this order: a track is declared before its
/// first event. Errors are I/O errors of the output.
pub trait TraceWriter {
    /// What [`TraceWriter::finish`] gives back (the output stream, for in-memory writers).
    type Output;

    /// Interns `text`; the handle stays valid for the writer's life. The writer does not look
    /// for an earlier copy: callers keep their own map from what they name to handles.
    fn intern(&mut self, text: &str) -> StringHandle;

    /// Declares process `pid`, named `name` when known. Declaring a pid again with a name
    /// renames it.
    fn process(&mut self, pid: u32, name: Option<&str>) -> io::Result<ProcessHandle>;

    /// Declares thread `tid` of `process`, named `name` when known.
    fn thread(&mut self, process: ProcessHandle, tid: u32, name: Option<&str>) -> io::Result<ThreadHandle>;

    /// Declares a counter track of `process`.
    fn counter_track(
        &mut self,
        process: ProcessHandle,
        name: &str,
        unit: CounterUnit,
    ) -> io::Result<CounterHandle>;

    /// An interval on `thread` (see [`Slice::outermost`] for what a writer may hold back).
    fn slice(&mut self, thread: ThreadHandle, slice: &Slice<'_>) -> io::Result<()>;

    /// A point in time on `thread`.
    fn instant(&mut self, thread: ThreadHandle, instant: &Instant<'_>) -> io::Result<()>;

    /// The value of a counter from `time_ns` on.
    fn counter(&mut self, track: CounterHandle, time_ns: u64, value: CounterValue) -> io::Result<()>;

    /// The arrow's tail, inside the slice of `thread` that encloses `time_ns`. Called right
    /// after that slice, so a writer that attaches flows to slices (Perfetto's `flow_ids`) can
    /// hold back the one slice before.
    fn flow_begin(&mut self, thread: ThreadHandle, time_ns: u64, flow: &Flow<'_>) -> io::Result<()>;

    /// The arrow's head, bound to the slice of `thread` that encloses `time_ns`; called right
    /// after that slice, like [`TraceWriter::flow_begin`].
    fn flow_end(&mut self, thread: ThreadHandle, time_ns: u64, flow: &Flow<'_>) -> io::Result<()>;

    /// Declares a file of native code: its path and its GNU build id (empty: none). Like
    /// [`TraceWriter::intern`], declaring writes nothing and the caller keeps the handles.
    fn code_module(&mut self, path: &str, build_id: &[u8]) -> ModuleHandle;

    /// Declares a frame of sampled stacks.
    fn code_frame(&mut self, frame: &CodeFrame<'_>) -> FrameHandle;

    /// Declares a stack: `frames` leaf first.
    fn stack(&mut self, frames: &[FrameHandle]) -> StackHandle;

    /// A CPU sample: `thread` was running `stack` (`None`: not unwound) at `time_ns`.
    /// Samples of a thread may come in any order.
    fn sample(&mut self, thread: ThreadHandle, time_ns: u64, stack: Option<StackHandle>) -> io::Result<()>;

    /// Completes the output (closing brackets, trailing packets) and flushes it.
    fn finish(self) -> io::Result<Self::Output>
    where
        Self: Sized;
}

/// Arguments built on the stack: up to `N` pairs, no allocation. The slots are left
/// uninitialized until pushed: a call's list is built once per event, and most use few of
/// their slots.
pub struct ArgList<'a, const N: usize> {
    items: [MaybeUninit<(&'static str, ArgValue<'a>)>; N],
    len: usize,
}

impl<'a, const N: usize> ArgList<'a, N> {
    /// An empty list.
    pub fn new() -> Self {
        ArgList { items: [const { MaybeUninit::uninit() }; N], len: 0 }
    }

    /// Adds a pair. More than `N` is a bug in the caller, and panics.
    #[inline]
    pub fn push(&mut self, key: &'static str, value: ArgValue<'a>) {
        self.items[self.len].write((key, value));
        self.len += 1;
    }

    /// The pairs pushed so far, in order: the [`Args`] of an event.
    pub fn as_slice(&self) -> Args<'_> {
        let initialized = &self.items[..self.len];
        // Safety: `push` wrote each of the first `len` slots (and nothing ever un-writes one);
        // MaybeUninit<T> has the layout of T, so the prefix is a valid [T] of `len` elements.
        unsafe { std::slice::from_raw_parts(initialized.as_ptr().cast(), initialized.len()) }
    }
}

impl<const N: usize> Default for ArgList<'_, N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arg_list_gives_back_what_was_pushed() {
        let mut args = ArgList::<4>::new();
        assert!(args.as_slice().is_empty());
        args.push("fd", ArgValue::Int(3));
        args.push("path", ArgValue::Str("/data"));
        assert_eq!(args.as_slice(), &[("fd", ArgValue::Int(3)), ("path", ArgValue::Str("/data"))]);
    }
}
