//! One perf event's mmap ring: the kernel writes records at `data_head`, we read from
//! `data_tail`. [`split_records`] cuts the readable bytes into records and knows nothing of
//! the mapping, so the unit tests run it over a plain buffer.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::shared_map::SharedMapping;

/// Offsets in `struct perf_event_mmap_page` (the first page of the mapping).
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
const DATA_OFFSET: usize = 1040;
const DATA_SIZE: usize = 1048;

/// The bytes of one record: in place in the ring, or copied out when it wraps the ring's end.
pub(crate) enum RecordBytes<'a> {
    Whole(&'a [u8]),
    Wrapped(Vec<u8>),
}

impl RecordBytes<'_> {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            RecordBytes::Whole(bytes) => bytes,
            RecordBytes::Wrapped(bytes) => bytes,
        }
    }
}

/// The readable bytes of a ring are `first` followed by `second` (the part past the ring's end
/// that continues at its start). Hands each record to `take`, in order, until `take` answers
/// false (that record stays for the next pass); returns the bytes consumed, what `data_tail`
/// advances by. A header whose size is impossible (under 8 bytes, or past what the kernel
/// published) means the ring cannot be trusted: everything readable is consumed unread.
pub(crate) fn split_records<'a>(
    first: &'a [u8],
    second: &'a [u8],
    mut take: impl FnMut(RecordBytes<'a>) -> bool,
) -> usize {
    let total = first.len() + second.len();
    let mut at = 0;
    while total - at >= 8 {
        let mut header = [0u8; 8];
        copy_out(first, second, at, &mut header);
        let size = usize::from(u16::from_ne_bytes([header[6], header[7]]));
        if size < 8 || size > total - at {
            return total;
        }
        let record = if at + size <= first.len() {
            RecordBytes::Whole(&first[at..at + size])
        } else if at >= first.len() {
            RecordBytes::Whole(&second[at - first.len()..at - first.len() + size])
        } else {
            let mut bytes = vec![0u8; size];
            copy_out(first, second, at, &mut bytes);
            RecordBytes::Wrapped(bytes)
        };
        if !take(record) {
            return at;
        }
        at += size;
    }
    at
}

/// Copies `out.len()` bytes from offset `at` of `first ++ second`.
fn copy_out(first: &[u8], second: &[u8], at: usize, out: &mut [u8]) {
    for (i, byte) in out.iter_mut().enumerate() {
        let offset = at + i;
        *byte = if offset < first.len() { first[offset] } else { second[offset - first.len()] };
    }
}

/// A mapped ring: one header page and `2^n` data pages.
pub(crate) struct Ring {
    /// Declared before `fd`, so dropped first: the event is closed after its mapping is gone.
    mapping: SharedMapping,
    data_offset: usize,
    data_size: usize,
    pub(crate) fd: OwnedFd,
}

impl Ring {
    /// Maps `data_pages` (a power of two) data pages of the event `fd`; gives `fd` back with
    /// the error when the kernel refuses.
    pub(crate) fn map(fd: OwnedFd, data_pages: usize) -> Result<Ring, (io::Error, OwnedFd)> {
        let page = page_size();
        // The kernel decides the ring's contents; we only ever write `data_tail`.
        let mapping = match SharedMapping::new(fd.as_fd(), (data_pages + 1) * page) {
            Ok(mapping) => mapping,
            Err(err) => return Err((err, fd)),
        };
        let base = mapping.base();
        // Safety: the header page is mapped; these two fields are written by the kernel once,
        // before mmap returned (Linux 4.1+; zero before, when the data follows the header page).
        let (offset, size) = unsafe {
            (
                base.add(DATA_OFFSET).cast::<u64>().read_volatile(),
                base.add(DATA_SIZE).cast::<u64>().read_volatile(),
            )
        };
        let (data_offset, data_size) =
            if size == 0 { (page, data_pages * page) } else { (offset as usize, size as usize) };
        Ok(Ring { mapping, data_offset, data_size, fd })
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // Safety: `offset` is one of the 8-aligned u64 fields of the header page, which stays
        // mapped as long as `self`; the kernel accesses them atomically too.
        unsafe { AtomicU64::from_ptr(self.mapping.base().add(offset).cast::<u64>()) }
    }

    /// The readable bytes, split at the ring's end, and the tail they start at. The acquire
    /// load of `data_head` pairs with the kernel's write barrier before it publishes the head:
    /// the bytes before it are complete.
    pub(crate) fn readable(&self) -> (&[u8], &[u8], u64) {
        let head = self.word(DATA_HEAD).load(Ordering::Acquire);
        let tail = self.word(DATA_TAIL).load(Ordering::Relaxed);
        let available = (head.wrapping_sub(tail) as usize).min(self.data_size);
        let start = (tail as usize) & (self.data_size - 1);
        let first_len = available.min(self.data_size - start);
        // Safety: the kernel does not write `tail..head` until we move `data_tail` past it,
        // and both parts lie inside the data area.
        let (first, second) = unsafe {
            let data = self.mapping.base().add(self.data_offset);
            (
                std::slice::from_raw_parts(data.add(start), first_len),
                std::slice::from_raw_parts(data, available - first_len),
            )
        };
        (first, second, tail)
    }

    /// Gives `consumed` bytes after `tail` back to the kernel. The release store orders our
    /// reads of them before the kernel may overwrite them.
    pub(crate) fn release(&self, tail: u64, consumed: usize) {
        self.word(DATA_TAIL).store(tail.wrapping_add(consumed as u64), Ordering::Release);
    }
}

pub(crate) fn page_size() -> usize {
    // Safety: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `size` bytes: header (type, misc 0, size) then the byte `fill`.
    fn record(kind: u32, size: u16, fill: u8) -> Vec<u8> {
        let mut bytes = kind.to_ne_bytes().to_vec();
        bytes.extend_from_slice(&0u16.to_ne_bytes());
        bytes.extend_from_slice(&size.to_ne_bytes());
        bytes.resize(usize::from(size), fill);
        bytes
    }

    /// A 64-byte ring whose tail is at 40: records of 16, 24 (wrapping 8 bytes past the end),
    /// 16, as the kernel lays them out.
    fn wrapped_ring() -> (Vec<u8>, usize, usize) {
        let stream: Vec<u8> = [record(9, 16, 0xa1), record(10, 24, 0xb2), record(9, 16, 0xc3)].concat();
        let mut ring = vec![0u8; 64];
        let tail = 40;
        for (i, byte) in stream.iter().enumerate() {
            ring[(tail + i) % 64] = *byte;
        }
        (ring, tail, stream.len())
    }

    #[test]
    fn a_record_across_the_ring_end_is_read_whole() {
        let (ring, tail, len) = wrapped_ring();
        let (first, second) = (&ring[tail..], &ring[..len - (64 - tail)]);
        let mut seen = Vec::new();
        let consumed = split_records(first, second, |r| {
            let wrapped = matches!(r, RecordBytes::Wrapped(_));
            seen.push((r.bytes().to_vec(), wrapped));
            true
        });
        assert_eq!(consumed, 56);
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0], (record(9, 16, 0xa1), false));
        assert_eq!(seen[1], (record(10, 24, 0xb2), true), "the second record wraps");
        assert_eq!(seen[2], (record(9, 16, 0xc3), false), "the third lies at the ring's start");
    }

    #[test]
    fn a_refused_record_stays_for_the_next_pass() {
        let (ring, tail, len) = wrapped_ring();
        let (first, second) = (&ring[tail..], &ring[..len - (64 - tail)]);
        let mut taken = 0;
        let consumed = split_records(first, second, |_| {
            taken += 1;
            taken < 3
        });
        assert_eq!((consumed, taken), (40, 3), "two records consumed, the third offered and left");
    }

    #[test]
    fn an_impossible_size_drops_what_is_readable() {
        let mut bytes = record(9, 16, 1);
        bytes.extend(record(9, 4, 0));
        bytes.extend([0u8; 4]);
        let mut seen = 0;
        assert_eq!(
            split_records(&bytes, &[], |_| {
                seen += 1;
                true
            }),
            24
        );
        assert_eq!(seen, 1);
        let past_head = record(9, 32, 2);
        assert_eq!(split_records(&past_head[..16], &[], |_| panic!("no record")), 16);
    }
}
