//! Every symbol libmlprof.so exports: the hooks. This file holds the libc I/O hooks; the
//! submodules hold the metadata and namespace calls (`metadata`), directories (`dirs`),
//! descriptor, space and terminal calls (`fds`), `dlopen`/`dlclose` (`loader`), the CUDA
//! runtime (`cuda_runtime`), CUDA driver (`cuda_driver`) and NCCL (`nccl`) hooks, the driver
//! entry-point lookups and `dlsym` (`entry_points`), and the ITT collector entry points
//! (`itt`), and those entry points as CPython builtins for the `--torch` hook
//! (`python`). Each hook resolves the real function lazily, passes straight
//! through when it must not record (see `Span::begin`), and otherwise times the real call and
//! writes one record. Variadic C functions (`open`, `openat`, `ioctl`) are declared with their
//! optional argument as a fixed one, which the x86_64 and aarch64 SysV ABIs allow.
//!
//! Many libc hooks wrap cancellation points: `pthread_cancel` of a thread blocked in a `read`
//! unwinds (a forced unwind) through our frame to run the thread's cleanup handlers. With
//! `panic = "abort"` our frames have no landing pads at all, only the unwind tables, so the
//! forced unwind passes through them as through a C frame (`tests/programs/cancel.c` checks
//! it). Declaring the hooks `extern "C-unwind"` would be worse: rustc then adds an abort pad
//! that a forced unwind also hits (rust-lang/rust#101469), killing the program. Nothing in a
//! hook needs undoing when the call never returns: its record is simply not written (the
//! in-flight call is not counted; a cancelled thread's last call is the only such case).

use core::ffi::{c_char, c_int, c_ulong, c_void};

use libc::{FILE, iovec, mode_t, off_t, off64_t, size_t, ssize_t, timespec, timeval};
use mlprof_format::func::{AGG_SLOT_GETTIMEOFDAY, AGG_SLOT_OTHER_CLOCK, Func};
use mlprof_format::record::Event;

use crate::real::{Real, as_fn};
use crate::recorder::{self, AggregateCall, Span};

/// Resolves the real function `$name` with C type `$ty`, or fails the call with ENOSYS.
macro_rules! real {
    ($name:literal, $ty:ty, $fail:expr) => {{
        static REAL: Real = Real::new($name);
        match REAL.get() {
            // Safety: `$ty` is the C prototype of `$name`.
            Some(addr) => unsafe { as_fn::<$ty>(addr) },
            None => {
                crate::guard::set_errno(libc::ENOSYS);
                return $fail;
            }
        }
    }};
}

/// What most hooks begin with: the real call made straight (and its result returned) when the
/// call is not recorded, or else made inside a span. Evaluates to `(span, ret)`.
macro_rules! call_in_span {
    ($func:expr, $real:ident($($arg:expr),*)) => {
        match Span::begin($func) {
            // Safety: forwarding the caller's arguments unchanged.
            None => return unsafe { $real($($arg),*) },
            // Safety: as above.
            Some(span) => (span, unsafe { $real($($arg),*) }),
        }
    };
}

fn io_event(fd: c_int, asked: usize, done: isize) -> Event {
    Event { fd, ret: done as i64, arg: asked as u64, arg2: done.max(0) as u64, ..Event::default() }
}

/// Bytes asked for by a vectored call, read only after the call succeeded: then the kernel has
/// read all `count` iovecs; a failed call may have been given a bad array (EFAULT), and counts 0.
fn iov_bytes(iov: *const iovec, count: c_int, ret: ssize_t) -> usize {
    if ret < 0 || iov.is_null() || count <= 0 {
        return 0;
    }
    // Safety: the call succeeded, so the kernel read `count` (at most IOV_MAX) valid iovecs.
    let iov = unsafe { core::slice::from_raw_parts(iov, count.min(1024) as usize) };
    iov.iter().fold(0usize, |sum, v| sum.saturating_add(v.iov_len))
}

mod capture;
pub mod cuda_driver;
mod cuda_runtime;
mod cupti;
mod dirs;
mod entry_points;
mod fds;
mod itt;
#[cfg(target_arch = "x86_64")]
mod loader;
mod metadata;
mod nccl;
mod python;

pub use itt::itt_task_begin_address;

// ---- read / write family -------------------------------------------------------------------

macro_rules! rw_hook {
    ($sym:ident, $name:literal, $func:expr, ($($arg:ident : $ty:ty),*), $fd:ident, $asked:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym($($arg: $ty),*) -> ssize_t {
            let real = real!($name, unsafe extern "C" fn($($ty),*) -> ssize_t, -1);
            let (span, ret) = call_in_span!($func, real($($arg),*));
            span.finish(io_event($fd, ($asked)(ret), ret), $func, ret < 0);
            ret
        }
    };
}

rw_hook!(read, c"read", Func::Read, (fd: c_int, buf: *mut c_void, count: size_t), fd, |_| count);
rw_hook!(write, c"write", Func::Write, (fd: c_int, buf: *const c_void, count: size_t), fd, |_| count);
rw_hook!(pread, c"pread", Func::Pread, (fd: c_int, buf: *mut c_void, count: size_t, offset: off_t), fd, |_| count);
rw_hook!(pread64, c"pread64", Func::Pread64, (fd: c_int, buf: *mut c_void, count: size_t, offset: off64_t), fd, |_| count);
rw_hook!(pwrite, c"pwrite", Func::Pwrite, (fd: c_int, buf: *const c_void, count: size_t, offset: off_t), fd, |_| count);
rw_hook!(pwrite64, c"pwrite64", Func::Pwrite64, (fd: c_int, buf: *const c_void, count: size_t, offset: off64_t), fd, |_| count);
rw_hook!(readv, c"readv", Func::Readv, (fd: c_int, iov: *const iovec, iovcnt: c_int), fd, |ret| iov_bytes(iov, iovcnt, ret));
rw_hook!(writev, c"writev", Func::Writev, (fd: c_int, iov: *const iovec, iovcnt: c_int), fd, |ret| iov_bytes(iov, iovcnt, ret));
rw_hook!(preadv, c"preadv", Func::Preadv, (fd: c_int, iov: *const iovec, iovcnt: c_int, offset: off_t), fd, |ret| iov_bytes(iov, iovcnt, ret));
rw_hook!(pwritev, c"pwritev", Func::Pwritev, (fd: c_int, iov: *const iovec, iovcnt: c_int, offset: off_t), fd, |ret| iov_bytes(iov, iovcnt, ret));
// _FORTIFY_SOURCE builds call the checking variants; they are the same call for the user.
rw_hook!(__read_chk, c"__read_chk", Func::Read, (fd: c_int, buf: *mut c_void, count: size_t, buflen: size_t), fd, |_| count);
rw_hook!(__pread_chk, c"__pread_chk", Func::Pread, (fd: c_int, buf: *mut c_void, count: size_t, offset: off_t, buflen: size_t), fd, |_| count);
rw_hook!(__pread64_chk, c"__pread64_chk", Func::Pread64, (fd: c_int, buf: *mut c_void, count: size_t, offset: off64_t, buflen: size_t), fd, |_| count);

// ---- open family ---------------------------------------------------------------------------

macro_rules! open_hook {
    ($sym:ident, $name:literal, $func:expr, ($($arg:ident : $ty:ty),*), $path:ident, $flags:expr, $mode:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym($($arg: $ty),*) -> c_int {
            let real = real!($name, unsafe extern "C" fn($($ty),*) -> c_int, -1);
            let Some(span) = Span::begin($func) else {
                // Safety: forwarding the caller's arguments unchanged.
                return unsafe { real($($arg),*) };
            };
            // Safety: as above.
            let fd = unsafe { real($($arg),*) };
            let event = Event { fd, ret: fd as i64, arg: $mode as u64, extra: $flags as u32, ..Event::default() };
            // Safety: the path the application passed to the real call.
            unsafe { span.finish_with_path(event, $func, fd < 0, $path) };
            fd
        }
    };
}

open_hook!(open, c"open", Func::Open, (path: *const c_char, flags: c_int, mode: mode_t), path, flags, mode);
open_hook!(open64, c"open64", Func::Open64, (path: *const c_char, flags: c_int, mode: mode_t), path, flags, mode);
open_hook!(openat, c"openat", Func::Openat, (dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t), path, flags, mode);
open_hook!(openat64, c"openat64", Func::Openat64, (dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t), path, flags, mode);
open_hook!(creat, c"creat", Func::Creat, (path: *const c_char, mode: mode_t), path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode);
open_hook!(__open_2, c"__open_2", Func::Open, (path: *const c_char, flags: c_int), path, flags, 0);
open_hook!(__open64_2, c"__open64_2", Func::Open64, (path: *const c_char, flags: c_int), path, flags, 0);
open_hook!(__openat_2, c"__openat_2", Func::Openat, (dirfd: c_int, path: *const c_char, flags: c_int), path, flags, 0);
open_hook!(__openat64_2, c"__openat64_2", Func::Openat64, (dirfd: c_int, path: *const c_char, flags: c_int), path, flags, 0);

// ---- fd-only calls -------------------------------------------------------------------------

// close, fsync and fdatasync are in `fds` with the other calls on a descriptor.

macro_rules! lseek_hook {
    ($sym:ident, $name:literal, $func:expr, $off:ty) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym(fd: c_int, offset: $off, whence: c_int) -> $off {
            let real = real!($name, unsafe extern "C" fn(c_int, $off, c_int) -> $off, -1);
            let (span, ret) = call_in_span!($func, real(fd, offset, whence));
            let event =
                Event { fd, ret: ret as i64, arg: offset as u64, extra: whence as u32, ..Event::default() };
            span.finish(event, $func, ret < 0);
            ret
        }
    };
}

lseek_hook!(lseek, c"lseek", Func::Lseek, off_t);
lseek_hook!(lseek64, c"lseek64", Func::Lseek64, off64_t);

// ---- memory maps ---------------------------------------------------------------------------

macro_rules! mmap_hook {
    ($sym:ident, $name:literal, $func:expr, $off:ty) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym(
            addr: *mut c_void,
            len: size_t,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            offset: $off,
        ) -> *mut c_void {
            let real = real!(
                $name,
                unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, $off) -> *mut c_void,
                libc::MAP_FAILED
            );
            let (span, ret) = call_in_span!($func, real(addr, len, prot, flags, fd, offset));
            let event = Event {
                fd,
                ret: ret as i64,
                arg: len as u64,
                arg2: prot as u64,
                extra: flags as u32,
                ..Event::default()
            };
            span.finish(event, $func, ret == libc::MAP_FAILED);
            ret
        }
    };
}

mmap_hook!(mmap, c"mmap", Func::Mmap, off_t);
mmap_hook!(mmap64, c"mmap64", Func::Mmap64, off64_t);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let real = real!(c"munmap", unsafe extern "C" fn(*mut c_void, size_t) -> c_int, -1);
    let (span, ret) = call_in_span!(Func::Munmap, real(addr, len));
    span.finish(
        Event { fd: -1, ret: ret as i64, arg: len as u64, ..Event::default() },
        Func::Munmap,
        ret < 0,
    );
    ret
}

// ---- stdio (glibc's stdio uses internal calls that never reach the hooks above) -------------

fn stream_fd(stream: *mut FILE) -> c_int {
    if stream.is_null() {
        return -1;
    }
    let errno = crate::guard::errno();
    // Safety: the application passed this stream to a stdio call; fileno only reads it.
    let fd = unsafe { libc::fileno(stream) };
    crate::guard::set_errno(errno);
    fd
}

macro_rules! fopen_hook {
    ($sym:ident, $name:literal, $func:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym(path: *const c_char, mode: *const c_char) -> *mut FILE {
            let real = real!(
                $name,
                unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE,
                core::ptr::null_mut()
            );
            let Some(span) = Span::begin($func) else {
                // Safety: forwarding the caller's arguments unchanged.
                return unsafe { real(path, mode) };
            };
            // Safety: as above.
            let stream = unsafe { real(path, mode) };
            let fd = stream_fd(stream);
            // Safety: the path the application passed to the real call.
            unsafe {
                span.finish_with_path(
                    Event { fd, ret: fd as i64, ..Event::default() },
                    $func,
                    stream.is_null(),
                    path,
                )
            };
            stream
        }
    };
}

fopen_hook!(fopen, c"fopen", Func::Fopen);
fopen_hook!(fopen64, c"fopen64", Func::Fopen64);

macro_rules! stdio_rw_hook {
    ($sym:ident, $name:literal, $func:expr, $buf:ty) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym(buf: $buf, size: size_t, items: size_t, stream: *mut FILE) -> size_t {
            let real = real!($name, unsafe extern "C" fn($buf, size_t, size_t, *mut FILE) -> size_t, 0);
            let Some(span) = Span::begin($func) else {
                // Safety: forwarding the caller's arguments unchanged.
                return unsafe { real(buf, size, items, stream) };
            };
            // Safety: as above.
            let done = unsafe { real(buf, size, items, stream) };
            // A short count is an error only if the stream says so (else it is end of file).
            // Safety: the stream is valid (the real call just used it).
            let failed = done < items && !stream.is_null() && unsafe { libc::ferror(stream) } != 0;
            let event = Event {
                fd: stream_fd(stream),
                ret: done as i64,
                arg: size.saturating_mul(items) as u64,
                arg2: size.saturating_mul(done) as u64,
                ..Event::default()
            };
            span.finish(event, $func, failed);
            done
        }
    };
}

stdio_rw_hook!(fread, c"fread", Func::Fread, *mut c_void);
stdio_rw_hook!(fwrite, c"fwrite", Func::Fwrite, *const c_void);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fclose(stream: *mut FILE) -> c_int {
    let real = real!(c"fclose", unsafe extern "C" fn(*mut FILE) -> c_int, libc::EOF);
    let Some(span) = Span::begin(Func::Fclose) else {
        // Safety: forwarding the caller's argument unchanged.
        return unsafe { real(stream) };
    };
    let fd = stream_fd(stream);
    // Safety: as above.
    let ret = unsafe { real(stream) };
    span.finish(Event { fd, ret: ret as i64, ..Event::default() }, Func::Fclose, ret != 0);
    ret
}

// ---- clocks (aggregated by default) --------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn clock_gettime(clock: libc::clockid_t, tp: *mut timespec) -> c_int {
    type ClockGettime = unsafe extern "C" fn(libc::clockid_t, *mut timespec) -> c_int;
    let real = real!(c"clock_gettime", ClockGettime, -1);
    if !recorder::clock_events() {
        let slot = if (0..=11).contains(&clock) { clock as usize } else { AGG_SLOT_OTHER_CLOCK };
        // Safety: forwarding the caller's arguments unchanged.
        return aggregated(slot, || unsafe { real(clock, tp) });
    }
    let (span, ret) = call_in_span!(Func::ClockGettime, real(clock, tp));
    let event = Event { fd: -1, ret: ret as i64, extra: clock as u32, ..Event::default() };
    span.finish(event, Func::ClockGettime, ret != 0);
    ret
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gettimeofday(tv: *mut timeval, tz: *mut c_void) -> c_int {
    let real = real!(c"gettimeofday", unsafe extern "C" fn(*mut timeval, *mut c_void) -> c_int, -1);
    if !recorder::clock_events() {
        // Safety: forwarding the caller's arguments unchanged.
        return aggregated(AGG_SLOT_GETTIMEOFDAY, || unsafe { real(tv, tz) });
    }
    let (span, ret) = call_in_span!(Func::Gettimeofday, real(tv, tz));
    span.finish(Event { fd: -1, ret: ret as i64, ..Event::default() }, Func::Gettimeofday, ret != 0);
    ret
}

/// Runs a clock read counted in the thread's aggregate `slot` (see `AggregateCall`).
#[inline(always)]
fn aggregated(slot: usize, call: impl FnOnce() -> c_int) -> c_int {
    let counted = AggregateCall::begin(slot);
    let ret = call();
    if let Some(counted) = counted {
        counted.finish();
    }
    ret
}

// ---- ioctl ---------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let real = real!(c"ioctl", unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int, -1);
    let (span, ret) = call_in_span!(Func::Ioctl, real(fd, request, arg));
    // c_ulong is u64 here and u32 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let request = u64::from(request);
    span.finish(Event { fd, ret: ret as i64, arg: request, ..Event::default() }, Func::Ioctl, ret < 0);
    ret
}

// ---- process lifetime ----------------------------------------------------------------------

macro_rules! exit_hook {
    ($sym:ident, $name:literal) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym(status: c_int) -> ! {
            recorder::record_process_exit(status);
            static REAL: Real = Real::new($name);
            match REAL.get() {
                // Safety: the real exit function has this prototype and does not return.
                Some(addr) => unsafe { as_fn::<unsafe extern "C" fn(c_int) -> !>(addr)(status) },
                // Safety: the exit_group system call ends the process and never returns.
                None => unsafe {
                    libc::syscall(libc::SYS_exit_group, status);
                    libc::abort()
                },
            }
        }
    };
}

exit_hook!(exit, c"exit");
exit_hook!(_exit, c"_exit");
exit_hook!(_Exit, c"_Exit");

/// `_Fork` (glibc 2.34+) runs no atfork handlers, so the child announces itself here.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Fork() -> libc::pid_t {
    let real = real!(c"_Fork", unsafe extern "C" fn() -> libc::pid_t, -1);
    // Safety: no arguments.
    let pid = unsafe { real() };
    if pid == 0 {
        recorder::after_raw_fork_in_child();
    }
    pid
}

/// The start routine `clone` gives a child.
type CloneStart = unsafe extern "C" fn(*mut c_void) -> c_int;

/// glibc's `clone(fn, stack, flags, arg, [parent_tid, tls, child_tid])`. A child that does not
/// share our memory (no `CLONE_VM`) is a new process that no fork handler announces, and its
/// copy of this thread's state would have it write into this thread's lane: it starts in
/// `clone_child_start`, which gives it an identity of its own first. A child that shares our
/// memory and waits for our exec (`CLONE_VM | CLONE_VFORK`, as in `posix_spawn`) is a vfork
/// child: it passes through. (A child that shares our memory and thread state without waiting
/// cannot be told from us; no libc or runtime makes one.)
#[unsafe(no_mangle)]
pub unsafe extern "C" fn clone(
    start: Option<CloneStart>,
    stack: *mut c_void,
    flags: c_int,
    arg: *mut c_void,
    parent_tid: *mut libc::pid_t,
    tls: *mut c_void,
    child_tid: *mut libc::pid_t,
) -> c_int {
    type Clone = unsafe extern "C" fn(
        Option<CloneStart>,
        *mut c_void,
        c_int,
        *mut c_void,
        *mut libc::pid_t,
        *mut c_void,
        *mut libc::pid_t,
    ) -> c_int;
    let real = real!(c"clone", Clone, -1);
    let mut start = start;
    if flags & libc::CLONE_VM == 0 {
        if let (Some(state), Some(f)) = (crate::guard::current(), start) {
            state.clone_start.set(f as usize);
            start = Some(clone_child_start);
        }
    } else if flags & libc::CLONE_VFORK != 0 {
        recorder::note_vfork();
    }
    // Safety: forwarding the caller's arguments (the start routine possibly ours, which calls
    // theirs with their argument).
    unsafe { real(start, stack, flags, arg, parent_tid, tls, child_tid) }
}

/// Where a fork-like `clone` child starts: announces itself, then runs the caller's routine
/// (stashed in this thread's state, of which the child has a copy) with the caller's argument.
unsafe extern "C" fn clone_child_start(arg: *mut c_void) -> c_int {
    let f = crate::guard::current().map_or(0, |state| state.clone_start.get());
    recorder::after_raw_fork_in_child();
    if f == 0 {
        return 0;
    }
    // Safety: `f` is the start routine the application passed to clone, stashed just before.
    let f = unsafe { as_fn::<CloneStart>(f) };
    // Safety: calling the application's routine with its own argument, as clone would have.
    unsafe { f(arg) }
}

/// `syscall(number, ...)`, for the raw ways to make a process: `clone` and `clone3` without
/// `CLONE_VM`, and `fork`, return twice like fork but run no fork handler, so the child
/// announces itself here. Everything else passes straight through.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn syscall(
    number: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
) -> libc::c_long {
    type Syscall = unsafe extern "C" fn(
        libc::c_long,
        libc::c_long,
        libc::c_long,
        libc::c_long,
        libc::c_long,
        libc::c_long,
        libc::c_long,
    ) -> libc::c_long;
    let real = real!(c"syscall", Syscall, -1);
    // Safety: forwarding the caller's arguments unchanged.
    let ret = unsafe { real(number, a1, a2, a3, a4, a5, a6) };
    if ret == 0 && makes_a_process(number, a1) {
        recorder::after_raw_fork_in_child();
    }
    ret
}

/// Whether system call `number` with first argument `a1` made a new process with its own copy
/// of memory (read only in the child, after the call succeeded: for clone3, `a1` points to the
/// `clone_args` the kernel just read).
fn makes_a_process(number: libc::c_long, a1: libc::c_long) -> bool {
    match number {
        libc::SYS_clone => a1 & libc::CLONE_VM as libc::c_long == 0,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_fork => true,
        libc::SYS_clone3 if a1 != 0 => {
            // Safety: the call succeeded, so `a1` was a readable clone_args (flags first).
            let flags = unsafe { *(a1 as *const u64) };
            flags & libc::CLONE_VM as u64 == 0
        }
        _ => false,
    }
}

/// vfork cannot be wrapped by a function that returns (the child would return through our
/// frame and wreck the parent's stack), so this trampoline marks the thread and tail-jumps to
/// the real vfork. Hooks that then run in the child see the mark and a different pid, and pass
/// through; the parent clears the mark on its next hooked call.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    core::arch::naked_asm!(
        // Entry: rsp ≡ 8 (mod 16). One push realigns for the call; the pop restores the stack
        // exactly, so the real vfork sees our caller's return address on top.
        "push rax",
        "call {prepare}",
        "pop rcx",
        "jmp rax",
        prepare = sym prepare_vfork,
    )
}

#[cfg(target_arch = "x86_64")]
extern "C" fn prepare_vfork() -> usize {
    recorder::note_vfork();
    static REAL: Real = Real::new(c"vfork");
    static FORK: Real = Real::new(c"fork");
    // Without a real vfork (never seen), fork has the same contract for a child that execs.
    REAL.get().or_else(|| FORK.get()).unwrap_or(fail_fork as *const () as usize)
}

#[cfg(target_arch = "x86_64")]
extern "C" fn fail_fork() -> libc::pid_t {
    crate::guard::set_errno(libc::ENOSYS);
    -1
}
