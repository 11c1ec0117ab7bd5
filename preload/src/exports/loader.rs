//! Library loading: `dlopen` and `dlclose` as spans with the library's path, so the time the
//! dynamic loader spends inside (its own opens, reads, maps and the library's constructors,
//! which no symbol hook sees) shows per library.
//!
//! glibc's `dlopen` looks at its return address to find the calling object: a name without a
//! `/` is searched along the caller's `DT_RPATH`/`DT_RUNPATH` (and those of the objects that
//! loaded it), and `$ORIGIN` expands to the caller's directory. A plain wrapper would make
//! libmlprof.so the caller and break such loads (the sanitizers' interceptors have that bug). So
//! `dlopen` is a trampoline that hands the real return address to `route`, which picks:
//!
//! * the recording wrapper, when calling from our frame finds the same library: a path with a
//!   `/` and no `$` (what Python's imports pass), `NULL`, or a bare name from a caller whose
//!   search path (glibc's own `RTLD_DI_SERINFO` list) is ours;
//! * otherwise the real `dlopen`, tail-jumped to with the caller's return address in place,
//!   after a record without timing (`extra` = 1: duration 0, result unknown);
//! * the real `dlopen`, unrecorded, for our own lookups (the call comes from libmlprof.so) and
//!   whenever the call must pass through (see `Span::begin`).
//!
//! The name is read before the call: glibc reads it first thing whatever the mode (a bad
//! pointer faults there as here).

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::sync::atomic::{AtomicU64, Ordering};

use mlprof_format::func::Func;
use mlprof_format::record::Event;

use crate::real::{Real, as_fn};
use crate::recorder::{self, Span};
use crate::{guard, library, user_memory};

static REAL_DLOPEN: Real = Real::new(c"dlopen");

/// `dlopen(file, mode)`: see the module documentation.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    core::arch::naked_asm!(
        // Entry: rsp ≡ 8 (mod 16), the caller's return address on top. Two pushes and 8 bytes
        // realign for the call; everything is undone before the jump, so the function jumped
        // to sees the caller's stack and return address exactly.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "mov rdx, [rsp + 24]",
        "call {route}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "jmp rax",
        route = sym route,
    )
}

/// Where `dlopen` goes: the recording wrapper or the real function (see the module docs).
#[cfg(target_arch = "x86_64")]
extern "C" fn route(file: *const c_char, mode: c_int, caller: usize) -> usize {
    let real = REAL_DLOPEN.get().unwrap_or(no_dlopen as *const () as usize);
    // The process-wide state first (main's hook pattern): a process that does not record goes
    // straight to the real dlopen, its caller's return address in place.
    if !recorder::session::may_record() {
        return real;
    }
    let Some(thread) = guard::current() else { return real };
    if thread.in_hook.get() || library::contains(caller) {
        return real;
    }
    if same_library_from_here(&thread, file, caller) {
        return recorded_dlopen as *const () as usize;
    }
    if let Some(span) = Span::begin(Func::Dlopen) {
        let event = Event { fd: -1, arg: mode as u64, extra: 1, ..Event::default() };
        // Safety: `file` is what the application passes to dlopen, which reads it (module docs).
        unsafe { span.finish_with_path(event, Func::Dlopen, false, file) };
    }
    real
}

extern "C" fn no_dlopen(_file: *const c_char, _mode: c_int) -> *mut c_void {
    core::ptr::null_mut()
}

/// Whether the real `dlopen` called from our frame finds what it finds called from `caller`.
fn same_library_from_here(thread: &guard::ThreadState, file: *const c_char, caller: usize) -> bool {
    if file.is_null() {
        return true;
    }
    // Safety: glibc reads the name whatever the call (module docs); at most PATH_BYTES.
    let Some(name) = (unsafe { user_memory::c_string_in_place(file) }) else { return true };
    let has_dst = name.contains(&b'$');
    if name.contains(&b'/') && !has_dst {
        return true;
    }
    thread.internal(|| guard::keeping_errno(|| !has_dst && same_search_path(caller)))
}

const RTLD_DL_LINKMAP: c_int = 2;

/// glibc's `Dl_serinfo` header (`Dl_serpath` entries follow).
#[repr(C)]
struct SerInfo {
    size: usize,
    count: c_uint,
}

/// glibc's `Dl_serpath`.
#[repr(C)]
struct SerPath {
    name: *const c_char,
    flags: c_uint,
}

/// Hash of our own search path (0: not known yet).
static OURS: AtomicU64 = AtomicU64::new(0);

/// Whether the object containing `caller` searches the same directories as libmlprof.so.
#[cold]
#[inline(never)]
fn same_search_path(caller: usize) -> bool {
    let theirs = object_at(caller).and_then(search_path_hash);
    let ours = match OURS.load(Ordering::Relaxed) {
        0 => {
            let hash = object_at(route as *const () as usize).and_then(search_path_hash).unwrap_or(0);
            OURS.store(hash, Ordering::Relaxed);
            hash
        }
        known => known,
    };
    ours != 0 && theirs == Some(ours)
}

/// The link map (glibc's handle) of the object containing `addr`.
fn object_at(addr: usize) -> Option<*mut c_void> {
    // Safety: a zeroed Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    let mut map: *mut c_void = core::ptr::null_mut();
    // Safety: dladdr1 only reads the loader's tables and fills the two out-parameters.
    let found = unsafe { libc::dladdr1(addr as *const c_void, &mut info, &mut map, RTLD_DL_LINKMAP) };
    (found != 0 && !map.is_null()).then_some(map)
}

/// FNV-1a over the directories glibc searches for a bare name dlopen'ed by `map`, in order.
fn search_path_hash(map: *mut c_void) -> Option<u64> {
    let mut buf = [0u64; 1024];
    let mut size = SerInfo { size: 0, count: 0 };
    // Safety: RTLD_DI_SERINFOSIZE fills a Dl_serinfo header; `map` is a live link map.
    if unsafe { libc::dlinfo(map, libc::RTLD_DI_SERINFOSIZE, &mut size as *mut SerInfo as *mut c_void) } != 0
    {
        return None;
    }
    if size.size > core::mem::size_of_val(&buf) || size.size < core::mem::size_of::<SerInfo>() {
        return None;
    }
    let header = buf.as_mut_ptr() as *mut SerInfo;
    // Safety: `buf` is 8-aligned and at least `size.size` bytes, as RTLD_DI_SERINFO asks.
    unsafe {
        header.write(SerInfo { size: size.size, count: size.count });
        if libc::dlinfo(map, libc::RTLD_DI_SERINFO, header as *mut c_void) != 0 {
            return None;
        }
    }
    // Safety: glibc wrote `count` Dl_serpath entries after the header, inside `buf`.
    let paths = unsafe {
        let first =
            (header as *mut u8).add(core::mem::size_of::<SerInfo>().next_multiple_of(8)) as *const SerPath;
        core::slice::from_raw_parts(first, size.count as usize)
    };
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for path in paths {
        // Safety: glibc's entries are NUL-terminated strings inside `buf` (or its own memory).
        let name = unsafe { user_memory::c_string_in_place(path.name) }.unwrap_or_default();
        for &byte in name.iter().chain(&[0]) {
            hash = (hash ^ byte as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Some(hash | 1)
}

/// The recording `dlopen`, jumped to by the trampoline (so it returns to the application).
extern "C" fn recorded_dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    let real = REAL_DLOPEN.get().unwrap_or(no_dlopen as *const () as usize);
    // Safety: the address is glibc's dlopen (or the stand-in), whose prototype this is.
    let real =
        unsafe { crate::real::as_fn::<unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void>(real) };
    let Some(span) = Span::begin(Func::Dlopen) else {
        // Safety: forwarding the caller's arguments unchanged.
        return unsafe { real(file, mode) };
    };
    // Safety: as above.
    let handle = unsafe { real(file, mode) };
    let event = Event { fd: -1, ret: handle as i64, arg: mode as u64, ..Event::default() };
    // Safety: the name the application passed to the real call.
    unsafe { span.finish_with_path(event, Func::Dlopen, handle.is_null(), file) };
    handle
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let real = real!(c"dlclose", unsafe extern "C" fn(*mut c_void) -> c_int, -1);
    let Some(span) = Span::begin(Func::Dlclose) else {
        // Safety: forwarding the caller's argument unchanged.
        return unsafe { real(handle) };
    };
    // Safety: as above.
    let ret = unsafe { real(handle) };
    span.finish(
        Event { fd: -1, ret: ret as i64, arg: handle as u64, ..Event::default() },
        Func::Dlclose,
        ret != 0,
    );
    ret
}
