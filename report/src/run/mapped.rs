//! A run file mapped into memory, for a conversion that reads its records where they lie
//! instead of copying them: the kernel's copy of the file into the reader's buffer was 13 % of
//! a conversion's CPU (`_copy_to_iter`, ~3.5 GB/s on these VMs).
//!
//! The mapping is read-only and private, made once at the file's length when opened; the
//! collector only ever appends to a run file, so what is mapped does not change under the
//! reader. (A file truncated by someone else while it is read would end the process with
//! SIGBUS: the price of any mapped reader, and why this one is used for conversions only.)
//! Pages read are released as the conversion moves on ([`Mapping::release_through`]), so the
//! process's resident memory stays that of its look-ahead window, not of the file.

use std::cell::Cell;
use std::fs::File;
use std::path::Path;

use rustix::mm::{Advice, MapFlags, ProtFlags, madvise, mmap, munmap};

/// Bytes released at once: one `madvise` per this much of the file read.
const RELEASE_BYTES: usize = 8 << 20;
/// What released stretches are cut at: a multiple of every page size Linux has (4, 16 and
/// 64 KiB), so no page size need be asked for (rustix's `page_size` reads the auxiliary vector
/// its own way, which valgrind's does not survive).
const RELEASE_ALIGN: usize = 64 << 10;

/// A whole file, mapped read-only.
pub(crate) struct Mapping {
    base: *mut std::ffi::c_void,
    len: usize,
    /// Bytes from the start whose pages were released.
    released: Cell<usize>,
}

impl Mapping {
    /// Maps `path`; None where it cannot be mapped (an empty file, not a regular file, a
    /// file system without mappings), which the caller reads the usual way.
    pub(crate) fn open(path: &Path) -> Option<Mapping> {
        let file = File::open(path).ok()?;
        let meta = file.metadata().ok()?;
        let len = usize::try_from(meta.len()).ok()?;
        if !meta.is_file() || len == 0 {
            return None;
        }
        // Safety: a new read-only private mapping of `len` bytes of an open file, placed by the
        // kernel (no address given): it aliases no memory of ours. It stays valid after `file`
        // is closed, until `Drop` unmaps it.
        let base =
            unsafe { mmap(std::ptr::null_mut(), len, ProtFlags::READ, MapFlags::PRIVATE, &file, 0) }.ok()?;
        // Safety: advice on the mapping just made, over its length; read ahead and drop behind
        // (a hint: failure changes nothing).
        let _ = unsafe { madvise(base, len, Advice::Sequential) };
        Some(Mapping { base, len, released: Cell::new(0) })
    }

    /// The file's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        // Safety: `base` is a live read-only mapping of `len` bytes (until `Drop`), and nothing
        // writes through it; the slice borrows `self`, so it cannot outlive the mapping.
        unsafe { std::slice::from_raw_parts(self.base.cast::<u8>(), self.len) }
    }

    /// Releases the pages of the file up to the end of `read` (in [`Mapping::bytes`])
    /// from the process's memory, once a [`RELEASE_BYTES`] stretch of them was read: the file
    /// stays cached by the kernel, the process stops holding it. The caller reads nothing
    /// before the end of `read` again (reading it would only fault the pages in again).
    pub(crate) fn release_through<T>(&self, read: &[T]) {
        let (start, end) = (read.as_ptr_range().start.addr(), read.as_ptr_range().end.addr());
        if start < self.base.addr() || end > self.base.addr() + self.len {
            // Not in the mapping (records the reader had to copy): nothing is known read.
            return;
        }
        let end = end - self.base.addr();
        let end = end / RELEASE_ALIGN * RELEASE_ALIGN;
        let released = self.released.get();
        if end < released + RELEASE_BYTES {
            return;
        }
        // Safety: pages inside the mapping (`released` and `end` are multiples of
        // RELEASE_ALIGN, hence of the page size, within `len`; `base` is page-aligned) that
        // the caller will not read again; on a private read-only file mapping,
        // MADV_DONTNEED only drops them from the page tables, and a later read of them would
        // fault them in from the file again, with the same bytes: slices of them stay valid.
        let _ = unsafe { madvise(self.base.byte_add(released), end - released, Advice::LinuxDontNeed) };
        self.released.set(end);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Safety: unmaps the mapping made in `open`, exactly once; no slice of it outlives
        // `self` (`bytes` borrows it).
        let _ = unsafe { munmap(self.base, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_file_reads_as_its_bytes_and_released_pages_still_read_the_same() {
        let path =
            std::env::current_exe().unwrap().with_file_name(format!("mapped-{}.bin", std::process::id()));
        let data: Vec<u8> = (0..3 * RELEASE_BYTES + 5).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let map = Mapping::open(&path).unwrap();
        let bytes = map.bytes();
        assert!(bytes == data.as_slice());
        map.release_through(&bytes[..RELEASE_BYTES + 100]);
        map.release_through(&bytes[RELEASE_BYTES..2 * RELEASE_BYTES + 4096 * 3]);
        let released = map.released.get();
        assert_eq!(released, (2 * RELEASE_BYTES + 4096 * 3) / RELEASE_ALIGN * RELEASE_ALIGN);
        // Memory outside the mapping releases nothing.
        map.release_through(&data[..]);
        assert_eq!(map.released.get(), released);
        // Released pages are dropped from the process, not from the file.
        assert!(map.bytes() == data.as_slice());
        std::fs::remove_file(&path).unwrap();
        assert!(Mapping::open(Path::new("/dev/null")).is_none());
    }
}
