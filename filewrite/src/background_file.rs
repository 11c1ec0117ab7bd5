//! A file written by a thread of its own, so that its producer never waits on the disk: the
//! collector's drain passes (a lane fills in milliseconds at a burst's rate), the converter's
//! event loop.
//!
//! At a million records a second the collector writes 64 MB/s, and ext4 throttles a writer
//! that dirties pages faster than writeback cleans them: `write` calls of the drain thread were
//! seen blocking up to 68 ms (26 of 301 over 10 ms in a 5 s run, 1.1 s in all), long enough for
//! a producer's lane to fill and drop. Here the producer only copies bytes into 1 MiB chunks
//! and hands full chunks to the `mlprof-writer` thread through a bounded queue; when the disk
//! falls 64 chunks behind, handing over waits, as writing did before, so memory stays bounded.
//! `flush` hands the partial chunk over without waiting for the disk: the file's prefix is
//! readable a moment later (the collector flushes once a second), and `close` writes
//! everything and reports the first error.
//!
//! The writer thread writes the file direct, past the page cache (`direct_file`), so full
//! chunks are cut at block boundaries of the file: what a cut leaves over starts the next
//! chunk. A direct write waits for the device, and this VM's disk stalls a write now and then
//! for a few hundred milliseconds (bursts of two threads writing flat out, 300 MB/s of
//! records, lost a sixth of their records in one run of ten with a 16-chunk queue). So the
//! queue holds 64 chunks (~200 ms of such a burst, 1 s at a million records a second; memory
//! only while the disk is behind), and when more than `BEHIND_CHUNKS` wait, chunks go through
//! the page cache, which takes them at once, until the writer has caught up. So do the
//! partial chunks of flushes, for which a direct write costs more than it saves.
//!
//! At a job's everyday rates the collector's producer writes small chunks itself
//! ([`BackgroundFile::write_small_now`], and `flush`): when nothing waits for the writer thread
//! and the chunk, and what was written since the last such call, are at most `CALLER_WRITE_MAX`
//! bytes, they go through the page cache from the caller's thread and the chunk is reused at
//! once (at a burst's rates everything still goes the writer thread's way, direct). At 10,000
//! calls a second a pass's 64 KB frame was otherwise copied into a 1 MiB chunk whose pages
//! were last written two seconds before, and in some hours on these VMs a write to a page not
//! written lately costs ~14 µs (`perf record`: that copy was a quarter of the collector's CPU,
//! and growing the first chunks to 1 MiB, zeroing fresh pages, another quarter of a 10 s
//! run's); written each pass, the chunk's few pages stay hot, and the writer thread is not
//! woken at all. A caller's write that took long (the page cache throttles writers while the
//! job itself dirties pages faster than the disk takes them) sends its bytes to the writer
//! thread for a while again.
//!
//! A producer for which waiting is harmless (`mlprof convert`, `mlprof merge`) takes the
//! other policy, [`BackgroundFile::paced`]: four chunks queued, every full chunk direct, no
//! writes from its own thread.

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::direct_file::{BLOCK_BYTES, BlockBuf, DirectFile};

/// Bytes handed to the writer thread at once.
const CHUNK_BYTES: usize = 1 << 20;
/// Room a new chunk starts with: it grows to `CHUNK_BYTES` only where the call rate fills it
/// (zeroing a chunk's room costs a memset of it; a run at a thousand calls a second hands over
/// ~64 KB a second, and paid 2 ms at start for two 1 MiB buffers).
const FIRST_CHUNK_BYTES: usize = 64 << 10;
/// Chunks that may wait for the disk before handing over waits too (64 MiB).
const QUEUED_CHUNKS: usize = 64;
/// Chunks waiting beyond which the writer writes through the page cache.
const BEHIND_CHUNKS: usize = 4;
/// The queue of a producer that may wait for the disk ([`BackgroundFile::paced`]): enough to
/// keep the disk busy while the producer fills the next chunk.
const PACED_CHUNKS: usize = 4;
/// Emptied chunks kept for reuse.
const SPARE_CHUNKS: usize = 16;
/// The most bytes the caller's thread writes itself: a pass's records at a few tens of
/// thousands of calls a second. More go to the writer thread, which a full chunk wakes anyway.
const CALLER_WRITE_MAX: usize = 256 << 10;
/// The least bytes [`BackgroundFile::write_small_now`] writes: fewer wait in the chunk for the
/// next call or the flush. A write costs a few system calls (the page cache's, and turning
/// `O_DIRECT` off and on): at 1,000 calls a second (64 KB a second) a write or two a second
/// (the chunk reaching this, and the flush); at 10,000 a pass gathers ~64 KB, written each pass.
const CALLER_WRITE_MIN: usize = 48 << 10;
/// A caller's write that took longer than this was throttled by the page cache: the caller's
/// bytes go to the writer thread for `CALLER_WRITE_BACKOFF`.
const CALLER_WRITE_SLOW: Duration = Duration::from_millis(10);
const CALLER_WRITE_BACKOFF: Duration = Duration::from_secs(10);

/// A [`Write`] whose bytes a background thread writes to a file, in order.
pub struct BackgroundFile {
    chunk: BlockBuf,
    /// Chunks for the writer, each with whether it is full (not a flush's partial one).
    to_writer: Option<SyncSender<(Chunk, bool)>>,
    /// Emptied chunks coming back for reuse (the queue then costs no allocations).
    spare: Receiver<BlockBuf>,
    /// Emptied buffers of [`BackgroundFile::write_owned`] coming back for reuse.
    spare_owned: Receiver<Vec<u8>>,
    writer: Option<JoinHandle<io::Result<()>>>,
    /// Bytes handed over so far: where the current chunk starts in the file.
    handed: u64,
    /// Chunks handed over and not yet written.
    backlog: Arc<AtomicUsize>,
    /// The sink, shared with the writer thread, for the caller's own writes.
    sink: Arc<Mutex<dyn ChunkSink + Send>>,
    /// The most bytes the caller's thread writes itself (0: none).
    caller_write_max: usize,
    /// Until when the caller's bytes go to the writer thread (a write of its own was slow).
    caller_writes_after: Option<Instant>,
    /// Where the file stood (`handed` + the chunk) at the last `write_small_now` or `flush`:
    /// what was written since is a pass's bytes, for the collector.
    checked_at: u64,
}

/// Bytes for the writer thread: a chunk copied into block-aligned memory, or a caller's own
/// buffer whose bytes from `start` on are whole blocks, block-aligned in memory.
enum Chunk {
    Blocks(BlockBuf),
    Owned { bytes: Vec<u8>, start: usize },
}

impl Chunk {
    fn as_slice(&self) -> &[u8] {
        match self {
            Chunk::Blocks(blocks) => blocks.as_slice(),
            Chunk::Owned { bytes, start } => &bytes[*start..],
        }
    }
}

/// Where the writer thread puts chunks: in order, each either the usual way or (when the
/// writer is behind) through the page cache.
pub trait ChunkSink: Write {
    /// Writes `bytes` without waiting for the device where the sink can.
    fn write_without_waiting(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all(bytes)
    }
}

impl ChunkSink for DirectFile {
    fn write_without_waiting(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_through_page_cache(bytes)
    }
}

impl BackgroundFile {
    /// Starts the writer thread for `file`, for a producer that must not wait on the disk
    /// (the collector's drain): a deep queue, and the page cache when the disk falls behind.
    pub fn new(file: File) -> io::Result<BackgroundFile> {
        BackgroundFile::with_sink(
            DirectFile::new(file, CHUNK_BYTES)?,
            QUEUED_CHUNKS,
            BEHIND_CHUNKS,
            CALLER_WRITE_MAX,
        )
    }

    /// Starts the writer thread for `file`, for a producer that may wait on the disk (a
    /// conversion): a short queue, always direct. Memory stays a few chunks whatever the
    /// disk's speed (a deep queue held 60 MiB more while a 20 GB Chrome trace was written),
    /// and no chunk costs the page cache's CPU.
    pub fn paced(file: File) -> io::Result<BackgroundFile> {
        BackgroundFile::with_sink(DirectFile::new(file, CHUNK_BYTES)?, PACED_CHUNKS, usize::MAX, 0)
    }

    /// The writer thread for `sink`: at most `queued` chunks wait for it; beyond `behind`
    /// waiting, it writes without waiting for the device. Chunks of up to `caller_write_max`
    /// bytes the caller may write itself.
    fn with_sink<S: ChunkSink + Send + 'static>(
        sink: S,
        queued: usize,
        behind_limit: usize,
        caller_write_max: usize,
    ) -> io::Result<BackgroundFile> {
        let sink = Arc::new(Mutex::new(sink));
        let shared_sink = Arc::clone(&sink);
        let (to_writer, chunks) = sync_channel::<(Chunk, bool)>(queued);
        let (give_back, spare) = sync_channel::<BlockBuf>(SPARE_CHUNKS);
        let (give_back_owned, spare_owned) = sync_channel::<Vec<u8>>(SPARE_CHUNKS);
        let backlog = Arc::new(AtomicUsize::new(0));
        let behind = Arc::clone(&backlog);
        let writer = std::thread::Builder::new().name("mlprof-writer".into()).spawn(move || {
            for (chunk, full) in chunks {
                let mut out = sink.lock().map_err(|_| poisoned())?;
                // Partial chunks (flushes) too: a direct write costs the writer a device round
                // trip (~0.3 ms of CPU each, measured at 1,000 calls/s) and rewriting the
                // partial block it leaves, the page cache a copy; direct pays for full chunks.
                if !full || behind.load(Ordering::Relaxed) > behind_limit {
                    out.write_without_waiting(chunk.as_slice())?;
                } else {
                    out.write_all(chunk.as_slice())?;
                }
                // Unlocked first: a caller that sees no backlog then never waits for the lock.
                drop(out);
                behind.fetch_sub(1, Ordering::Release);
                // Full when the producer has enough spares: the chunk is simply freed.
                match chunk {
                    Chunk::Blocks(mut blocks) => {
                        blocks.clear();
                        let _ = give_back.try_send(blocks);
                    }
                    Chunk::Owned { mut bytes, .. } => {
                        bytes.clear();
                        let _ = give_back_owned.try_send(bytes);
                    }
                }
            }
            let mut out = sink.lock().map_err(|_| poisoned())?;
            out.flush()
        })?;
        Ok(BackgroundFile {
            chunk: BlockBuf::with_capacity(FIRST_CHUNK_BYTES),
            to_writer: Some(to_writer),
            spare,
            spare_owned,
            writer: Some(writer),
            handed: 0,
            backlog,
            sink: shared_sink,
            caller_write_max,
            caller_writes_after: None,
            checked_at: 0,
        })
    }

    /// Writes the current chunk out from the caller's thread if it holds at least
    /// `CALLER_WRITE_MIN` bytes and the writer thread need not be woken for it (see
    /// [`BackgroundFile::write_here`]); otherwise the bytes wait for more, as after `write`.
    /// The collector calls this after each drain pass.
    pub fn write_small_now(&mut self) -> io::Result<()> {
        if self.chunk.len() >= CALLER_WRITE_MIN {
            self.write_here()?;
        }
        self.checked_at = self.position();
        Ok(())
    }

    /// Bytes written so far: handed over (or written by the caller) and in the chunk.
    fn position(&self) -> u64 {
        self.handed + self.chunk.len() as u64
    }

    /// Writes the current chunk through the page cache from the caller's thread, and keeps
    /// the chunk's memory for the next bytes, when that is cheaper than a hand-over: nothing
    /// waits for the writer thread (so the file's order holds), the chunk is small, so were
    /// the writes since the last call (at a burst's rates the chunk's tail waits to go direct
    /// with the next full chunk, and this thread stays out of the page cache, which throttles
    /// a fast writer), and the caller's writes were not slow lately. True if it wrote.
    fn write_here(&mut self) -> io::Result<bool> {
        let len = self.chunk.len();
        let gathered = self.position() - self.checked_at;
        if len == 0
            || len > self.caller_write_max
            || gathered > self.caller_write_max as u64
            || self.backlog.load(Ordering::Acquire) != 0
            || self.caller_writes_after.is_some_and(|after| Instant::now() < after)
        {
            return Ok(false);
        }
        let started = Instant::now();
        self.sink.lock().map_err(|_| poisoned())?.write_without_waiting(self.chunk.as_slice())?;
        let finished = Instant::now();
        if finished - started >= CALLER_WRITE_SLOW {
            self.caller_writes_after = Some(finished + CALLER_WRITE_BACKOFF);
        }
        self.handed += len as u64;
        self.chunk.clear();
        Ok(true)
    }

    /// Hands the current chunk to the writer thread (waits only while the queue is full); a
    /// full one up to its last block boundary in the file, the rest starting the next chunk.
    fn hand_over(&mut self, full: bool) -> io::Result<()> {
        let keep =
            if full { ((self.handed + self.chunk.len() as u64) % BLOCK_BYTES as u64) as usize } else { 0 };
        if self.chunk.len() == keep {
            return Ok(());
        }
        // A chunk that filled up says the rate fills chunks: its successor starts with a full
        // chunk's room rather than growing to it by doubling (64 KiB to 1 MiB zeroed 2 MiB of
        // fresh memory and copied 1 MiB, in the passes of a burst that can least afford it).
        let room = if full { CHUNK_BYTES } else { FIRST_CHUNK_BYTES };
        let mut next = self.spare.try_recv().unwrap_or_else(|_| BlockBuf::with_capacity(room));
        next.extend_from_slice(&self.chunk.as_slice()[self.chunk.len() - keep..]);
        self.chunk.truncate(self.chunk.len() - keep);
        self.handed += self.chunk.len() as u64;
        let chunk = std::mem::replace(&mut self.chunk, next);
        self.send(Chunk::Blocks(chunk), full)
    }

    /// Queues `chunk` for the writer thread (waits only while the queue is full).
    fn send(&mut self, chunk: Chunk, full: bool) -> io::Result<()> {
        self.backlog.fetch_add(1, Ordering::Relaxed);
        let sent = self.to_writer.as_ref().map(|queue| queue.send((chunk, full)).is_ok());
        match sent {
            Some(true) => Ok(()),
            // The writer stopped (its write failed) or the file was closed.
            _ => Err(self.stop_writer().err().unwrap_or_else(|| io::Error::other("the file was closed"))),
        }
    }

    /// Writes `buf[*start..]`, leaving the bytes after its last whole block of the file (less
    /// than a block) in `buf` from `*start` on, where the caller appends what comes next. The
    /// whole blocks go to the writer thread in `buf` itself, without a copy, which `buf` is
    /// swapped for an emptied buffer of the same room: the bytes left over are moved there, to
    /// an offset (`*start`) at which the next call's bytes start block-aligned in memory.
    ///
    /// A producer that builds its output in a `Vec<u8>` of a megabyte or so and hands it over
    /// with this saves the copy [`Write::write`] makes (at 600 MB/s of trace, a tenth of a
    /// conversion's CPU). The first call, and any after bytes arrived through `write` or the
    /// caller's buffer moved, copies (as `write` does) and sets `*start` for the next.
    pub fn write_owned(&mut self, buf: &mut Vec<u8>, start: &mut usize) -> io::Result<()> {
        let from = (*start).min(buf.len());
        let aligned = self.chunk.is_empty()
            && self.handed.is_multiple_of(BLOCK_BYTES as u64)
            && (buf.as_ptr().addr() + from).is_multiple_of(BLOCK_BYTES);
        let whole = if aligned { (buf.len() - from) / BLOCK_BYTES * BLOCK_BYTES } else { 0 };
        if whole == 0 {
            // Through the chunk: its whole blocks are handed over, what is left of a block
            // comes back to the caller's buffer.
            self.chunk.extend_from_slice(&buf[from..]);
            self.hand_over(true)?;
            *start = restart_aligned(buf, self.chunk.as_slice());
            self.chunk.clear();
            return Ok(());
        }
        let mut taken = std::mem::replace(buf, self.spare_owned.try_recv().unwrap_or_default());
        buf.reserve(taken.capacity());
        *start = restart_aligned(buf, &taken[from + whole..]);
        taken.truncate(from + whole);
        self.handed += whole as u64;
        self.send(Chunk::Owned { bytes: taken, start: from }, true)
    }

    /// Closes the queue and waits for the writer: its first error, if any.
    fn stop_writer(&mut self) -> io::Result<()> {
        self.to_writer = None;
        match self.writer.take().map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(poisoned()),
        }
    }

    /// Writes everything handed over so far and stops the writer thread; the first error of
    /// any write.
    pub fn close(mut self) -> io::Result<()> {
        let handed = self.hand_over(false);
        let written = self.stop_writer();
        handed.and(written)
    }
}

/// The error of a file whose writer thread panicked.
fn poisoned() -> io::Error {
    io::Error::other("the file's writer thread panicked")
}

/// Empties `buf` and puts `leftover` in it at the first offset where the bytes that follow
/// start block-aligned in memory; returns that offset. (Reserves room for the offset and two
/// blocks at least, so the address is the one the caller's bytes will have.)
fn restart_aligned(buf: &mut Vec<u8>, leftover: &[u8]) -> usize {
    buf.clear();
    buf.reserve(BLOCK_BYTES * 2 + leftover.len());
    let pad = buf.as_ptr().addr().next_multiple_of(BLOCK_BYTES) - buf.as_ptr().addr();
    buf.resize(pad, 0);
    buf.extend_from_slice(leftover);
    pad
}

impl Write for BackgroundFile {
    /// Fills chunks up to `CHUNK_BYTES` (a pass's frame of events may be megabytes), handing
    /// each over when full.
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = rest.len().min(CHUNK_BYTES.saturating_sub(self.chunk.len()).max(1));
            self.chunk.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if self.chunk.len() >= CHUNK_BYTES {
                self.hand_over(true)?;
            }
        }
        Ok(bytes.len())
    }

    /// Writes the partial chunk from this thread where [`BackgroundFile::write_here`] may,
    /// else hands it over; does not wait for the disk.
    fn flush(&mut self) -> io::Result<()> {
        let written = self.write_here()?;
        self.checked_at = self.position();
        if written {
            return Ok(());
        }
        self.hand_over(false)
    }
}

impl Drop for BackgroundFile {
    /// A file dropped without `close` (an error path) still gets what was written to it.
    fn drop(&mut self) {
        let _ = self.hand_over(false);
        let _ = self.stop_writer();
    }
}

#[cfg(test)]
mod tests;
