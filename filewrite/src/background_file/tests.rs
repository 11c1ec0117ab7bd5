//! The writer thread against sinks that keep, fail, stall or wait: what reaches the file, in
//! order, from which thread, and which error the caller is told.

use super::*;
use std::sync::{Arc, Mutex};

/// A sink that keeps what it is given, and fails after `fail_after` bytes when set.
#[derive(Clone, Default)]
struct Sink {
    bytes: Arc<Mutex<Vec<u8>>>,
    fail_after: Option<usize>,
    /// Where each write ended in the file.
    ends: Arc<Mutex<Vec<usize>>>,
    /// Chunks written without waiting.
    uncached: Arc<Mutex<usize>>,
    /// Each write waits this long (a slow disk).
    delay: Option<std::time::Duration>,
    /// The thread of each write.
    writers: Arc<Mutex<Vec<std::thread::ThreadId>>>,
}

/// Records the chunks written without waiting (through the page cache for a file).
impl ChunkSink for Sink {
    fn write_without_waiting(&mut self, bytes: &[u8]) -> io::Result<()> {
        *self.uncached.lock().unwrap() += 1;
        self.write_all(bytes)
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut bytes = self.bytes.lock().unwrap();
        if self.fail_after.is_some_and(|limit| bytes.len() + buf.len() > limit) {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
        }
        if let Some(delay) = self.delay {
            std::thread::sleep(delay);
        }
        bytes.extend_from_slice(buf);
        self.ends.lock().unwrap().push(bytes.len());
        self.writers.lock().unwrap().push(std::thread::current().id());
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A file writing into `sink` with `BackgroundFile::new`'s policy (the collector's).
fn unpaced(sink: &Sink) -> BackgroundFile {
    BackgroundFile::with_sink(sink.clone(), QUEUED_CHUNKS, BEHIND_CHUNKS, CALLER_WRITE_MAX).unwrap()
}

#[test]
fn bytes_arrive_in_order_across_chunks_and_flushes() {
    let sink = Sink::default();
    let mut file = unpaced(&sink);
    let mut expected = Vec::new();
    for i in 0..5000u32 {
        // Pieces of varied sizes, some larger than a chunk.
        let piece: Vec<u8> = (0..(i as usize * 97 % 3001 + if i % 1000 == 0 { CHUNK_BYTES * 2 } else { 0 }))
            .map(|j| (i as usize + j) as u8)
            .collect();
        file.write_all(&piece).unwrap();
        expected.extend_from_slice(&piece);
        if i % 777 == 0 {
            file.flush().unwrap();
        }
        if i % 13 == 0 {
            // Small chunks from this thread, between the writer thread's.
            file.write_small_now().unwrap();
        }
    }
    file.close().unwrap();
    assert_eq!(sink.bytes.lock().unwrap().as_slice(), expected.as_slice());
}

#[test]
fn full_chunks_end_at_block_boundaries_of_the_file() {
    let sink = Sink::default();
    let mut file = unpaced(&sink);
    let mut expected = Vec::new();
    for i in 0..3000usize {
        let piece: Vec<u8> = (0..(i * 613 % 4999)).map(|j| (i + j) as u8).collect();
        file.write_all(&piece).unwrap();
        expected.extend_from_slice(&piece);
        if i == 1000 {
            // A flush ends anywhere; the next full chunk is cut back onto the blocks.
            file.flush().unwrap();
        }
    }
    file.close().unwrap();
    assert_eq!(sink.bytes.lock().unwrap().as_slice(), expected.as_slice());
    let ends = sink.ends.lock().unwrap().clone();
    assert!(ends.len() > 3, "{ends:?}");
    let flushed = ends.iter().filter(|&&end| end % BLOCK_BYTES != 0).count();
    // The flush's and close's chunks may end inside a block, the full ones may not.
    assert!(flushed <= 2, "{flushed} of {} chunks ended inside a block: {ends:?}", ends.len());
}

#[test]
fn a_writer_behind_by_half_the_queue_writes_without_waiting_until_it_caught_up() {
    let sink = Sink { delay: Some(std::time::Duration::from_millis(2)), ..Sink::default() };
    let mut file = unpaced(&sink);
    let piece = vec![3u8; CHUNK_BYTES];
    // Handed over faster than the sink writes: the queue fills and the writer catches up
    // without waiting; in order, nothing lost.
    for _ in 0..3 * QUEUED_CHUNKS {
        file.write_all(&piece).unwrap();
    }
    file.close().unwrap();
    assert_eq!(sink.bytes.lock().unwrap().len(), 3 * QUEUED_CHUNKS * CHUNK_BYTES);
    let uncached = *sink.uncached.lock().unwrap();
    assert!(uncached > 0 && uncached < 3 * QUEUED_CHUNKS, "{uncached} chunks written without waiting");
    // A writer that keeps up writes every chunk the usual way.
    let sink = Sink::default();
    let mut file = unpaced(&sink);
    for _ in 0..4 {
        file.write_all(&piece).unwrap();
        file.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    file.close().unwrap();
    assert_eq!(*sink.uncached.lock().unwrap(), 0);
}

#[test]
fn a_paced_writer_makes_its_producer_wait_and_never_skips_the_device() {
    let sink = Sink { delay: Some(std::time::Duration::from_millis(2)), ..Sink::default() };
    let mut file = BackgroundFile::with_sink(sink.clone(), PACED_CHUNKS, usize::MAX, 0).unwrap();
    let piece = vec![5u8; CHUNK_BYTES];
    for _ in 0..8 * PACED_CHUNKS {
        file.write_all(&piece).unwrap();
        // Handing over waits while the queue is full: never more than it holds wait.
        assert!(file.backlog.load(Ordering::Relaxed) <= PACED_CHUNKS + 1);
    }
    file.close().unwrap();
    assert_eq!(sink.bytes.lock().unwrap().len(), 8 * PACED_CHUNKS * CHUNK_BYTES);
    assert_eq!(*sink.uncached.lock().unwrap(), 0, "a paced writer wrote without waiting");
}

#[test]
fn a_flushed_prefix_reaches_the_sink_without_close() {
    let sink = Sink::default();
    let mut file = unpaced(&sink);
    file.write_all(b"header").unwrap();
    file.flush().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sink.bytes.lock().unwrap().len() < 6 {
        assert!(std::time::Instant::now() < deadline, "the flushed bytes never arrived");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(sink.bytes.lock().unwrap().as_slice(), b"header");
    drop(file);
}

#[test]
fn a_failing_disk_is_reported_by_a_later_write_or_by_close() {
    let sink = Sink { fail_after: Some(3 * CHUNK_BYTES), ..Sink::default() };
    let mut file = unpaced(&sink);
    let piece = vec![7u8; 4096];
    let mut error = None;
    for _ in 0..(64 * CHUNK_BYTES / piece.len()) {
        if let Err(e) = file.write_all(&piece) {
            error = Some(e);
            break;
        }
    }
    let error = error.or_else(|| file.close().err()).expect("the disk-full error was lost");
    assert_eq!(error.kind(), io::ErrorKind::StorageFull);
    assert!(sink.bytes.lock().unwrap().len() <= 3 * CHUNK_BYTES);
}

#[test]
fn owned_buffers_arrive_in_order_and_after_the_first_without_a_copy() {
    let sink = Sink::default();
    let mut file = unpaced(&sink);
    let mut expected = Vec::new();
    let (mut buf, mut start) = (Vec::with_capacity(CHUNK_BYTES + 8192), 0);
    for i in 0..400usize {
        // Appended after what the last call left, as a trace writer's buffer is.
        let piece: Vec<u8> = (0..(i * 7919 % 300_000)).map(|j| (i * 31 + j) as u8).collect();
        buf.extend_from_slice(&piece);
        expected.extend_from_slice(&piece);
        if i % 3 == 0 {
            let copied = !file.chunk.is_empty()
                || !file.handed.is_multiple_of(BLOCK_BYTES as u64)
                || !(buf.as_ptr().addr() + start).is_multiple_of(BLOCK_BYTES);
            assert_eq!(copied, i == 0 || i == 102, "call {i}");
            file.write_owned(&mut buf, &mut start).unwrap();
            assert!(buf.len() - start < BLOCK_BYTES, "{} bytes left over", buf.len() - start);
            assert!(file.chunk.is_empty());
        }
        if i == 99 {
            // Bytes through `write` and a flush in between: the next call copies, once.
            file.write_all(&buf[start..]).unwrap();
            buf.truncate(start);
            file.write_all(b"written").unwrap();
            expected.extend_from_slice(b"written");
            file.flush().unwrap();
        }
    }
    file.write_all(&buf[start..]).unwrap();
    file.close().unwrap();
    assert_eq!(sink.bytes.lock().unwrap().as_slice(), expected.as_slice());
}

#[test]
fn small_chunks_are_written_by_the_caller_into_the_file_at_once_and_keep_their_memory() {
    let sink = Sink::default();
    let mut file = unpaced(&sink);
    let here = std::thread::current().id();
    let mut expected = b"0123456789".to_vec();
    file.write_all(&expected).unwrap();
    // Too few bytes to be worth a write of their own: they wait.
    file.write_small_now().unwrap();
    assert!(sink.bytes.lock().unwrap().is_empty());
    let memory = (file.chunk.as_slice().as_ptr(), file.chunk.capacity());
    let piece = vec![9u8; CALLER_WRITE_MIN];
    file.write_all(&piece).unwrap();
    expected.extend_from_slice(&piece);
    file.write_small_now().unwrap();
    // In the file when the call returns, written by this thread, the chunk reused.
    assert_eq!(sink.bytes.lock().unwrap().as_slice(), expected.as_slice());
    assert_eq!(*sink.writers.lock().unwrap(), [here]);
    assert!(file.chunk.is_empty());
    assert_eq!((file.chunk.as_slice().as_ptr(), file.chunk.capacity()), memory);
    // A flush of a few bytes too.
    file.write_all(b"tail").unwrap();
    expected.extend_from_slice(b"tail");
    file.flush().unwrap();
    assert_eq!(sink.bytes.lock().unwrap().as_slice(), expected.as_slice());
    // More than a caller writes: the writer thread's.
    let large = vec![4u8; CALLER_WRITE_MAX + 1];
    file.write_all(&large).unwrap();
    expected.extend_from_slice(&large);
    file.write_small_now().unwrap();
    assert_eq!(file.chunk.len(), large.len(), "a large chunk was written by the caller");
    file.close().unwrap();
    assert_eq!(sink.bytes.lock().unwrap().as_slice(), expected.as_slice());
    let writers = sink.writers.lock().unwrap().clone();
    assert_eq!(writers[..2], [here, here]);
    assert!(writers[2..].iter().all(|&writer| writer != here), "{writers:?}");
}

#[test]
fn the_tail_of_a_pass_that_gathered_much_waits_for_the_next_full_chunk() {
    let sink = Sink::default();
    let mut file = unpaced(&sink);
    let here = std::thread::current().id();
    // A burst's pass: a full chunk and a tail of 100 KiB.
    file.write_all(&vec![1u8; CHUNK_BYTES + (100 << 10)]).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while file.backlog.load(Ordering::Acquire) != 0 {
        assert!(std::time::Instant::now() < deadline, "the full chunk was never written");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    file.write_small_now().unwrap();
    assert!(file.chunk.len() >= 100 << 10, "the burst's tail was written by the caller");
    // The next pass gathered little: the tail and its bytes go now, from this thread.
    file.write_all(&[2u8; 10]).unwrap();
    file.write_small_now().unwrap();
    assert!(file.chunk.is_empty());
    assert_eq!(sink.bytes.lock().unwrap().len(), CHUNK_BYTES + (100 << 10) + 10);
    assert_eq!(sink.writers.lock().unwrap().last(), Some(&here));
    file.close().unwrap();
}

#[test]
fn the_caller_writes_nothing_while_the_writer_thread_has_chunks_to_write() {
    let sink = Sink { delay: Some(std::time::Duration::from_millis(50)), ..Sink::default() };
    let mut file = unpaced(&sink);
    let full = vec![1u8; CHUNK_BYTES];
    file.write_all(&full).unwrap();
    let small = vec![2u8; CALLER_WRITE_MIN];
    file.write_all(&small).unwrap();
    // The full chunk is still being written: the small one must come after it.
    file.write_small_now().unwrap();
    assert_eq!(file.chunk.len(), small.len());
    file.close().unwrap();
    let bytes = sink.bytes.lock().unwrap();
    assert_eq!(bytes.len(), CHUNK_BYTES + CALLER_WRITE_MIN);
    assert!(bytes[..CHUNK_BYTES].iter().all(|&b| b == 1) && bytes[CHUNK_BYTES..].iter().all(|&b| b == 2));
}

#[test]
fn a_slow_write_by_the_caller_sends_its_next_bytes_to_the_writer_thread() {
    let sink = Sink { delay: Some(CALLER_WRITE_SLOW), ..Sink::default() };
    let mut file = unpaced(&sink);
    let here = std::thread::current().id();
    let piece = vec![6u8; CALLER_WRITE_MIN];
    file.write_all(&piece).unwrap();
    file.write_small_now().unwrap();
    assert_eq!(*sink.writers.lock().unwrap(), [here]);
    // Throttled (as the page cache throttles writers while the job fills it): backing off.
    file.write_all(&piece).unwrap();
    file.write_small_now().unwrap();
    assert_eq!(file.chunk.len(), piece.len());
    file.flush().unwrap();
    file.close().unwrap();
    let writers = sink.writers.lock().unwrap().clone();
    assert_eq!(writers.len(), 2);
    assert_ne!(writers[1], here, "the caller wrote while backing off");
    assert_eq!(sink.bytes.lock().unwrap().len(), 2 * piece.len());
}

#[test]
fn a_paced_file_never_writes_from_the_callers_thread() {
    let sink = Sink::default();
    let mut file = BackgroundFile::with_sink(sink.clone(), PACED_CHUNKS, usize::MAX, 0).unwrap();
    file.write_all(&vec![3u8; CALLER_WRITE_MIN]).unwrap();
    file.write_small_now().unwrap();
    file.flush().unwrap();
    file.close().unwrap();
    let here = std::thread::current().id();
    assert_eq!(sink.bytes.lock().unwrap().len(), CALLER_WRITE_MIN);
    assert!(sink.writers.lock().unwrap().iter().all(|&writer| writer != here));
}

#[test]
fn dropping_without_close_still_writes_everything() {
    let sink = Sink::default();
    let mut file = unpaced(&sink);
    file.write_all(&[1u8; 3000]).unwrap();
    drop(file);
    assert_eq!(sink.bytes.lock().unwrap().len(), 3000);
}
