//! Order: each thread's forest of slices held back until they can go out in BEGIN/END
//! order (see the module documentation of `perfetto`), and the slices written directly.

use std::io;

use super::TraceOutput;

use super::encode::{EventBody, Template};
use super::field::*;
use super::output::{set_length, timestamp};
use super::{Interned, PerfettoWriter};
use crate::proto::{LEN, append, put_bytes, put_fixed64, put_message, put_uint};
use crate::{Slice, ThreadHandle};

/// Slices a thread may hold back before its forest is written regardless.
pub(super) const MAX_PENDING_ENTRIES: usize = 1 << 15;
/// Encoded bytes a thread may hold back.
pub(super) const MAX_PENDING_BYTES: usize = 4 << 20;
/// Encoded bytes all threads together may hold back.
pub(super) const MAX_PENDING_TOTAL: usize = 48 << 20;

/// The TrackEvent fields of a slice's END before its flow ids.
pub(super) const END_HEAD: [u8; 2] = [(EVENT_TYPE << 3) as u8, TYPE_SLICE_END as u8];

/// A slice or instant held back: its times, its place in the forest and its encoded body.
#[derive(Clone, Copy)]
pub(super) struct Entry {
    pub(super) start: u64,
    pub(super) end: u64,
    /// Index of the first entry of its subtree (itself when it has no children).
    pub(super) subtree: u32,
    /// Arena offset of the BEGIN/INSTANT TrackEvent body, then `end_len` bytes for the END.
    pub(super) offset: u32,
    pub(super) begin_len: u32,
    pub(super) end_len: u32,
    pub(super) instant: bool,
}

/// A thread's track and packet sequence.
pub(super) struct Sequence {
    pub(super) id: u32,
    pub(super) last_ts: u64,
    pub(super) interned: Interned,
    pub(super) pending: Vec<Entry>,
    pub(super) arena: Vec<u8>,
    /// Entries before this index form complete trees that can go out.
    pub(super) ready: usize,
    /// The last root written, (start, end): where the written part of the track ends.
    pub(super) last_root: (u64, u64),
    /// The END time of a slice written directly (an outermost slice met with an empty forest:
    /// its BEGIN is out, its END waits for the flows that may follow it).
    pub(super) held_end: Option<u64>,
    /// Fields of that END after its type (flow ids).
    pub(super) held_extra: Vec<u8>,
    /// Templates of the events written on it (`encode::TEMPLATE_SLOTS` once one is made).
    pub(super) templates: Vec<Template>,
}

impl<W: TraceOutput> PerfettoWriter<W> {
    /// Writes the complete trees of a sequence's forest (its `ready` prefix) and keeps the rest.
    pub(super) fn write_ready(&mut self, index: usize) {
        let seq = &mut self.sequences[index];
        let upto = seq.ready;
        if upto == 0 {
            return;
        }
        if upto == 1 && seq.pending.len() == 1 {
            // One slice, no children: the common case of threads without spans.
            let e = seq.pending[0];
            let begin_end = (e.offset + e.begin_len) as usize;
            self.output.event(
                seq.id,
                &mut seq.last_ts,
                e.start,
                &[],
                &seq.arena[e.offset as usize..begin_end],
            );
            if e.instant {
            } else if e.end_len == 0 {
                self.output.end(seq.id, &mut seq.last_ts, e.end);
            } else {
                let end = begin_end..begin_end + e.end_len as usize;
                self.output.event(seq.id, &mut seq.last_ts, e.end, &END_HEAD, &seq.arena[end]);
            }
            seq.last_root = (e.start, e.end);
            self.pending_total -= seq.arena.len();
            seq.arena.clear();
            seq.pending.clear();
            seq.ready = 0;
            return;
        }
        // Emission order of the forest pending[..upto), depth first: built backwards from the
        // post-order (each entry after its children), then read in reverse. An entry is
        // `index << 1`, with the low bit set for its END.
        let (order, stack) = (&mut self.order, &mut self.stack);
        order.clear();
        stack.clear();
        for j in (0..upto).rev() {
            while let Some(&top) = stack.last() {
                if seq.pending[top as usize].subtree as usize > j {
                    order.push(top << 1);
                    stack.pop();
                } else {
                    break;
                }
            }
            order.push((j as u32) << 1 | 1);
            stack.push(j as u32);
        }
        while let Some(top) = stack.pop() {
            order.push(top << 1);
        }
        for &item in order.iter().rev() {
            let e = seq.pending[(item >> 1) as usize];
            let begin = e.offset as usize..(e.offset + e.begin_len) as usize;
            if item & 1 == 0 {
                self.output.event(seq.id, &mut seq.last_ts, e.start, &[], &seq.arena[begin]);
            } else if e.instant {
            } else if e.end_len == 0 {
                self.output.end(seq.id, &mut seq.last_ts, e.end);
            } else {
                let end = begin.end..begin.end + e.end_len as usize;
                self.output.event(seq.id, &mut seq.last_ts, e.end, &END_HEAD, &seq.arena[end]);
            }
        }
        // The last root written: the one whose subtree ends the prefix.
        let last = seq.pending[upto - 1];
        seq.last_root = (last.start, last.end);
        let consumed =
            if upto < seq.pending.len() { seq.pending[upto].offset as usize } else { seq.arena.len() };
        self.pending_total -= consumed;
        seq.arena.drain(..consumed);
        seq.pending.drain(..upto);
        for e in &mut seq.pending {
            e.offset -= consumed as u32;
            e.subtree -= upto as u32;
        }
        seq.ready = 0;
    }

    /// Starts an event on a thread: writes the END held back and what was complete.
    pub(super) fn begin_event(&mut self, index: usize) -> io::Result<()> {
        let seq = &mut self.sequences[index];
        if let Some(end) = seq.held_end.take() {
            if seq.held_extra.is_empty() {
                self.output.end(seq.id, &mut seq.last_ts, end);
            } else {
                self.output.event(seq.id, &mut seq.last_ts, end, &END_HEAD, &seq.held_extra);
                seq.held_extra.clear();
            }
        }
        if seq.ready > 0 {
            self.write_ready(index);
        }
        self.output.maybe_flush()?;
        self.interned.clear();
        Ok(())
    }

    /// An outermost slice on a thread with nothing held back (every call of a thread without
    /// spans): its BEGIN goes out at once, its END waits only for the flows that may follow.
    pub(super) fn direct(&mut self, index: usize, slice: &Slice<'_>) -> io::Result<()> {
        let mut start = slice.start_ns;
        let mut end = start.saturating_add(slice.dur_ns);
        let previous = self.sequences[index].last_root;
        if start < previous.1 {
            if start <= previous.0 {
                // It encloses the slice before it: its BEGIN goes out of order, absolute.
                self.stats.late_parents += 1;
            } else {
                self.stats.clamped += 1;
                start = previous.1;
                end = end.max(start);
            }
        }
        // The packet is framed in the output around the event encoded in place: lengths are
        // reserved as one byte and widened in the rare case they need more.
        let seq = &mut self.sequences[index];
        let mut buf = std::mem::take(&mut self.output.buf);
        let packet_at = buf.len();
        let (value, absolute) = timestamp(&mut seq.last_ts, start);
        append(&mut buf, 2 + 11 + 3 + 6 + 2, |w| {
            let head = [(TRACE_PACKET << 3 | LEN) as u8, 0, (PACKET_TIMESTAMP << 3) as u8];
            // The usual packet: a delta, a one-byte sequence id. In one window.
            if !absolute && seq.id < 0x80 {
                let tail =
                    [(PACKET_SEQUENCE_ID << 3) as u8, seq.id as u8, (PACKET_TRACK_EVENT << 3 | LEN) as u8, 0];
                return w.varint_between(&head, head.len(), value, &tail);
            }
            w.bytes_padded(&head, head.len());
            w.varint(value);
            if absolute {
                w.uint(PACKET_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC);
            }
            w.uint(PACKET_SEQUENCE_ID, seq.id.into());
            w.byte((PACKET_TRACK_EVENT << 3 | LEN) as u8);
            w.byte(0);
        });
        let event_at = buf.len() - 1;
        seq.held_end = Some(end);
        seq.last_root = (start, end);
        self.encode(index, EventBody::begin(slice), &mut buf);
        set_length(&mut buf, event_at);
        set_length(&mut buf, packet_at + 1);
        if !self.interned.is_empty() {
            // What the event interned goes before it.
            let mut packet = std::mem::take(&mut self.scratch);
            packet.clear();
            let id = self.sequences[index].id;
            put_message(&mut packet, TRACE_PACKET, |p| {
                put_uint(p, PACKET_SEQUENCE_ID, id.into());
                put_bytes(p, PACKET_INTERNED_DATA, &self.interned);
            });
            buf.extend_from_slice(&packet);
            buf[packet_at..].rotate_right(packet.len());
            self.scratch = packet;
        }
        self.output.buf = buf;
        Ok(())
    }

    /// Adds the encoded event (body from `from` in the arena) to the thread's forest.
    pub(super) fn add(
        &mut self,
        index: usize,
        from: usize,
        start: u64,
        end: u64,
        instant: bool,
        outermost: bool,
    ) {
        self.write_interned(index);
        let seq = &mut self.sequences[index];
        let (mut start, mut end) = (start, end.max(start));
        // Its children: the trailing roots that start at or after it.
        let mut first = seq.pending.len();
        while first > 0 {
            let root = seq.pending[first - 1];
            if root.start < start {
                break;
            }
            end = end.max(root.end);
            first = root.subtree as usize;
        }
        let previous = if first > 0 {
            let p = seq.pending[first - 1];
            (p.start, p.end)
        } else {
            seq.last_root
        };
        if start < previous.1 {
            if first == 0 && start <= previous.0 {
                // It encloses slices already written: its BEGIN goes out of order, absolute.
                self.stats.late_parents += 1;
            } else {
                self.stats.clamped += 1;
                start = previous.1;
                end = end.max(start);
            }
        }
        let len = (seq.arena.len() - from) as u32;
        seq.pending.push(Entry {
            start,
            end,
            subtree: first as u32,
            offset: from as u32,
            begin_len: len,
            end_len: 0,
            instant,
        });
        self.pending_total += len as usize;
        if outermost {
            seq.ready = seq.pending.len();
        } else if seq.pending.len() >= MAX_PENDING_ENTRIES || seq.arena.len() >= MAX_PENDING_BYTES {
            seq.ready = seq.pending.len();
            self.stats.forced_flushes += 1;
        }
        if self.pending_total > MAX_PENDING_TOTAL {
            // Every other thread writes its forest now; this one at its next event, after
            // the flows that may still attach to the slice just added.
            for other in 0..self.sequences.len() {
                if other != index && !self.sequences[other].pending.is_empty() {
                    let seq = &mut self.sequences[other];
                    seq.ready = seq.pending.len();
                    self.write_ready(other);
                    self.stats.forced_flushes += 1;
                }
            }
            let seq = &mut self.sequences[index];
            seq.ready = seq.pending.len();
        }
    }

    /// Adds `field` (flow ids) to the END of the thread's last slice.
    pub(super) fn flow(&mut self, thread: ThreadHandle, field: u32, id: u64) -> io::Result<()> {
        let seq = &mut self.sequences[thread.index()];
        if seq.held_end.is_some() {
            // The slice just added was written directly (nothing else is pending then).
            put_fixed64(&mut seq.held_extra, field, id);
        } else if let Some(last) = seq.pending.last_mut().filter(|e| !e.instant) {
            let before = seq.arena.len();
            put_fixed64(&mut seq.arena, field, id);
            last.end_len += (seq.arena.len() - before) as u32;
            self.pending_total += seq.arena.len() - before;
        }
        Ok(())
    }

    /// Writes everything held back.
    pub(super) fn write_all_pending(&mut self) -> io::Result<()> {
        for index in 0..self.sequences.len() {
            let seq = &mut self.sequences[index];
            seq.ready = seq.pending.len();
            self.begin_event(index)?;
        }
        Ok(())
    }
}
