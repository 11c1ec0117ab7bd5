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
/// | ioctl, isatty/tcgetattr | fd | request code (`TCGETS` for isatty/tcgetattr) | – | – |
/// | stat family, access | fd asked about, `*at` dir fd, `AT_FDCWD` or -1 | mask, mode or version | path string id (0: by fd) | flags |
/// | opendir | dir fd | – | path string id | – |
/// | readdir, getdents64, fdopendir | dir fd | bytes asked (getdents64) | – | 1: a `getdents64` refill |
/// | closedir | dir fd | – | – | – |
/// | mkdir, rmdir, unlink, rename, `*at` | `*at` dir fd or -1 | mode or flags | path string id (source of a rename) | – |
/// | dup, dup2, dup3, fcntl | fd asked about | target fd or fcntl argument | – | fcntl command / dup3 flags |
/// | ftruncate, fallocate, fadvise, sync_file_range | fd | offset (length for ftruncate) | length | mode, advice or flags |
/// | sendfile, copy_file_range | destination fd | bytes asked | bytes done | source fd |
/// | dlopen, dlclose | -1 | mode / handle | path string id (dlopen) | 1: passed on untimed |
/// | trapped system call | first argument | first argument | second argument | system call number |
///
/// `ret` is the return value (an address for mmap, items for fread/fwrite), `errno` is the
/// errno the call left when it failed, else 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Event {
    /// The function id ([`crate::func::Func`] as `u16`), or a control kind
    /// (≥ [`CONTROL_KIND_BASE`]) in the ring.
    pub kind: u16,
    /// [`FLAG_ERROR`], [`FLAG_NESTED`] bits.
    pub flags: u16,
    /// Process id; the collector overwrites it with the lane owner's before storing.
    pub pid: u32,
    /// Kernel thread id; the collector overwrites it with the lane owner's before storing.
    pub tid: u32,
    /// The file descriptor the call worked on (-1 when none), per the table above.
    pub fd: i32,
    /// Start of the call: ring clock ticks in the ring, CLOCK_MONOTONIC ns in `run.bin`.
    pub start: u64,
    /// Duration, same unit as `start`.
    pub dur: u64,
    /// The call's return value (an address for mmap, items for fread/fwrite).
    pub ret: i64,
    /// First argument word, per the table above (bytes asked, mode, offset, length…).
    pub arg: u64,
    /// Second argument word, per the table above (bytes done, path string id, prot…).
    pub arg2: u64,
    /// The errno the call left when it failed, else 0.
    pub errno: i32,
    /// Flags word, per the table above (open flags, whence, mmap flags, clock id).
    pub extra: u32,
}

/// Size of every ring slot and every stored event.
pub const RECORD_BYTES: usize = 64;
const _: () = assert!(core::mem::size_of::<Event>() == RECORD_BYTES);
const _: () = assert!(core::mem::align_of::<Event>() == 8);

/// `flags` bit: the call failed (returned its error value).
pub const FLAG_ERROR: u16 = 1;
/// `flags` bit: a GPU API call (launch, copy, memset) whose CUPTI correlation id was known
/// (format 1.5): in the ring its `tid` carries that id, and the collector stores it as an
/// [`crate::gpu::ACTIVITY_LINK`] record beside the GPU activities, then names the call by its
/// thread as usual.
pub const FLAG_CORRELATED: u16 = 4;
/// `flags` bit: a driver call made from inside a recorded runtime call (e.g. the
/// `cuLaunchKernel` behind a `cudaLaunchKernel`); reports leave it out of host-time totals.
pub const FLAG_NESTED: u16 = 2;

/// The layout of GPU API records (CUDA runtime, CUDA driver, NCCL): the same 64 bytes as
/// [`Event`], with the fields a GPU call needs. Convert with [`GpuCall::from_event`] and
/// [`GpuCall::into_event`].
///
/// | class | `aux` | `arg` | `stream` | `object` |
/// |---|---|---|---|---|
/// | launch | block dims (x \| y<<11 \| z<<22) | grid dims (x \| y<<32 \| z<<48) | stream | kernel function handle |
/// | copy | direction ([`COPY_H2H`]…[`COPY_DEFAULT`]) | bytes | stream | – |
/// | memset | – | bytes | stream | – |
/// | alloc | – | bytes | stream (async) | pointer returned |
/// | free | – | – | stream (async) | pointer freed |
/// | sync / event / graph | – | – | stream | event, graph or 0 |
/// | set device | – | device | – | – |
/// | collective | datatype \| op<<8 \| peer or root<<16 (op 0xff: none) | count | stream | communicator |
/// | comm | rank | ranks | – | communicator |
///
/// `status` is the cudaError_t / CUresult / ncclResult_t returned; `device` the thread's current
/// device as last set through cudaSetDevice (0 until then).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GpuCall {
    /// The function id, as in [`Event::kind`].
    pub kind: u16,
    /// As [`Event::flags`]; [`FLAG_NESTED`] marks driver calls inside runtime calls.
    pub flags: u16,
    /// As [`Event::pid`].
    pub pid: u32,
    /// As [`Event::tid`].
    pub tid: u32,
    /// The thread's current device (0 until cudaSetDevice is seen); in `Event::fd`'s place.
    pub device: i32,
    /// As [`Event::start`]: ring ticks in the ring, CLOCK_MONOTONIC ns in `run.bin`.
    pub start: u64,
    /// As [`Event::dur`], same unit as `start`.
    pub dur: u64,
    /// The cudaError_t / CUresult / ncclResult_t the call returned (0: success).
    pub status: i32,
    /// Per class (table above): block dims, copy direction, collective parameters, rank.
    pub aux: u32,
    /// Per class (table above): grid dims, bytes, count, device, ranks.
    pub arg: u64,
    /// The CUDA stream handle (0: the default stream), where the call takes one.
    pub stream: u64,
    /// Per class (table above): kernel function handle, pointer, event, graph, communicator.
    pub object: u64,
}
const _: () = assert!(core::mem::size_of::<GpuCall>() == RECORD_BYTES);
const _: () = assert!(core::mem::offset_of!(GpuCall, start) == core::mem::offset_of!(Event, start));
const _: () = assert!(core::mem::offset_of!(GpuCall, dur) == core::mem::offset_of!(Event, dur));
const _: () = assert!(core::mem::offset_of!(GpuCall, device) == core::mem::offset_of!(Event, fd));

impl GpuCall {
    /// The same 64 bytes read as a GPU call (no check of `kind`).
    pub fn from_event(event: &Event) -> GpuCall {
        zerocopy::transmute!(*event)
    }

    /// The same 64 bytes as an [`Event`], for the ring and `run.bin`.
    pub fn into_event(self) -> Event {
        zerocopy::transmute!(self)
    }

    /// (x, y, z) grid dimensions of a launch.
    pub fn grid(&self) -> (u32, u32, u32) {
        (self.arg as u32, (self.arg >> 32) as u16 as u32, (self.arg >> 48) as u16 as u32)
    }

    /// (x, y, z) block dimensions of a launch.
    pub fn block(&self) -> (u32, u32, u32) {
        (self.aux & 0x7ff, (self.aux >> 11) & 0x7ff, self.aux >> 22)
    }
}

/// The layout of ITT annotation records (`itt_task`, `itt_frame`: spans; `itt_marker`,
/// `itt_pause`, `itt_resume`: instants with `dur` 0): the same 64 bytes as [`Event`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct IttSpan {
    /// The function id ([`crate::func::Func::IttTask`] …), as in [`Event::kind`].
    pub kind: u16,
    /// As [`Event::flags`].
    pub flags: u16,
    /// As [`Event::pid`].
    pub pid: u32,
    /// As [`Event::tid`].
    pub tid: u32,
    /// Nesting depth of a task on its thread (0 = outermost).
    pub depth: i32,
    /// As [`Event::start`]: ring ticks in the ring, CLOCK_MONOTONIC ns in `run.bin`.
    pub start: u64,
    /// As [`Event::dur`] (0 for instants).
    pub dur: u64,
    /// The task or frame id's first word (`__itt_id.d1`; 0 = `__itt_null`).
    pub id: u64,
    /// String id of the task, frame or marker name (0 = none).
    pub name: u64,
    /// String id of the domain name (0 = none).
    pub domain: u64,
    /// The parent id's first word.
    pub parent: u64,
}
const _: () = assert!(core::mem::size_of::<IttSpan>() == RECORD_BYTES);
const _: () = assert!(core::mem::offset_of!(IttSpan, start) == core::mem::offset_of!(Event, start));
const _: () = assert!(core::mem::offset_of!(IttSpan, dur) == core::mem::offset_of!(Event, dur));

impl IttSpan {
    /// The same 64 bytes read as an ITT span (no check of `kind`).
    pub fn from_event(event: &Event) -> IttSpan {
        zerocopy::transmute!(*event)
    }

    /// The same 64 bytes as an [`Event`], for the ring and `run.bin`.
    pub fn into_event(self) -> Event {
        zerocopy::transmute!(self)
    }
}

/// Packs launch dimensions into a [`GpuCall`]'s `arg` (grid) and `aux` (block).
pub fn pack_launch_dims(grid: (u32, u32, u32), block: (u32, u32, u32)) -> (u64, u32) {
    let grid = grid.0 as u64 | ((grid.1.min(0xffff) as u64) << 32) | ((grid.2.min(0xffff) as u64) << 48);
    let block = block.0.min(0x7ff) | (block.1.min(0x7ff) << 11) | (block.2.min(0x3ff) << 22);
    (grid, block)
}

/// Copy direction (`aux` of copy records, numbered as cudaMemcpyKind): host to host.
pub const COPY_H2H: u32 = 0;
/// Copy direction: host to device.
pub const COPY_H2D: u32 = 1;
/// Copy direction: device to host.
pub const COPY_D2H: u32 = 2;
/// Copy direction: device to device.
pub const COPY_D2D: u32 = 3;
/// Inferred by CUDA from the pointers (cudaMemcpyDefault, cuMemcpy): not known to the hook.
pub const COPY_DEFAULT: u32 = 4;

/// The short name of a copy direction (`H2D`…; `default` for [`COPY_DEFAULT`] and unknown
/// values), as reports print it.
pub fn copy_direction_name(aux: u32) -> &'static str {
    match aux {
        COPY_H2H => "H2H",
        COPY_H2D => "H2D",
        COPY_D2H => "D2H",
        COPY_D2D => "D2D",
        _ => "default",
    }
}

/// Kinds at or above this are ring control records, never stored as events.
pub const CONTROL_KIND_BASE: u16 = 0x8000;

/// Defines a string: `arg` = string id, `arg2` = byte length; the bytes follow in the next
/// `ceil(len / 64)` slots of the same lane, published together with this record.
pub const KIND_STRING_DEF: u16 = 0x8001;
/// A process image starts: `pid`, `arg` = ppid, `arg2` = cmdline string id (NUL-separated argv),
/// `start` = time, `extra` = [`PROC_FORKED`] bit (0: a new program, after exec or at launch).
pub const KIND_PROCESS_START: u16 = 0x8002;
/// A process calls exit/_exit: `ret` = status.
pub const KIND_PROCESS_EXIT: u16 = 0x8003;
/// Names a GPU function handle of this process: `arg` = handle, `arg2` = name string id (sent
/// before). Sent once per handle per process.
pub const KIND_SYMBOL_DEF: u16 = 0x8004;

/// The rank variables of the process image announced next on this lane (sent just before its
/// [`KIND_PROCESS_START`], only when the environment names a rank): packed as
/// [`crate::rank::RankRecord`] says. Older collectors skip it like any unknown control kind.
pub const KIND_PROCESS_RANK: u16 = 0x8005;

/// The process is a fork child: it inherits its parent's fd table.
pub const PROC_FORKED: u32 = 1;

/// Longest string (path, command line) the preload sends; longer ones are cut.
pub const MAX_STRING_BYTES: usize = 4096;

/// Number of slots a string of `len` bytes occupies after its definition record.
pub const fn string_payload_slots(len: usize) -> usize {
    len.div_ceil(RECORD_BYTES)
}

impl Event {
    /// Whether the call failed ([`FLAG_ERROR`]).
    pub fn is_error(&self) -> bool {
        self.flags & FLAG_ERROR != 0
    }
}
