//! A shared read-write mapping of a whole descriptor (the ring segment's file, a perf event's
//! ring), unmapped when dropped: the one `mmap` of the collector's shared memory.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

pub(crate) struct SharedMapping {
    base: *mut u8,
    len: usize,
}

// Safety: plain shared memory owned by this value; the pointer is not tied to the thread that
// mapped it.
unsafe impl Send for SharedMapping {}

impl SharedMapping {
    /// Maps the first `len` bytes of `fd`, shared, readable and writable.
    pub(crate) fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<SharedMapping> {
        // Safety: a fresh mapping the kernel places; what it holds is the descriptor's, and
        // nothing refers to it before this returns.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMapping { base: base.cast(), len })
    }

    /// Its first byte (page aligned); valid for the length mapped while `self` lives.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // Safety: the mapping made in `new`, unmapped once; its owner keeps no reference into
        // it past its own drop.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
