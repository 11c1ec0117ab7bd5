//! Descriptor hooks: `dup`/`dup2`/`dup3` and `fcntl` (reports give a duplicated fd the name of
//! the file it duplicates), file size and space (`ftruncate`, `fallocate`, `posix_fallocate`),
//! caching hints (`posix_fadvise`, `sync_file_range`), in-kernel copies (`sendfile`,
//! `copy_file_range`), and `isatty`/`tcgetattr`, recorded as the `ioctl(TCGETS)` they make
//! (Python asks it of every file it opens).

use core::ffi::{c_int, c_uint, c_ulong, c_void};

use libc::{off_t, off64_t, size_t, ssize_t};
use mlprof_format::func::Func;
use mlprof_format::record::Event;

use crate::real::{Real, as_fn};
use crate::recorder::Span;

/// A call on an fd that returns an int (-1 and errno on failure).
macro_rules! fd_int_hook {
    ($sym:ident, $name:literal, $func:expr, ($($arg:ident : $ty:ty),*), fd: $fd:ident, arg: $word:expr, arg2: $word2:expr, extra: $extra:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym($($arg: $ty),*) -> c_int {
            let real = real!($name, unsafe extern "C" fn($($ty),*) -> c_int, -1);
            let (span, ret) = call_in_span!($func, real($($arg),*));
            let event = Event {
                fd: $fd,
                ret: ret as i64,
                arg: $word as u64,
                arg2: $word2 as u64,
                extra: $extra as u32,
                ..Event::default()
            };
            // -1 is the only failure (fcntl(F_GETOWN) returns a process group as -pgid).
            span.finish(event, $func, ret == -1);
            ret
        }
    };
}

// ---- duplication and control ---------------------------------------------------------------

fd_int_hook!(close, c"close", Func::Close, (fd: c_int), fd: fd, arg: 0, arg2: 0, extra: 0);
fd_int_hook!(fsync, c"fsync", Func::Fsync, (fd: c_int), fd: fd, arg: 0, arg2: 0, extra: 0);
fd_int_hook!(fdatasync, c"fdatasync", Func::Fdatasync, (fd: c_int), fd: fd, arg: 0, arg2: 0, extra: 0);
fd_int_hook!(dup, c"dup", Func::Dup, (fd: c_int), fd: fd, arg: -1i64, arg2: 0, extra: 0);
fd_int_hook!(dup2, c"dup2", Func::Dup2, (fd: c_int, target: c_int), fd: fd, arg: target, arg2: 0, extra: 0);
fd_int_hook!(dup3, c"dup3", Func::Dup3, (fd: c_int, target: c_int, flags: c_int), fd: fd, arg: target, arg2: 0, extra: flags);
// Variadic in C: the optional argument is an int or a pointer, passed in the same register
// either way (x86_64 and aarch64 SysV), and handed on unchanged.
fd_int_hook!(fcntl, c"fcntl", Func::Fcntl, (fd: c_int, cmd: c_int, arg: c_ulong), fd: fd, arg: arg, arg2: 0, extra: cmd);
fd_int_hook!(fcntl64, c"fcntl64", Func::Fcntl64, (fd: c_int, cmd: c_int, arg: c_ulong), fd: fd, arg: arg, arg2: 0, extra: cmd);

// ---- size, space, caching ------------------------------------------------------------------

fd_int_hook!(ftruncate, c"ftruncate", Func::Ftruncate, (fd: c_int, length: off_t), fd: fd, arg: length, arg2: 0, extra: 0);
fd_int_hook!(ftruncate64, c"ftruncate64", Func::Ftruncate64, (fd: c_int, length: off64_t), fd: fd, arg: length, arg2: 0, extra: 0);
fd_int_hook!(fallocate, c"fallocate", Func::Fallocate, (fd: c_int, mode: c_int, offset: off_t, len: off_t), fd: fd, arg: offset, arg2: len, extra: mode);
fd_int_hook!(fallocate64, c"fallocate64", Func::Fallocate64, (fd: c_int, mode: c_int, offset: off64_t, len: off64_t), fd: fd, arg: offset, arg2: len, extra: mode);
fd_int_hook!(sync_file_range, c"sync_file_range", Func::SyncFileRange, (fd: c_int, offset: off64_t, len: off64_t, flags: c_uint), fd: fd, arg: offset, arg2: len, extra: flags);

/// `posix_fallocate` and `posix_fadvise` return an error number and leave errno alone: the
/// record's errno is that number, and the caller's errno is untouched.
macro_rules! posix_hook {
    ($sym:ident, $name:literal, $func:expr, ($($arg:ident : $ty:ty),*), fd: $fd:ident, arg: $word:expr, arg2: $word2:expr, extra: $extra:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym($($arg: $ty),*) -> c_int {
            let real = real!($name, unsafe extern "C" fn($($ty),*) -> c_int, libc::ENOSYS);
            let (span, ret) = call_in_span!($func, real($($arg),*));
            let event = Event {
                fd: $fd,
                ret: ret as i64,
                arg: $word as u64,
                arg2: $word2 as u64,
                extra: $extra as u32,
                ..Event::default()
            };
            span.finish_with_error(event, $func, ret);
            ret
        }
    };
}

posix_hook!(posix_fallocate, c"posix_fallocate", Func::PosixFallocate, (fd: c_int, offset: off_t, len: off_t), fd: fd, arg: offset, arg2: len, extra: 0);
posix_hook!(posix_fallocate64, c"posix_fallocate64", Func::PosixFallocate64, (fd: c_int, offset: off64_t, len: off64_t), fd: fd, arg: offset, arg2: len, extra: 0);
posix_hook!(posix_fadvise, c"posix_fadvise", Func::PosixFadvise, (fd: c_int, offset: off_t, len: off_t, advice: c_int), fd: fd, arg: offset, arg2: len, extra: advice);
posix_hook!(posix_fadvise64, c"posix_fadvise64", Func::PosixFadvise64, (fd: c_int, offset: off64_t, len: off64_t, advice: c_int), fd: fd, arg: offset, arg2: len, extra: advice);

// ---- in-kernel copies ----------------------------------------------------------------------

macro_rules! transfer_hook {
    ($sym:ident, $name:literal, $func:expr, ($($arg:ident : $ty:ty),*), to: $to:ident, from: $from:ident, count: $count:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym($($arg: $ty),*) -> ssize_t {
            let real = real!($name, unsafe extern "C" fn($($ty),*) -> ssize_t, -1);
            let (span, ret) = call_in_span!($func, real($($arg),*));
            let event = Event {
                fd: $to,
                ret: ret as i64,
                arg: $count as u64,
                arg2: ret.max(0) as u64,
                extra: $from as u32,
                ..Event::default()
            };
            // -1 is the only failure (fcntl(F_GETOWN) returns a process group as -pgid).
            span.finish(event, $func, ret == -1);
            ret
        }
    };
}

transfer_hook!(sendfile, c"sendfile", Func::Sendfile, (out_fd: c_int, in_fd: c_int, offset: *mut off_t, count: size_t), to: out_fd, from: in_fd, count: count);
transfer_hook!(sendfile64, c"sendfile64", Func::Sendfile64, (out_fd: c_int, in_fd: c_int, offset: *mut off64_t, count: size_t), to: out_fd, from: in_fd, count: count);
transfer_hook!(copy_file_range, c"copy_file_range", Func::CopyFileRange, (fd_in: c_int, off_in: *mut off64_t, fd_out: c_int, off_out: *mut off64_t, len: size_t, flags: c_uint), to: fd_out, from: fd_in, count: len);

// ---- terminals -----------------------------------------------------------------------------

/// The request both make (`ioctl(fd, TCGETS, …)`).
// c_ulong is u64 here and u32 on 32-bit targets.
#[allow(clippy::unnecessary_cast)]
const TCGETS: u64 = libc::TCGETS as u64;

/// `isatty` returns 1, or 0 with errno (ENOTTY for a file, EBADF): 0 is its failure.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn isatty(fd: c_int) -> c_int {
    let real = real!(c"isatty", unsafe extern "C" fn(c_int) -> c_int, 0);
    let Some(span) = Span::begin(Func::Isatty) else {
        // Safety: forwarding the caller's argument unchanged.
        return unsafe { real(fd) };
    };
    // Safety: as above.
    let ret = unsafe { real(fd) };
    span.finish(Event { fd, ret: ret as i64, arg: TCGETS, ..Event::default() }, Func::Isatty, ret == 0);
    ret
}

fd_int_hook!(tcgetattr, c"tcgetattr", Func::Tcgetattr, (fd: c_int, termios: *mut c_void), fd: fd, arg: TCGETS, arg2: 0, extra: 0);
