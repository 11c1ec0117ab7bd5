//! Reading what the application passed by pointer (a path) without ever faulting on its
//! behalf: libc returns EFAULT for a bad pointer, and the hook must do the same, not crash.
//!
//! A hook reads a path only after the real call: when the call succeeded, or failed with an
//! errno that only comes after the kernel walked the path, the kernel has already read it (at
//! most `PATH_MAX` bytes, which bounds our read too), so it is read in place. Any other failure
//! (`EFAULT`, `EINVAL` from flags checked before the path, `ENOMEM` from `fopen`'s own
//! allocation, anything unknown) copies it with `process_vm_readv`, which reports a bad address
//! as an error instead of a signal; that costs one system call, on those rare failures only.

use core::ffi::c_char;

/// The most bytes read of a path: the kernel's `PATH_MAX`, which is also what a record keeps.
pub const PATH_BYTES: usize = 4096;

/// Whether a call that failed with `errno` proves its path was readable: these errors come
/// from resolving the path, which the kernel does only after copying it in.
pub fn errno_proves_path_read(errno: i32) -> bool {
    matches!(
        errno,
        libc::ENOENT
            | libc::ENOTDIR
            | libc::EACCES
            | libc::EPERM
            | libc::ELOOP
            | libc::EEXIST
            | libc::EISDIR
            | libc::EROFS
            | libc::ETXTBSY
            | libc::ENXIO
            | libc::ENODEV
            | libc::EMFILE
            | libc::ENFILE
            | libc::ENOSPC
            | libc::EDQUOT
            | libc::EOVERFLOW
            | libc::EFBIG
            | libc::EAGAIN
            | libc::EBUSY
            | libc::EINTR
            | libc::EOPNOTSUPP
            | libc::ENAMETOOLONG
            | libc::ESTALE
    )
}

/// The bytes of the NUL-terminated string at `ptr`, read in place, at most [`PATH_BYTES`] of
/// them; `None` for null.
///
/// # Safety
/// `ptr` is null or readable up to its NUL or [`PATH_BYTES`] bytes, whichever comes first
/// (what a successful call, or [`errno_proves_path_read`], shows).
pub unsafe fn c_string_in_place<'a>(ptr: *const c_char) -> Option<&'a [u8]> {
    if ptr.is_null() {
        return None;
    }
    // Safety: guaranteed by the caller.
    let len = (0..PATH_BYTES).find(|&i| unsafe { *ptr.add(i) } == 0).unwrap_or(PATH_BYTES);
    // Safety: the `len` bytes just scanned are readable.
    Some(unsafe { core::slice::from_raw_parts(ptr as *const u8, len) })
}

/// The NUL-terminated string at `ptr` (any value at all), copied into `buf` with a read that
/// cannot fault; `None` for null, unreadable memory, or no NUL within [`PATH_BYTES`].
pub fn c_string_copy(ptr: *const c_char, buf: &mut [u8; PATH_BYTES]) -> Option<&[u8]> {
    if ptr.is_null() {
        return None;
    }
    let len = copy_without_faulting(ptr as usize, buf);
    let copied = buf.get(..len)?;
    let end = copied.iter().position(|&b| b == 0)?;
    copied.get(..end)
}

/// Copies from address `from` into `buf`, page by page, up to the first NUL or the first page
/// that cannot be read; returns the bytes copied.
fn copy_without_faulting(from: usize, buf: &mut [u8; PATH_BYTES]) -> usize {
    const PAGE: usize = 4096;
    let mut done = 0;
    while done < PATH_BYTES {
        let at = from.wrapping_add(done);
        let chunk = (PAGE - at % PAGE).min(PATH_BYTES - done);
        let Some(into) = buf.get_mut(done..done + chunk) else { break };
        let local = libc::iovec { iov_base: into.as_mut_ptr() as *mut libc::c_void, iov_len: chunk };
        let remote = libc::iovec { iov_base: at as *mut libc::c_void, iov_len: chunk };
        // Safety: reads our own address space into `into`; a bad remote address is an error
        // (EFAULT), never a signal.
        let got = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if got <= 0 {
            break;
        }
        let got = got as usize;
        let found_nul = into.get(..got).is_some_and(|bytes| bytes.contains(&0));
        done += got;
        if found_nul || got < chunk {
            break;
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readable_string_is_read_both_ways() {
        let mut buf = [0u8; PATH_BYTES];
        let path = c"/tmp/some/path";
        // Safety: a NUL-terminated literal.
        assert_eq!(unsafe { c_string_in_place(path.as_ptr()) }, Some(&b"/tmp/some/path"[..]));
        assert_eq!(c_string_copy(path.as_ptr(), &mut buf), Some(&b"/tmp/some/path"[..]));
    }

    #[test]
    fn bad_pointers_give_nothing_instead_of_a_fault() {
        let mut buf = [0u8; PATH_BYTES];
        for bad in [1usize, 8, 4095, 0xdead_0000, usize::MAX - 16] {
            assert_eq!(c_string_copy(bad as *const c_char, &mut buf), None, "{bad:#x}");
        }
        // Safety: null is checked first.
        assert_eq!(unsafe { c_string_in_place(core::ptr::null()) }, None);
    }

    #[test]
    fn a_string_that_runs_into_an_unmapped_page_is_not_a_string() {
        // One readable page of non-NUL bytes followed by an inaccessible one.
        // Safety: a fresh private mapping of two pages, protected and unmapped here.
        unsafe {
            let base = libc::mmap(
                core::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            ) as *mut u8;
            assert_ne!(base as *mut libc::c_void, libc::MAP_FAILED);
            core::ptr::write_bytes(base, b'a', 4096);
            libc::mprotect(base.add(4096) as *mut libc::c_void, 4096, libc::PROT_NONE);
            let mut buf = [0u8; PATH_BYTES];
            assert_eq!(c_string_copy(base.add(4000) as *const c_char, &mut buf), None);
            // A NUL before the guard page makes it a string again.
            *base.add(4090) = 0;
            assert_eq!(c_string_copy(base.add(4000) as *const c_char, &mut buf).map(<[u8]>::len), Some(90));
            libc::munmap(base as *mut libc::c_void, 8192);
        }
    }
}
