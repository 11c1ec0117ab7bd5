//! The native caller of a hooked call (`--sites` on a thread that runs no Python): the return
//! address into the code that called our exported function, and the module that code lies in.
//!
//! **Finding it.** The hook's own frames are ours, compiled with frame pointers (the build sets
//! `-C force-frame-pointers=yes`, `.cargo/config.toml`; `build.rs` turns this reader on only
//! when it sees the flag), so [`address`] follows the frame-pointer chain from its own frame
//! through ours and stops at the first return address outside libmlprof.so: the caller's.
//! It never follows a frame pointer of foreign code: the chain is left as soon as a return
//! address leaves our text, and a frame pointer that is not aligned, not above the one before
//! or implausibly far from it ends the walk with no caller. Every frame between a hook's entry
//! and this reader is one of ours: hooks call nothing precompiled (std's non-generic code has no
//! frame pointers) on their way to the recorder.
//!
//! **Naming it** (cold, once per address a process meets): glibc's `_dl_find_object` (2.35,
//! lock-free and without system calls: it is the unwinders' lookup) gives the module's link map:
//! its path, and its load bias, which turns the address into the module's own (ELF virtual)
//! address, the same in every process that maps it. The main program's link map has no name:
//! its path is read from `/proc/self/exe` (one system call, on this cold path only). The
//! reports name the function from the module's symbol table.
//!
//! Failure behaviour: no frame pointers in this build, an older glibc, an address in no module
//! → no caller (0 / `None`); the call goes without a site and the reports count it.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, Ordering};

use crate::library;
use crate::real::Real;

/// The most of our own frames between a hook's entry and [`address`].
const MAX_OWN_FRAMES: usize = 12;
/// The largest plausible distance between two of our frames (no hook frame is this large).
const MAX_FRAME_BYTES: usize = 64 << 10;

static READY: AtomicBool = AtomicBool::new(false);
static FIND_OBJECT: Real = Real::new(c"_dl_find_object");

/// Prepares the reader (at join time, with the guard held: it may call `dlsym` and the loader's
/// `dl_iterate_phdr`). Whether native callers can be found in this process.
#[cold]
pub fn configure() -> bool {
    let ready = cfg!(mlprof_frame_pointers) && library::text_range().is_some() && FIND_OBJECT.get().is_some();
    READY.store(ready, Ordering::Relaxed);
    ready
}

/// The return address into the code that called the hook this thread is in (0: not found).
/// No lock, allocation or system call; reads only our own frames.
#[inline(never)]
pub fn address() -> usize {
    if !READY.load(Ordering::Relaxed) {
        return 0;
    }
    walk(frame_pointer())
}

#[cfg(mlprof_frame_pointers)]
fn walk(mut frame: usize) -> usize {
    for _ in 0..MAX_OWN_FRAMES {
        if frame == 0 || !frame.is_multiple_of(8) {
            return 0;
        }
        // Safety: `frame` is the frame record of a function of ours, all built with frame
        // pointers (see the module): the first it is `address`'s own; after that, the record
        // its callee (ours too) saved, reached only while the return address lies in our text.
        // A record is two words: the caller's frame pointer, then the return address.
        let (next, returns_to) = unsafe { (*(frame as *const usize), *((frame + 8) as *const usize)) };
        if !library::contains_known(returns_to) {
            return returns_to;
        }
        if next <= frame || next - frame > MAX_FRAME_BYTES {
            return 0;
        }
        frame = next;
    }
    0
}

#[cfg(not(mlprof_frame_pointers))]
fn walk(_frame: usize) -> usize {
    0
}

/// This function's frame pointer (its own frame record, `address` being `inline(never)` and
/// this `inline(always)`).
#[inline(always)]
fn frame_pointer() -> usize {
    let frame: usize;
    #[cfg(target_arch = "x86_64")]
    // Safety: reads a register.
    unsafe {
        core::arch::asm!("mov {}, rbp", out(reg) frame, options(nomem, nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // Safety: reads a register.
    unsafe {
        core::arch::asm!("mov {}, x29", out(reg) frame, options(nomem, nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        frame = 0;
    }
    frame
}

/// glibc's `struct dl_find_object` (2.35): the fields we read, then room for the rest (its
/// size is fixed by the ABI; the spare words also cover `dlfo_eh_dbase`/`dlfo_eh_count` where a
/// target has them).
#[repr(C)]
struct FoundObject {
    flags: u64,
    map_start: *mut c_void,
    map_end: *mut c_void,
    link_map: *const LinkMap,
    rest: [u64; 12],
}

/// The public head of glibc's `struct link_map` (`<link.h>`).
#[repr(C)]
struct LinkMap {
    load_bias: usize,
    name: *const u8,
}

/// A native caller named: the module's path (its length in the buffer given) and the address
/// within the module (the return address less the module's load bias).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Named {
    pub path_len: usize,
    pub module_address: u64,
}

/// Names the module that `address` (from [`address`]) lies in, its path into `path`. Cold.
#[cold]
pub fn describe(address: usize, path: &mut [u8]) -> Option<Named> {
    let find = FIND_OBJECT.get()?;
    type Find = unsafe extern "C" fn(*mut c_void, *mut FoundObject) -> c_int;
    let mut found = FoundObject {
        flags: 0,
        map_start: core::ptr::null_mut(),
        map_end: core::ptr::null_mut(),
        link_map: core::ptr::null(),
        rest: [0; 12],
    };
    // Safety: `_dl_find_object`'s prototype; it fills `found` (at least as large as glibc's
    // struct) and reads nothing at `address`.
    if unsafe { crate::real::as_fn::<Find>(find)(address as *mut c_void, &mut found) } != 0
        || found.link_map.is_null()
    {
        return None;
    }
    // Safety: a link map the loader handed out, of a module mapped now (the caller's code
    // lies in it, and returns to it).
    let map = unsafe { &*found.link_map };
    let module_address = address.checked_sub(map.load_bias)? as u64;
    let name = if map.name.is_null() {
        &[][..]
    } else {
        // Safety: the loader's NUL-terminated path of a loaded module (empty for the program).
        unsafe { core::ffi::CStr::from_ptr(map.name.cast()) }.to_bytes()
    };
    let path_len = if name.is_empty() { program_path(path)? } else { crate::sys::copy_prefix(path, name) };
    Some(Named { path_len, module_address })
}

/// The main program's path, from `/proc/self/exe`.
fn program_path(path: &mut [u8]) -> Option<usize> {
    // Safety: readlink writes at most `path.len()` bytes into `path`.
    let len = unsafe { libc::readlink(c"/proc/self/exe".as_ptr(), path.as_mut_ptr().cast(), path.len()) };
    (len > 0).then_some(len as usize)
}
