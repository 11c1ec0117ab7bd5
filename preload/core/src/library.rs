//! Where libmlprof.so itself lies in memory: its executable segment (the code every hook, the
//! recorder and rustix's raw system calls run in). The `dlopen` hook tells its own lookups from
//! the application's by it, and complete mode exempts it from system call dispatch.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

static TEXT_START: AtomicUsize = AtomicUsize::new(0);
static TEXT_END: AtomicUsize = AtomicUsize::new(0);

/// The executable segment of the object this code was linked into (libmlprof.so; a unit-test
/// binary in tests): `[start, end)`, or `None` when the loader cannot say. Found once, with
/// `dladdr` and `dl_iterate_phdr` (neither allocates nor makes a system call); a benign race
/// when two threads ask first at once.
pub fn text_range() -> Option<(usize, usize)> {
    let (start, end) = (TEXT_START.load(Ordering::Relaxed), TEXT_END.load(Ordering::Relaxed));
    if start != 0 && end > start {
        return Some((start, end));
    }
    find_text_range()
}

/// Whether `addr` lies in our own code.
pub fn contains(addr: usize) -> bool {
    text_range().is_some_and(|(start, end)| (start..end).contains(&addr))
}

/// Whether `addr` lies in our own code, from the range found before (false when it was not
/// looked up yet): what a signal handler may ask, since finding the range takes the loader's
/// lock, which the interrupted code may hold.
pub fn contains_known(addr: usize) -> bool {
    let (start, end) = (TEXT_START.load(Ordering::Relaxed), TEXT_END.load(Ordering::Relaxed));
    (start..end).contains(&addr)
}

#[cold]
fn find_text_range() -> Option<(usize, usize)> {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    };
    let here = find_text_range as *const () as *const c_void;
    // Safety: dladdr only reads the loader's tables and fills `info`.
    if unsafe { libc::dladdr(here, &mut info) } == 0 {
        return None;
    }
    let mut found = Search { inside: here as usize, start: 0, end: 0 };
    // Safety: the callback only reads the program headers it is handed, for this call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut Search as *mut c_void) };
    if found.end <= found.start {
        return None;
    }
    TEXT_START.store(found.start, Ordering::Relaxed);
    TEXT_END.store(found.end, Ordering::Relaxed);
    Some((found.start, found.end))
}

struct Search {
    inside: usize,
    start: usize,
    end: usize,
}

/// Takes the executable `PT_LOAD` segment that contains `Search::inside`.
unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // Safety: the loader passes a valid info, and `data` is our `Search` (see the caller).
    let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
    if info.dlpi_phdr.is_null() {
        return 0;
    }
    // Safety: dlpi_phdr points to dlpi_phnum program headers.
    let headers = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    for header in headers {
        if header.p_type != libc::PT_LOAD || header.p_flags & libc::PF_X == 0 {
            continue;
        }
        let start = (info.dlpi_addr as usize).wrapping_add(header.p_vaddr as usize);
        let end = start.wrapping_add(header.p_memsz as usize);
        if (start..end).contains(&search.inside) {
            (search.start, search.end) = (start, end);
            return 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_code_is_inside_our_text_and_the_stack_is_not() {
        let (start, end) = text_range().expect("the loader knows this binary");
        assert!(start < end);
        assert!(contains(find_text_range as *const () as usize));
        assert!(contains(text_range as *const () as usize));
        let local = 0u8;
        assert!(!contains(&local as *const u8 as usize));
    }
}
