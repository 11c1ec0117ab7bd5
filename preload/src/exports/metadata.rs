//! Metadata and namespace hooks: the stat family (with glibc's versioned `__xstat` entry points,
//! which binaries built against glibc before 2.33 still import), `statx`, `access`/`faccessat`,
//! and `mkdir`, `rmdir`, `unlink`, `rename` with their `*at` forms. A call by path records the
//! path (read only once the real call proved it readable, else copied without faulting: see
//! `Span::finish_with_path`); a call by fd records the fd, which reports attribute to the file
//! it named.

use core::ffi::{c_char, c_int, c_uint, c_void};

use libc::mode_t;
use mlprof_format::func::Func;
use mlprof_format::record::Event;

use crate::real::{Real, as_fn};
use crate::recorder::Span;
use crate::user_memory;

/// The path a record should carry: `path`, unless the call proved it empty (`fstatat(fd, "",
/// AT_EMPTY_PATH)`, glibc's own `fstat`): such a call is about the fd, which reports attribute.
/// Reads the first byte only where the call proved the path readable.
fn named_path(path: *const c_char, failed: bool) -> *const c_char {
    if path.is_null() || (failed && !user_memory::errno_proves_path_read(crate::guard::errno())) {
        return path;
    }
    // Safety: the real call read the path (it succeeded, or failed resolving it).
    if unsafe { *path } == 0 { core::ptr::null() } else { path }
}

/// A call that names a path (and possibly a directory fd) and returns 0 or -1.
macro_rules! path_hook {
    (
        $sym:ident, $name:literal, $func:expr, ($($arg:ident : $ty:ty),*),
        path: $path:expr, fd: $fd:expr, arg: $word:expr, extra: $extra:expr
    ) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym($($arg: $ty),*) -> c_int {
            let real = real!($name, unsafe extern "C" fn($($ty),*) -> c_int, -1);
            let (span, ret) = call_in_span!($func, real($($arg),*));
            let failed = ret < 0;
            let event = Event {
                fd: $fd,
                ret: ret as i64,
                arg: $word as u64,
                extra: $extra as u32,
                ..Event::default()
            };
            // Safety: the path the application passed to the real call.
            unsafe { span.finish_with_path(event, $func, failed, named_path($path, failed)) };
            ret
        }
    };
}

/// A stat by fd.
macro_rules! fd_stat_hook {
    ($sym:ident, $name:literal, $func:expr, ($($arg:ident : $ty:ty),*), fd: $fd:ident, arg: $word:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym($($arg: $ty),*) -> c_int {
            let real = real!($name, unsafe extern "C" fn($($ty),*) -> c_int, -1);
            let (span, ret) = call_in_span!($func, real($($arg),*));
            span.finish(Event { fd: $fd, ret: ret as i64, arg: $word as u64, ..Event::default() }, $func, ret < 0);
            ret
        }
    };
}

// The buffers (`struct stat *`, `struct statx *`) are the kernel's to fill; never read here.
type Buf = *mut c_void;
const NO_FD: c_int = -1;

// ---- stat family ---------------------------------------------------------------------------

path_hook!(stat, c"stat", Func::Stat, (path: *const c_char, buf: Buf), path: path, fd: NO_FD, arg: 0, extra: 0);
path_hook!(stat64, c"stat64", Func::Stat64, (path: *const c_char, buf: Buf), path: path, fd: NO_FD, arg: 0, extra: 0);
path_hook!(lstat, c"lstat", Func::Lstat, (path: *const c_char, buf: Buf), path: path, fd: NO_FD, arg: 0, extra: libc::AT_SYMLINK_NOFOLLOW);
path_hook!(lstat64, c"lstat64", Func::Lstat64, (path: *const c_char, buf: Buf), path: path, fd: NO_FD, arg: 0, extra: libc::AT_SYMLINK_NOFOLLOW);
path_hook!(fstatat, c"fstatat", Func::Fstatat, (dirfd: c_int, path: *const c_char, buf: Buf, flags: c_int), path: path, fd: dirfd, arg: 0, extra: flags);
path_hook!(fstatat64, c"fstatat64", Func::Fstatat64, (dirfd: c_int, path: *const c_char, buf: Buf, flags: c_int), path: path, fd: dirfd, arg: 0, extra: flags);
path_hook!(statx, c"statx", Func::Statx, (dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: Buf), path: path, fd: dirfd, arg: mask, extra: flags);
fd_stat_hook!(fstat, c"fstat", Func::Fstat, (fd: c_int, buf: Buf), fd: fd, arg: 0);
fd_stat_hook!(fstat64, c"fstat64", Func::Fstat64, (fd: c_int, buf: Buf), fd: fd, arg: 0);

// glibc < 2.33 compiled `stat(p, b)` into `__xstat(_STAT_VER, p, b)`; `arg` keeps the version.
path_hook!(__xstat, c"__xstat", Func::Xstat, (ver: c_int, path: *const c_char, buf: Buf), path: path, fd: NO_FD, arg: ver, extra: 0);
path_hook!(__xstat64, c"__xstat64", Func::Xstat64, (ver: c_int, path: *const c_char, buf: Buf), path: path, fd: NO_FD, arg: ver, extra: 0);
path_hook!(__lxstat, c"__lxstat", Func::Lxstat, (ver: c_int, path: *const c_char, buf: Buf), path: path, fd: NO_FD, arg: ver, extra: libc::AT_SYMLINK_NOFOLLOW);
path_hook!(__lxstat64, c"__lxstat64", Func::Lxstat64, (ver: c_int, path: *const c_char, buf: Buf), path: path, fd: NO_FD, arg: ver, extra: libc::AT_SYMLINK_NOFOLLOW);
path_hook!(__fxstatat, c"__fxstatat", Func::Fxstatat, (ver: c_int, dirfd: c_int, path: *const c_char, buf: Buf, flags: c_int), path: path, fd: dirfd, arg: ver, extra: flags);
path_hook!(__fxstatat64, c"__fxstatat64", Func::Fxstatat64, (ver: c_int, dirfd: c_int, path: *const c_char, buf: Buf, flags: c_int), path: path, fd: dirfd, arg: ver, extra: flags);
fd_stat_hook!(__fxstat, c"__fxstat", Func::Fxstat, (ver: c_int, fd: c_int, buf: Buf), fd: fd, arg: ver);
fd_stat_hook!(__fxstat64, c"__fxstat64", Func::Fxstat64, (ver: c_int, fd: c_int, buf: Buf), fd: fd, arg: ver);

// `arg` = the access mode asked (R_OK…), `extra` = faccessat's flags.
path_hook!(access, c"access", Func::Access, (path: *const c_char, mode: c_int), path: path, fd: NO_FD, arg: mode, extra: 0);
path_hook!(faccessat, c"faccessat", Func::Faccessat, (dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int), path: path, fd: dirfd, arg: mode, extra: flags);

// ---- namespace -----------------------------------------------------------------------------

path_hook!(mkdir, c"mkdir", Func::Mkdir, (path: *const c_char, mode: mode_t), path: path, fd: NO_FD, arg: mode, extra: 0);
path_hook!(mkdirat, c"mkdirat", Func::Mkdirat, (dirfd: c_int, path: *const c_char, mode: mode_t), path: path, fd: dirfd, arg: mode, extra: 0);
path_hook!(rmdir, c"rmdir", Func::Rmdir, (path: *const c_char), path: path, fd: NO_FD, arg: 0, extra: 0);
path_hook!(unlink, c"unlink", Func::Unlink, (path: *const c_char), path: path, fd: NO_FD, arg: 0, extra: 0);
path_hook!(unlinkat, c"unlinkat", Func::Unlinkat, (dirfd: c_int, path: *const c_char, flags: c_int), path: path, fd: dirfd, arg: flags, extra: 0);
// A rename records its source path (one path per record).
path_hook!(rename, c"rename", Func::Rename, (old: *const c_char, new: *const c_char), path: old, fd: NO_FD, arg: 0, extra: 0);
path_hook!(renameat, c"renameat", Func::Renameat, (olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char), path: old, fd: olddirfd, arg: 0, extra: 0);
