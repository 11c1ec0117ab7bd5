//! Directory hooks: `opendir`/`fdopendir`/`readdir`/`readdir64`/`closedir`, and `getdents64`
//! where a program calls it itself. A directory stream is recorded by its fd (`dirfd`, taken
//! where glibc has just proved the stream valid), so reports attribute its calls to the path
//! `opendir` named, like any fd.
//!
//! `readdir` returns entries from a buffer that glibc refills with one `getdents64` when it
//! runs dry: a record says which calls refilled it (`extra` = 1), so that the strace-shaped
//! view counts the `getdents64` calls strace sees. glibc (every version since 2.x, on x86_64
//! and aarch64) keeps that buffer at a fixed offset inside the `DIR` (`struct __dirstream`:
//! fd, lock, allocation, size, offset, filepos, errcode, then `data` aligned to 16): an entry
//! returned from the buffer's very start came from a refill, and a NULL return (end or error)
//! also made one. Only addresses are compared; the `DIR` is never read for this.

use core::ffi::{c_char, c_int, c_void};

use libc::{DIR, dirent, dirent64, size_t, ssize_t};
use mlprof_format::func::Func;
use mlprof_format::record::Event;

use crate::guard;
use crate::real::{Real, as_fn};
use crate::recorder::Span;

/// Where glibc's `struct __dirstream` keeps its entry buffer.
const DIR_DATA_OFFSET: usize = 48;

/// The fd of a stream the real call just used (so it is valid); -1 for null.
fn stream_fd(dir: *mut DIR) -> c_int {
    if dir.is_null() {
        return -1;
    }
    // Safety: `dir` is a stream glibc just accepted; dirfd only reads it (no system call).
    unsafe { libc::dirfd(dir) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let real = real!(c"opendir", unsafe extern "C" fn(*const c_char) -> *mut DIR, core::ptr::null_mut());
    let Some(span) = Span::begin(Func::Opendir) else {
        // Safety: forwarding the caller's argument unchanged.
        return unsafe { real(path) };
    };
    // Safety: as above.
    let dir = unsafe { real(path) };
    let fd = stream_fd(dir);
    // Safety: the path the application passed to the real call.
    unsafe {
        span.finish_with_path(
            Event { fd, ret: fd as i64, ..Event::default() },
            Func::Opendir,
            dir.is_null(),
            path,
        )
    };
    dir
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    let real = real!(c"fdopendir", unsafe extern "C" fn(c_int) -> *mut DIR, core::ptr::null_mut());
    let Some(span) = Span::begin(Func::Fdopendir) else {
        // Safety: forwarding the caller's argument unchanged.
        return unsafe { real(fd) };
    };
    // Safety: as above.
    let dir = unsafe { real(fd) };
    let ret = if dir.is_null() { -1 } else { fd as i64 };
    span.finish(Event { fd, ret, ..Event::default() }, Func::Fdopendir, dir.is_null());
    dir
}

macro_rules! readdir_hook {
    ($sym:ident, $name:literal, $func:expr, $entry:ty) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $sym(dir: *mut DIR) -> *mut $entry {
            let real = real!($name, unsafe extern "C" fn(*mut DIR) -> *mut $entry, core::ptr::null_mut());
            let Some(span) = Span::begin($func) else {
                // Safety: forwarding the caller's argument unchanged.
                return unsafe { real(dir) };
            };
            // readdir reports an error only through errno (NULL is also the end): clear it for
            // the call, and put the caller's back unless the call set one, as glibc does.
            let before = guard::errno();
            guard::set_errno(0);
            // Safety: as above.
            let entry = unsafe { real(dir) };
            let failed = entry.is_null() && guard::errno() != 0;
            if !failed {
                guard::set_errno(before);
            }
            let refilled = entry.is_null() || entry as usize == (dir as usize).wrapping_add(DIR_DATA_OFFSET);
            let event =
                Event { fd: stream_fd(dir), ret: entry as i64, extra: refilled as u32, ..Event::default() };
            span.finish(event, $func, failed);
            entry
        }
    };
}

readdir_hook!(readdir, c"readdir", Func::Readdir, dirent);
readdir_hook!(readdir64, c"readdir64", Func::Readdir64, dirent64);

/// The fd is read before the call, which frees the stream. glibc's closedir reads that same
/// field first thing, so a pointer that faults here faults there too (a null one is refused
/// by glibc with EINVAL and is not read).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn closedir(dir: *mut DIR) -> c_int {
    let real = real!(c"closedir", unsafe extern "C" fn(*mut DIR) -> c_int, -1);
    let Some(span) = Span::begin(Func::Closedir) else {
        // Safety: forwarding the caller's argument unchanged.
        return unsafe { real(dir) };
    };
    let fd = stream_fd(dir);
    // Safety: as above.
    let ret = unsafe { real(dir) };
    span.finish(Event { fd, ret: ret as i64, ..Event::default() }, Func::Closedir, ret < 0);
    ret
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getdents64(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    let real = real!(c"getdents64", unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t, -1);
    let (span, ret) = call_in_span!(Func::Getdents64, real(fd, buf, count));
    let event = Event { fd, ret: ret as i64, arg: count as u64, extra: 1, ..Event::default() };
    span.finish(event, Func::Getdents64, ret < 0);
    ret
}
