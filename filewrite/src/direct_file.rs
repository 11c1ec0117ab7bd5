//! Sequential writes that bypass the page cache (`O_DIRECT`) where the file system allows it.
//!
//! At a million records a second the collector's run file grows by 64 MB/s. Written through
//! the page cache, that cost the writer thread ~40 ns of kernel CPU per record (`perf record -e
//! cpu-clock`: copying into pages, ext4's delayed allocation, dirty accounting, writeback
//! submitted from its own context), a third of everything recording cost at that rate; and
//! it filled the page cache with a file nobody reads before the run ends, evicting the job's
//! own cached files (a DataLoader's dataset) and charging the memory to the job's cgroup.
//! With `O_DIRECT` the same bytes go from an aligned buffer to the device.
//!
//! `O_DIRECT` wants block-aligned offsets, lengths and memory. Whole blocks go direct from an
//! aligned staging buffer. What a write leaves of a last partial block (the end of a flush:
//! readers must find every byte handed over) is also written through the page cache, and
//! written again, direct, once its block is complete (the kernel writes back and drops the
//! cached page first). Where the file system refuses `O_DIRECT` (tmpfs before Linux 6.6, some
//! FUSE and network file systems), for what is not a regular file, and for a file not
//! starting at a block boundary, everything is written through the page cache as before.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

/// Alignment of offsets, lengths and memory for direct writes: the largest logical block size
/// of the devices in use (512 or 4096 bytes). A device wanting more refuses the first direct
/// write with `EINVAL`, and the file is then written through the page cache.
pub const BLOCK_BYTES: usize = 4096;

/// Writes bytes one after another from the file's position at creation, direct where it can.
pub struct DirectFile {
    file: File,
    /// Direct writes are on (`O_DIRECT` set on the descriptor).
    direct: bool,
    /// Bytes of the file from `offset` on, not yet written direct: a partial last block, or a
    /// piece of a write whose memory was not block-aligned.
    stage: BlockBuf,
    /// File offset of `stage`'s first byte: a multiple of `BLOCK_BYTES` while direct.
    offset: u64,
    /// The most bytes staged before they are written (`stage` grows to it only if needed).
    stage_limit: usize,
    /// A regular file, written at `offset`; anything else (a pipe, a terminal, /dev/null) is
    /// written where it stands, never direct: a pipe has no offset to write at.
    regular: bool,
}

impl DirectFile {
    /// Wraps `file`, turning direct writes on when the file allows them; `stage_bytes`
    /// (rounded up to whole blocks) is the most copied and written direct at once.
    pub fn new(mut file: File, stage_bytes: usize) -> io::Result<DirectFile> {
        let regular = file.metadata()?.is_file();
        let offset = if regular { file.stream_position()? } else { 0 };
        let direct = regular && offset % BLOCK_BYTES as u64 == 0 && set_direct(&file, true);
        // One block: a partial last block is all that is staged unless pieces arrive unaligned
        // in memory; the stage grows for those.
        let stage = BlockBuf::with_capacity(if direct { BLOCK_BYTES } else { 0 });
        let stage_limit = stage_bytes.div_ceil(BLOCK_BYTES).max(1) * BLOCK_BYTES;
        Ok(DirectFile { file, direct, stage, offset, stage_limit, regular })
    }

    /// Whether bytes are still written direct (false once the file system refused).
    #[cfg(test)]
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Writes the staged whole blocks and keeps what is left of a partial last one.
    fn write_staged_blocks(&mut self) -> io::Result<()> {
        let whole = self.stage.len() / BLOCK_BYTES * BLOCK_BYTES;
        write_blocks(&self.file, &mut self.direct, &self.stage.as_slice()[..whole], self.offset)?;
        self.stage.remove_front(whole);
        self.offset += whole as u64;
        Ok(())
    }

    /// Writes `bytes` through the page cache, which takes them without waiting for the device
    /// (for a writer fallen behind); later writes go direct again. The partial last block
    /// stays staged (it is in the file already), so direct writes stay aligned.
    pub fn write_through_page_cache(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.direct { self.write_cached(bytes) } else { self.write_all(bytes) }
    }

    /// While direct: writes what is staged and then `bytes` through the page cache, and keeps
    /// only the partial last block staged (copied), to be written direct once complete. With
    /// no `bytes`, this is what makes a write's partial last block readable at once.
    fn write_cached(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.stage.is_empty() && bytes.is_empty() {
            return Ok(());
        }
        let staged = self.stage.len() as u64;
        set_direct(&self.file, false);
        let mut written = self.file.write_all_at(self.stage.as_slice(), self.offset);
        if written.is_ok() {
            written = self.file.write_all_at(bytes, self.offset + staged);
        }
        if !set_direct(&self.file, true) {
            self.direct = false;
        }
        written?;
        let end = self.offset + staged + bytes.len() as u64;
        let block_start = end / BLOCK_BYTES as u64 * BLOCK_BYTES as u64;
        if block_start >= self.offset + staged {
            self.stage.clear();
            self.stage.extend_from_slice(&bytes[(block_start - self.offset - staged) as usize..]);
        } else {
            self.stage.extend_from_slice(bytes);
            self.stage.remove_front((block_start - self.offset) as usize);
        }
        self.offset = block_start;
        Ok(())
    }

    /// Turns direct writes off for good, as a refused direct write does.
    #[cfg(test)]
    fn stop_direct(&mut self) {
        self.direct = false;
        set_direct(&self.file, false);
    }
}

impl Write for DirectFile {
    /// Writes all of `bytes` (never a short count) before returning.
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut rest = bytes;
        // Block-aligned memory at a block boundary of the file (a chunk of `BackgroundFile`):
        // its whole blocks go direct from where they are, without a copy.
        if self.direct && self.stage.is_empty() && rest.as_ptr().addr().is_multiple_of(BLOCK_BYTES) {
            let whole = rest.len() / BLOCK_BYTES * BLOCK_BYTES;
            write_blocks(&self.file, &mut self.direct, &rest[..whole], self.offset)?;
            self.offset += whole as u64;
            rest = &rest[whole..];
        }
        while self.direct && !rest.is_empty() {
            let n = rest.len().min(self.stage_limit - self.stage.len());
            self.stage.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if self.stage.len() >= self.stage_limit {
                self.write_staged_blocks()?;
            }
        }
        if self.direct {
            self.write_staged_blocks()?;
            self.write_cached(&[])?;
        } else {
            // Bytes still staged when direct writes were refused (written through the page
            // cache already or not: again does no harm), then the rest.
            if self.regular {
                self.file.write_all_at(self.stage.as_slice(), self.offset)?;
                self.offset += self.stage.len() as u64;
                self.stage.clear();
                self.file.write_all_at(rest, self.offset)?;
                self.offset += rest.len() as u64;
            } else {
                // Never direct, so nothing was staged.
                self.file.write_all(rest)?;
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `blocks` (whole blocks, block-aligned in memory) at `offset`: direct while `direct`;
/// what a refused direct write leaves goes through the page cache, and `direct` turns off.
fn write_blocks(file: &File, direct: &mut bool, blocks: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while *direct && done < blocks.len() {
        match file.write_at(&blocks[done..], offset + done as u64) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                done += n;
                // A partial block (allowed, never seen): the rest goes through the page cache.
                if n % BLOCK_BYTES != 0 {
                    *direct = false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The file system or device refuses direct writes here (alignment, support).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => *direct = false,
            Err(e) => return Err(e),
        }
    }
    if done < blocks.len() {
        if !set_direct(file, false) {
            return Err(io::Error::last_os_error());
        }
        file.write_all_at(&blocks[done..], offset + done as u64)?;
    }
    Ok(())
}

/// Sets or clears `O_DIRECT` on `file`'s open file description; false when refused.
fn set_direct(file: &File, on: bool) -> bool {
    let fd = file.as_raw_fd();
    // Safety: F_GETFL on a descriptor owned by `file`, alive across the call; no memory passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return false;
    }
    let wanted = if on { flags | libc::O_DIRECT } else { flags & !libc::O_DIRECT };
    // Safety: as above, F_SETFL takes an integer argument.
    wanted == flags || unsafe { libc::fcntl(fd, libc::F_SETFL, wanted) } == 0
}

/// One block of memory, aligned as direct writes need.
#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(4096))]
struct Block([u8; BLOCK_BYTES]);

const _: () =
    assert!(std::mem::size_of::<Block>() == BLOCK_BYTES && std::mem::align_of::<Block>() == BLOCK_BYTES);

/// `n` zeroed blocks. (The allocator zeroes memory aligned beyond 16 bytes by writing it: a
/// buffer costs a memset of its size, so buffers start small and grow as they are used.)
fn zeroed_blocks(n: usize) -> Vec<Block> {
    <Block as FromZeros>::new_vec_zeroed(n).unwrap_or_else(|_| {
        std::alloc::handle_alloc_error(
            std::alloc::Layout::array::<Block>(n).expect("a chunk's size fits a Layout"),
        )
    })
}

/// Bytes in block-aligned memory: the chunks handed to the writer thread, which it writes
/// direct from where they are. Like a `Vec<u8>` whose room, once grown, stays (a cleared
/// chunk is reused without being zeroed again).
pub struct BlockBuf {
    blocks: Vec<Block>,
    len: usize,
}

impl BlockBuf {
    /// A buffer with room for `bytes` bytes.
    pub fn with_capacity(bytes: usize) -> BlockBuf {
        BlockBuf { blocks: zeroed_blocks(bytes.div_ceil(BLOCK_BYTES)), len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// All the room, filled or not.
    pub fn capacity(&self) -> usize {
        self.blocks.len() * BLOCK_BYTES
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.blocks.as_bytes()[..self.len]
    }

    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if end > self.capacity() {
            let mut grown = zeroed_blocks(end.div_ceil(BLOCK_BYTES).max(2 * self.blocks.len()));
            grown.as_mut_bytes()[..self.len].copy_from_slice(self.as_slice());
            self.blocks = grown;
        }
        self.blocks.as_mut_bytes()[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }

    /// Drops the first `n` bytes, moving the rest to the front.
    pub fn remove_front(&mut self, n: usize) {
        let n = n.min(self.len);
        self.blocks.as_mut_bytes().copy_within(n..self.len, 0);
        self.len -= n;
    }

    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> std::path::PathBuf {
        // Beside the test program, not in /tmp: /tmp may be a tmpfs that refuses O_DIRECT.
        let exe = std::env::current_exe().unwrap();
        exe.parent().unwrap().join(format!("direct-{name}-{}", std::process::id()))
    }

    fn pattern(len: usize, seed: usize) -> Vec<u8> {
        (0..len).map(|i| ((i * 31 + seed * 7) % 251) as u8).collect()
    }

    #[test]
    fn every_byte_arrives_in_order_and_each_write_is_readable_at_once() {
        let path = temp_path("order");
        let mut out = DirectFile::new(File::create(&path).unwrap(), 64 * 1024).unwrap();
        let mut expected = Vec::new();
        // Writes of every kind: under a block, a block, across blocks, larger than the stage.
        for (i, len) in [1, 4095, 4096, 1, 8191, 100_000, 3, 200_000, 4096 * 16, 7].into_iter().enumerate() {
            let piece = pattern(len, i);
            out.write_all(&piece).unwrap();
            expected.extend_from_slice(&piece);
            assert_eq!(std::fs::read(&path).unwrap(), expected, "after write {i} of {len} bytes");
        }
        drop(out);
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn block_aligned_chunks_and_unaligned_pieces_mix() {
        let path = temp_path("chunks");
        let mut out = DirectFile::new(File::create(&path).unwrap(), 16 * 1024).unwrap();
        let mut expected = Vec::new();
        for (i, len) in [3 * BLOCK_BYTES, 10, 2 * BLOCK_BYTES + 7, 5 * BLOCK_BYTES, 1].into_iter().enumerate()
        {
            // Chunks in block-aligned memory (written from where they are while no partial
            // block is staged), then the same bytes from a Vec (copied through the stage).
            let mut chunk = BlockBuf::with_capacity(len);
            chunk.extend_from_slice(&pattern(len, i));
            out.write_all(chunk.as_slice()).unwrap();
            out.write_all(&pattern(len, i + 100)).unwrap();
            expected.extend_from_slice(&pattern(len, i));
            expected.extend_from_slice(&pattern(len, i + 100));
            assert_eq!(std::fs::read(&path).unwrap(), expected, "after chunk {i}");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn writes_through_the_page_cache_and_direct_mix() {
        let path = temp_path("mixed");
        let mut out = DirectFile::new(File::create(&path).unwrap(), 16 * 1024).unwrap();
        let mut expected = Vec::new();
        for (i, len) in
            [3 * BLOCK_BYTES + 100, 50, 2 * BLOCK_BYTES, 7, 5 * BLOCK_BYTES + 1].into_iter().enumerate()
        {
            let piece = pattern(len, i);
            if i % 2 == 0 {
                out.write_through_page_cache(&piece).unwrap();
            } else {
                out.write_all(&piece).unwrap();
            }
            expected.extend_from_slice(&piece);
            assert_eq!(std::fs::read(&path).unwrap(), expected, "after write {i}");
        }
        let direct = out.is_direct();
        out.write_all(&pattern(4 * BLOCK_BYTES, 9)).unwrap();
        expected.extend_from_slice(&pattern(4 * BLOCK_BYTES, 9));
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        assert_eq!(out.is_direct(), direct, "still direct after page-cache writes, where it was");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_block_buf_grows_keeps_its_bytes_and_removes_from_the_front() {
        let mut buf = BlockBuf::with_capacity(10);
        assert_eq!(buf.capacity(), BLOCK_BYTES);
        buf.extend_from_slice(&pattern(5000, 1));
        buf.extend_from_slice(&pattern(9000, 2));
        let mut expected = pattern(5000, 1);
        expected.extend_from_slice(&pattern(9000, 2));
        assert_eq!(buf.as_slice(), expected.as_slice());
        assert!(buf.as_slice().as_ptr().addr().is_multiple_of(BLOCK_BYTES));
        buf.remove_front(4096);
        assert_eq!(buf.as_slice(), &expected[4096..]);
        buf.truncate(3);
        assert_eq!(buf.as_slice(), &expected[4096..4099]);
        buf.clear();
        assert!(buf.is_empty() && buf.capacity() >= 14_000);
    }

    #[test]
    fn a_regular_file_on_a_disk_file_system_is_written_direct() {
        let path = temp_path("direct");
        let file = File::create(&path).unwrap();
        // Whether the target directory's file system takes O_DIRECT decides what is expected.
        let supported = set_direct(&file, true) && {
            let mut block = BlockBuf::with_capacity(BLOCK_BYTES);
            block.extend_from_slice(&[0; BLOCK_BYTES]);
            file.write_at(block.as_slice(), 0).is_ok()
        };
        set_direct(&file, false);
        file.set_len(0).unwrap();
        let mut out = DirectFile::new(file, 8192).unwrap();
        out.write_all(&pattern(3 * BLOCK_BYTES + 5, 1)).unwrap();
        assert_eq!(out.is_direct(), supported);
        assert_eq!(std::fs::read(&path).unwrap(), pattern(3 * BLOCK_BYTES + 5, 1));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn what_is_not_a_regular_file_is_written_as_before() {
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
        let mut out = DirectFile::new(null, 8192).unwrap();
        assert!(!out.is_direct());
        out.write_all(&pattern(10_000, 2)).unwrap();
    }

    #[test]
    fn a_pipe_gets_every_byte_in_order() {
        let (read_end, write_end) = std::io::pipe().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut { read_end }, &mut got).unwrap();
            got
        });
        // A pipe has no offset: positioned writes fail there (ESPIPE), plain ones do not.
        let mut out = DirectFile::new(File::from(std::os::fd::OwnedFd::from(write_end)), 8192).unwrap();
        let mut expected = Vec::new();
        for (i, len) in [5, 4096, 70_000, 1].into_iter().enumerate() {
            out.write_all(&pattern(len, i)).unwrap();
            expected.extend_from_slice(&pattern(len, i));
        }
        drop(out);
        assert_eq!(reader.join().unwrap(), expected);
    }

    #[test]
    fn a_file_not_starting_at_a_block_boundary_is_written_through_the_page_cache() {
        let path = temp_path("unaligned");
        let mut file = File::create(&path).unwrap();
        file.write_all(b"header").unwrap();
        let mut out = DirectFile::new(file, 8192).unwrap();
        assert!(!out.is_direct());
        out.write_all(&pattern(20_000, 3)).unwrap();
        let mut expected = b"header".to_vec();
        expected.extend_from_slice(&pattern(20_000, 3));
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_refused_direct_write_falls_back_without_losing_bytes() {
        // A refusal (EINVAL from a direct write) cannot be provoked on demand: direct writes
        // are turned off between two writes, as `write_whole_blocks` does on one, with a
        // partial block staged.
        let path = temp_path("fallback");
        let mut out = DirectFile::new(File::create(&path).unwrap(), 8192).unwrap();
        out.write_all(&pattern(5000, 4)).unwrap();
        let was_direct = out.is_direct();
        out.stop_direct();
        out.write_all(&pattern(9000, 5)).unwrap();
        let mut expected = pattern(5000, 4);
        expected.extend_from_slice(&pattern(9000, 5));
        assert_eq!(std::fs::read(&path).unwrap(), expected, "direct before: {was_direct}");
        std::fs::remove_file(&path).unwrap();
    }
}
