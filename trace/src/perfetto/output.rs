//! The packet stream: packets framed into a buffer, written plain or as zlib-deflated
//! `compressed_packets` batches; timestamps and length fields of thread packets.

use std::fs::File;
use std::io::{self, BufWriter, Write};

use mlprof_filewrite::BackgroundFile;

use super::field::*;
use super::order::END_HEAD;
use crate::proto::{LEN, append, put_bytes, put_message, put_uint, tag_len, varint_len};

/// Uncompressed bytes per `compressed_packets` batch (Perfetto's own writer stays under 512 KB).
pub(super) const COMPRESS_BATCH: usize = 400 << 10;
/// Bytes gathered before an uncompressed write.
pub(super) const WRITE_BATCH: usize = 1 << 20;

/// Where a Perfetto trace goes: any of these `Write`s, each of which takes the writer's full
/// batches the way it can. `BackgroundFile` (what `mlprof convert` writes to) takes a batch's
/// whole blocks in the writer's own buffer, without a copy, and leaves the rest (under a block)
/// in it; the others are given a copy, as `Write` wants.
pub trait TraceOutput: Write {
    /// Writes `buf[*start..]`, or all but a tail that stays in `buf` from `*start` on (which
    /// the implementation may move, with the buffer); the writer appends what comes next.
    fn write_batch(&mut self, buf: &mut Vec<u8>, start: &mut usize) -> io::Result<()> {
        self.write_all(&buf[*start..])?;
        buf.truncate(*start);
        Ok(())
    }
}

impl TraceOutput for BackgroundFile {
    fn write_batch(&mut self, buf: &mut Vec<u8>, start: &mut usize) -> io::Result<()> {
        self.write_owned(buf, start)
    }
}

impl TraceOutput for Vec<u8> {}
impl TraceOutput for File {}
impl<W: Write> TraceOutput for BufWriter<W> {}

/// The packet stream: plain or in compressed batches.
pub(super) struct Output<W: TraceOutput> {
    pub(super) out: W,
    /// Serialized `Trace.packet` fields not yet written, from `start` on.
    pub(super) buf: Vec<u8>,
    /// Where the output in `buf` starts: a `BackgroundFile` takes full batches as they are
    /// and gives back a buffer whose bytes from here on start block-aligned in memory.
    pub(super) start: usize,
    pub(super) compress: Option<flate2::Compression>,
    /// Bytes written to `out`.
    pub(super) written: u64,
}

impl<W: TraceOutput> Output<W> {
    /// Bytes gathered and not yet written.
    #[inline]
    pub(super) fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Writes or compresses what is gathered once a batch is full (see
    /// [`TraceOutput::write_batch`] for what a plain batch leaves gathered).
    #[inline]
    pub(super) fn maybe_flush(&mut self) -> io::Result<()> {
        let limit = if self.compress.is_some() { COMPRESS_BATCH } else { WRITE_BATCH };
        if self.pending() < limit {
            return Ok(());
        }
        if self.compress.is_some() {
            return self.flush();
        }
        let before = self.pending();
        self.out.write_batch(&mut self.buf, &mut self.start)?;
        self.written += (before - self.pending()) as u64;
        Ok(())
    }

    /// Writes or compresses everything gathered.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        if self.pending() == 0 {
            return Ok(());
        }
        match self.compress {
            None => {
                self.out.write_all(&self.buf[self.start..])?;
                self.written += self.pending() as u64;
            }
            Some(level) => {
                let mut z = flate2::write::ZlibEncoder::new(Vec::with_capacity(self.pending() / 4), level);
                z.write_all(&self.buf[self.start..])?;
                let deflated = z.finish()?;
                let mut packet = Vec::with_capacity(deflated.len() + 16);
                put_bytes(&mut packet, PACKET_COMPRESSED, &deflated);
                let mut framed = Vec::with_capacity(packet.len() + 8);
                put_bytes(&mut framed, TRACE_PACKET, &packet);
                self.out.write_all(&framed)?;
                self.written += framed.len() as u64;
            }
        }
        self.buf.truncate(self.start);
        Ok(())
    }

    /// One packet of sequence `seq` whose other fields `body` writes.
    pub(super) fn packet(&mut self, seq: u32, body: impl FnOnce(&mut Vec<u8>)) {
        put_message(&mut self.buf, TRACE_PACKET, |p| {
            put_uint(p, PACKET_SEQUENCE_ID, seq.into());
            body(p);
        });
    }

    /// A slice's END without flow ids: [`Self::event`] with the END's two bytes, in one short
    /// write (an END every slice).
    #[inline]
    pub(super) fn end(&mut self, seq: u32, last_ts: &mut u64, ts: u64) {
        if ts < *last_ts || seq >= 0x80 {
            return self.event(seq, last_ts, ts, &END_HEAD, &[]);
        }
        let delta = ts - *last_ts;
        *last_ts = ts;
        // Timestamp, sequence id (one byte), the TrackEvent: under 128 bytes, in one window.
        let head = [(TRACE_PACKET << 3 | LEN) as u8, 0, (PACKET_TIMESTAMP << 3) as u8];
        // Destructured, so that a longer END_HEAD fails to compile here instead of being cut.
        let [end_type, end_value] = END_HEAD;
        let tail = [
            (PACKET_SEQUENCE_ID << 3) as u8,
            seq as u8,
            (PACKET_TRACK_EVENT << 3 | LEN) as u8,
            END_HEAD.len() as u8,
            end_type,
            end_value,
        ];
        append(&mut self.buf, head.len() + 10 + tail.len(), |w| {
            w.varint_message(&head, head.len(), delta, &tail)
        });
    }

    /// A TrackEvent packet of a thread sequence: the timestamp as a delta from the sequence's
    /// previous one, or absolute when it goes back; the event is `head` then `body`.
    #[inline]
    pub(super) fn event(&mut self, seq: u32, last_ts: &mut u64, ts: u64, head: &[u8], body: &[u8]) {
        let (value, absolute) = timestamp(last_ts, ts);
        let event_len = head.len() + body.len();
        let clock_len = if absolute { tag_len(PACKET_TIMESTAMP_CLOCK_ID) + 1 } else { 0 };
        let packet_len = 1
            + varint_len(value)
            + clock_len
            + 1
            + varint_len(seq.into())
            + 1
            + varint_len(event_len as u64)
            + event_len;
        append(&mut self.buf, packet_len + 6, |w| {
            w.byte((TRACE_PACKET << 3 | LEN) as u8);
            w.varint(packet_len as u64);
            w.uint(PACKET_TIMESTAMP, value);
            if absolute {
                w.uint(PACKET_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC);
            }
            w.uint(PACKET_SEQUENCE_ID, seq.into());
            w.byte((PACKET_TRACK_EVENT << 3 | LEN) as u8);
            w.varint(event_len as u64);
            w.bytes(head);
            w.bytes(body);
        });
    }
}

/// A thread packet's timestamp value and whether it is absolute: the delta from the sequence's
/// previous one, or (when it goes back) the time itself, on CLOCK_MONOTONIC.
#[inline(always)]
pub(super) fn timestamp(last_ts: &mut u64, ts: u64) -> (u64, bool) {
    if ts >= *last_ts {
        let delta = ts - *last_ts;
        *last_ts = ts;
        (delta, false)
    } else {
        (ts, true)
    }
}

/// Writes the length of the message whose one-byte length placeholder is at `at` and whose
/// body runs to the end of `buf`, widening the placeholder if the length needs more.
#[inline(always)]
pub(super) fn set_length(buf: &mut Vec<u8>, at: usize) {
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
    } else {
        widen_length(buf, at, len);
    }
}

#[cold]
#[inline(never)]
pub(super) fn widen_length(buf: &mut Vec<u8>, at: usize, len: usize) {
    let (mut bytes, mut n, mut value) = ([0u8; 10], 0, len);
    while value >= 0x80 {
        bytes[n] = value as u8 | 0x80;
        value >>= 7;
        n += 1;
    }
    bytes[n] = value as u8;
    buf.splice(at..at + 1, bytes[..=n].iter().copied());
}

#[cfg(test)]
mod tests {
    use mlprof_filewrite::BackgroundFile;

    use super::TraceOutput;
    use crate::perfetto::PerfettoWriter;
    use crate::{ArgShape, ArgValue, Slice, TraceWriter};

    /// Slices enough for many batches, on three threads.
    fn write_trace<W: TraceOutput>(out: W) -> W {
        let mut w = PerfettoWriter::new(out, false).unwrap();
        let process = w.process(7, Some("p")).unwrap();
        let threads: Vec<_> = (0..3).map(|t| w.thread(process, 100 + t, None).unwrap()).collect();
        let (name, category) = (TraceWriter::intern(&mut w, "write"), TraceWriter::intern(&mut w, "io"));
        for i in 0..200_000u64 {
            let args = [("fd", ArgValue::Int(i as i64 % 9)), ("bytes", ArgValue::UInt(i * 13))];
            let slice = Slice {
                start_ns: 1_000 * i,
                dur_ns: 500,
                name,
                category,
                args: &args,
                shape: ArgShape(1),
                outermost: true,
            };
            w.slice(threads[i as usize % 3], &slice).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn a_background_file_gets_the_same_bytes_as_any_other_output() {
        let expected = write_trace(Vec::new());
        assert!(expected.len() > 4 << 20, "{} bytes: too few batches to test", expected.len());
        let path =
            std::env::current_exe().unwrap().with_file_name(format!("owned-{}.pftrace", std::process::id()));
        let file = BackgroundFile::new(std::fs::File::create(&path).unwrap()).unwrap();
        write_trace(file).close().unwrap();
        let written = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(written == expected, "{} bytes written, {} expected", written.len(), expected.len());
    }
}
