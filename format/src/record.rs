//! The fixed-size event record. The same 64 bytes travel through the ring (times in ticks of
//! the ring's clock) and are stored in `run.bin` (times converted to CLOCK_MONOTONIC ns).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// One intercepted call, or (with a `kind` at or above [`CONTROL_KIND_BASE`]) one ring control
/// record. Field meaning per function:
///
/// | function class | `fd` | `arg` | `arg2` | `extra` |
/// |---|---|---|---|---|
/// | read/write (incl. stdio) | fd | bytes asked | bytes done | – |
/// | open/creat/fopen | fd returned (or -1) | mode | path string id | open flags |
/// | close/fclose | fd | – | – | – |
/// | lseek | fd | offset asked | – | whence |
/// | fsync/fdatasync | fd | – | – | – |
/// | mmap | fd | length | prot | flags |
/// | munmap | -1 | length | – | – |
/// | clock_gettime (events mode) | -1 | – | – | clock id |
/// | ioctl | fd | request code | – | – |
///
/// `ret` is the return value (an address for mmap, items for fread/fwrite), `errno` is the
/// errno the call left when it failed, else 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Event {
    pub kind: u16,
    pub flags: u16,
    pub pid: u32,
    pub tid: u32,
    pub fd: i32,
    /// Start of the call: ring clock ticks in the ring, CLOCK_MONOTONIC ns in `run.bin`.
    pub start: u64,
    /// Duration, same unit as `start`.
    pub dur: u64,
    pub ret: i64,
    pub arg: u64,
    pub arg2: u64,
    pub errno: i32,
    pub extra: u32,
}

/// Size of every ring slot and every stored event.
pub const RECORD_BYTES: usize = 64;
const _: () = assert!(core::mem::size_of::<Event>() == RECORD_BYTES);
const _: () = assert!(core::mem::align_of::<Event>() == 8);

/// `flags` bit: the call failed (returned its error value).
pub const FLAG_ERROR: u16 = 1;

/// Kinds at or above this are ring control records, never stored as events.
pub const CONTROL_KIND_BASE: u16 = 0x8000;

/// Defines a string: `arg` = string id, `arg2` = byte length; the bytes follow in the next
/// `ceil(len / 64)` slots of the same lane, published together with this record.
pub const KIND_STRING_DEF: u16 = 0x8001;
/// A process image starts: `pid`, `arg` = ppid, `arg2` = cmdline string id (NUL-separated argv),
/// `start` = time, `extra` = [`PROC_FORKED`] / [`PROC_EXECED`] bits.
pub const KIND_PROCESS_START: u16 = 0x8002;
/// A process calls exit/_exit: `ret` = status.
pub const KIND_PROCESS_EXIT: u16 = 0x8003;

/// The process is a fork child: it inherits its parent's fd table.
pub const PROC_FORKED: u32 = 1;

/// Longest string (path, command line) the preload sends; longer ones are cut.
pub const MAX_STRING_BYTES: usize = 4096;

/// Number of slots a string of `len` bytes occupies after its definition record.
pub const fn string_payload_slots(len: usize) -> usize {
    len.div_ceil(RECORD_BYTES)
}

impl Event {
    pub fn is_error(&self) -> bool {
        self.flags & FLAG_ERROR != 0
    }
}
