//! Perfetto's native protobuf trace (`.pftrace`): TrackEvent packets, as
//! <https://perfetto.dev/docs/reference/synthetic-track-event> describes them.
//!
//! Layout of the output:
//!
//! * Sequence 1 holds the metadata: a clock snapshot that makes CLOCK_MONOTONIC the trace's
//!   clock, and one `TrackDescriptor` per process, thread and counter track.
//! * Sequence 2 holds counter values (absolute timestamps: counters are few, and their
//!   sources do not come in time order).
//! * Every thread has a sequence of its own: its first packet clears the incremental state and
//!   sets the sequence's defaults (its track, and the sequence-scoped clock 64), the second is
//!   a clock snapshot that declares clock 64 incremental and equal to CLOCK_MONOTONIC. From
//!   then on a packet's timestamp is the delta from the sequence's previous one. Event names,
//!   categories, annotation names and interned argument values (paths) are interned per
//!   sequence: the first use on a sequence writes an `InternedData` packet just before. Each
//!   table numbers its iids on its own, so names and keys keep one-byte iids.
//! * A slice is a `TYPE_SLICE_BEGIN` packet (name, category, arguments as debug annotations)
//!   and a `TYPE_SLICE_END` packet (flow ids, when the slice has a flow); an instant a
//!   `TYPE_INSTANT` packet.
//!
//! **Order.** A thread's records reach the writer in the order they ended, but Perfetto's
//! slices nest by BEGIN/END, and incremental timestamps need non-decreasing times per
//! sequence. Each thread keeps the slices it cannot write yet as a forest in arrival order
//! (children before their parent: a parent ends later), with each entry's encoded arguments in
//! a per-thread arena. A slice that arrives pops the trailing roots that start at or after it
//! (its children) and becomes a root. The forest goes out, depth first, when the caller marks
//! a slice `outermost` (no later slice can enclose it: an outermost ITT task, any call on a
//! thread without spans) or when it outgrows its bounds (per thread and in all). A slice that
//! arrives after children it encloses were written (a span longer than the window) is written
//! with an absolute timestamp at its place in the file: trace_processor sorts all events by
//! time before it builds slices, so the nesting stays right. A slice that starts inside its
//! predecessor without enclosing it (clock conversion jitter of a few ns, a signal handler) is
//! shortened to start at its predecessor's end, and counted ([`Stats::clamped`]). An outermost
//! slice that finds its thread's forest empty (every call of a thread without spans) skips
//! the forest: its BEGIN is written at once and only its END waits, for the flows that may
//! follow it.
//!
//! With `compress`, packets are gathered into batches of about 400 KB and written as
//! zlib-deflated `compressed_packets`, which Perfetto's tools inflate transparently.

use std::io::{self, Write};

use rustc_hash::FxHashMap;

use super::proto::{
    LEN, append, put_bytes, put_fixed64, put_message, put_uint, put_varint, tag_len, varint_len,
};
use super::{
    ArgValue, Args, CounterHandle, CounterUnit, CounterValue, Flow, Instant, ProcessHandle, Slice,
    StringHandle, ThreadHandle, TraceWriter,
};

/// Field numbers and enum values of Perfetto's trace protos used here (protos/perfetto/trace/).
pub mod field {
    /// `Trace.packet`.
    pub const TRACE_PACKET: u32 = 1;

    pub const PACKET_TIMESTAMP: u32 = 8;
    pub const PACKET_SEQUENCE_ID: u32 = 10;
    pub const PACKET_TRACK_EVENT: u32 = 11;
    pub const PACKET_INTERNED_DATA: u32 = 12;
    pub const PACKET_SEQUENCE_FLAGS: u32 = 13;
    pub const PACKET_CLOCK_SNAPSHOT: u32 = 6;
    pub const PACKET_COMPRESSED: u32 = 50;
    pub const PACKET_TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const PACKET_DEFAULTS: u32 = 59;
    pub const PACKET_TRACK_DESCRIPTOR: u32 = 60;
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;

    pub const DEFAULTS_CLOCK_ID: u32 = 58;
    pub const DEFAULTS_TRACK_EVENT: u32 = 11;
    pub const TRACK_EVENT_DEFAULTS_TRACK_UUID: u32 = 11;

    pub const SNAPSHOT_CLOCKS: u32 = 1;
    pub const SNAPSHOT_PRIMARY_CLOCK: u32 = 2;
    pub const CLOCK_ID: u32 = 1;
    pub const CLOCK_TIMESTAMP: u32 = 2;
    pub const CLOCK_INCREMENTAL: u32 = 3;
    /// `BUILTIN_CLOCK_MONOTONIC`: the clock of run.bin's times.
    pub const CLOCK_MONOTONIC: u64 = 3;
    /// A sequence-scoped clock (64..127), declared incremental on each thread's sequence.
    pub const CLOCK_INCREMENTAL_NS: u64 = 64;

    pub const TRACK_UUID: u32 = 1;
    pub const TRACK_NAME: u32 = 2;
    pub const TRACK_PROCESS: u32 = 3;
    pub const TRACK_THREAD: u32 = 4;
    pub const TRACK_PARENT_UUID: u32 = 5;
    pub const TRACK_COUNTER: u32 = 8;
    pub const PROCESS_PID: u32 = 1;
    pub const PROCESS_NAME: u32 = 6;
    pub const THREAD_PID: u32 = 1;
    pub const THREAD_TID: u32 = 2;
    pub const THREAD_NAME: u32 = 5;
    pub const COUNTER_UNIT_NAME: u32 = 6;

    pub const EVENT_CATEGORY_IIDS: u32 = 3;
    pub const EVENT_DEBUG_ANNOTATIONS: u32 = 4;
    pub const EVENT_TYPE: u32 = 9;
    pub const EVENT_NAME_IID: u32 = 10;
    pub const EVENT_TRACK_UUID: u32 = 11;
    pub const EVENT_COUNTER_VALUE: u32 = 30;
    pub const EVENT_DOUBLE_COUNTER_VALUE: u32 = 44;
    pub const EVENT_FLOW_IDS: u32 = 47;
    pub const EVENT_TERMINATING_FLOW_IDS: u32 = 48;
    pub const TYPE_SLICE_BEGIN: u64 = 1;
    pub const TYPE_SLICE_END: u64 = 2;
    pub const TYPE_INSTANT: u64 = 3;
    pub const TYPE_COUNTER: u64 = 4;

    pub const ANNOTATION_NAME_IID: u32 = 1;
    pub const ANNOTATION_BOOL: u32 = 2;
    pub const ANNOTATION_UINT: u32 = 3;
    pub const ANNOTATION_INT: u32 = 4;
    pub const ANNOTATION_DOUBLE: u32 = 5;
    pub const ANNOTATION_STRING: u32 = 6;
    pub const ANNOTATION_POINTER: u32 = 7;
    pub const ANNOTATION_ARRAY: u32 = 12;
    pub const ANNOTATION_STRING_IID: u32 = 17;

    pub const INTERNED_CATEGORIES: u32 = 1;
    pub const INTERNED_EVENT_NAMES: u32 = 2;
    pub const INTERNED_ANNOTATION_NAMES: u32 = 3;
    pub const INTERNED_STRING_VALUES: u32 = 29;
    /// `iid` and `name` (`str` in InternedString) of every interned entry.
    pub const INTERNED_IID: u32 = 1;
    pub const INTERNED_NAME: u32 = 2;
}
use field::*;

/// Slices a thread may hold back before its forest is written regardless.
const MAX_PENDING_ENTRIES: usize = 1 << 15;
/// Encoded bytes a thread may hold back.
const MAX_PENDING_BYTES: usize = 4 << 20;
/// Encoded bytes all threads together may hold back.
const MAX_PENDING_TOTAL: usize = 48 << 20;
/// Uncompressed bytes per `compressed_packets` batch (Perfetto's own writer stays under 512 KB).
const COMPRESS_BATCH: usize = 400 << 10;
/// Bytes gathered before an uncompressed write.
const WRITE_BATCH: usize = 1 << 20;

const ANNOTATION_CACHE_SLOTS: usize = 64;
/// The most bytes a debug annotation with a varint value takes: its tag and length, the key's
/// tag and iid (a varint of up to 32 bits), the value's tag (up to 2 bytes) and varint.
const MAX_ANNOTATION: usize = 2 + 1 + 5 + 2 + 10;

/// The TrackEvent fields of a slice's END before its flow ids.
const END_HEAD: [u8; 2] = [(EVENT_TYPE << 3) as u8, TYPE_SLICE_END as u8];

const METADATA_SEQUENCE: u32 = 1;
const COUNTER_SEQUENCE: u32 = 2;

/// What the writer had to adjust, for the line after a conversion.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Slices written with an absolute timestamp because they enclose slices written before.
    pub late_parents: u64,
    /// Slices shortened to start at their predecessor's end (overlap without nesting).
    pub clamped: u64,
    /// Forests written because they outgrew their bounds, not because they were complete.
    pub forced_flushes: u64,
}

/// The interned tables. Each has its own iid space (as in Perfetto's `InternedData`), so an
/// event name's iid stays one byte however many paths were interned before it.
#[derive(Clone, Copy)]
enum Table {
    Name = 0,
    Category = 1,
    AnnotationName = 2,
    StringValue = 3,
}

impl Table {
    fn field(self) -> u32 {
        match self {
            Table::Name => INTERNED_EVENT_NAMES,
            Table::Category => INTERNED_CATEGORIES,
            Table::AnnotationName => INTERNED_ANNOTATION_NAMES,
            Table::StringValue => INTERNED_STRING_VALUES,
        }
    }
}

/// Which iids of each table a sequence has interned: bit sets, as iids are dense. The first
/// 64 of each table (every name, category and key of most runs) live inline.
#[derive(Default)]
struct Interned {
    low: [u64; 4],
    high: [Vec<u64>; 4],
}

impl Interned {
    /// Whether `iid` is marked.
    #[inline]
    fn contains(&self, table: Table, iid: u32) -> bool {
        if iid < 64 {
            self.low[table as usize] & 1 << iid != 0
        } else {
            let word = (iid / 64 - 1) as usize;
            self.high[table as usize].get(word).is_some_and(|w| w & 1 << (iid % 64) != 0)
        }
    }

    fn insert(&mut self, table: Table, iid: u32) {
        if iid < 64 {
            self.low[table as usize] |= 1 << iid;
        } else {
            let (word, bits) = ((iid / 64 - 1) as usize, &mut self.high[table as usize]);
            if bits.len() <= word {
                bits.resize(word + 1, 0);
            }
            bits[word] |= 1 << (iid % 64);
        }
    }
}

/// A slice or instant held back: its times, its place in the forest and its encoded body.
#[derive(Clone, Copy)]
struct Entry {
    start: u64,
    end: u64,
    /// Index of the first entry of its subtree (itself when it has no children).
    subtree: u32,
    /// Arena offset of the BEGIN/INSTANT TrackEvent body, then `end_len` bytes for the END.
    offset: u32,
    begin_len: u32,
    end_len: u32,
    instant: bool,
}

/// A thread's track and packet sequence.
struct Sequence {
    id: u32,
    last_ts: u64,
    interned: Interned,
    pending: Vec<Entry>,
    arena: Vec<u8>,
    /// Entries before this index form complete trees that can go out.
    ready: usize,
    /// The last root written, (start, end): where the written part of the track ends.
    last_root: (u64, u64),
    /// The END time of a slice written directly (an outermost slice met with an empty forest:
    /// its BEGIN is out, its END waits for the flows that may follow it).
    held_end: Option<u64>,
    /// Fields of that END after its type (flow ids).
    held_extra: Vec<u8>,
}

/// The packet stream: plain or in compressed batches.
struct Output<W: Write> {
    out: W,
    /// Serialized `Trace.packet` fields not yet written.
    buf: Vec<u8>,
    compress: Option<flate2::Compression>,
    /// Bytes written to `out`.
    written: u64,
}

impl<W: Write> Output<W> {
    /// Writes or compresses what is gathered once a batch is full.
    #[inline]
    fn maybe_flush(&mut self) -> io::Result<()> {
        let limit = if self.compress.is_some() { COMPRESS_BATCH } else { WRITE_BATCH };
        if self.buf.len() >= limit { self.flush() } else { Ok(()) }
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        match self.compress {
            None => {
                self.out.write_all(&self.buf)?;
                self.written += self.buf.len() as u64;
            }
            Some(level) => {
                let mut z = flate2::write::ZlibEncoder::new(Vec::with_capacity(self.buf.len() / 4), level);
                z.write_all(&self.buf)?;
                let deflated = z.finish()?;
                let mut packet = Vec::with_capacity(deflated.len() + 16);
                put_bytes(&mut packet, PACKET_COMPRESSED, &deflated);
                let mut framed = Vec::with_capacity(packet.len() + 8);
                put_bytes(&mut framed, TRACE_PACKET, &packet);
                self.out.write_all(&framed)?;
                self.written += framed.len() as u64;
            }
        }
        self.buf.clear();
        Ok(())
    }

    /// One packet of sequence `seq` whose other fields `body` writes.
    fn packet(&mut self, seq: u32, body: impl FnOnce(&mut Vec<u8>)) {
        put_message(&mut self.buf, TRACE_PACKET, |p| {
            put_uint(p, PACKET_SEQUENCE_ID, seq.into());
            body(p);
        });
    }

    /// A TrackEvent packet of a thread sequence: the timestamp as a delta from the sequence's
    /// previous one, or absolute when it goes back; the event is `head` then `body`.
    #[inline]
    fn event(&mut self, seq: u32, last_ts: &mut u64, ts: u64, head: &[u8], body: &[u8]) {
        let (value, absolute) = if ts >= *last_ts {
            let delta = ts - *last_ts;
            *last_ts = ts;
            (delta, false)
        } else {
            (ts, true)
        };
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

/// A thread packet's timestamp: the delta from the sequence's previous one, or absolute (on
/// CLOCK_MONOTONIC) when it goes back.
#[inline]
fn put_timestamp(buf: &mut Vec<u8>, last_ts: &mut u64, ts: u64) {
    buf.push((PACKET_TIMESTAMP << 3) as u8);
    if ts >= *last_ts {
        put_varint(buf, ts - *last_ts);
        *last_ts = ts;
    } else {
        put_varint(buf, ts);
        put_uint(buf, PACKET_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC);
    }
}

/// Writes the length of the message whose one-byte length placeholder is at `at` and whose
/// body runs to the end of `buf`, widening the placeholder if the length needs more.
#[inline(always)]
fn set_length(buf: &mut Vec<u8>, at: usize) {
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
    } else {
        widen_length(buf, at, len);
    }
}

#[cold]
#[inline(never)]
fn widen_length(buf: &mut Vec<u8>, at: usize, len: usize) {
    let (mut bytes, mut n, mut value) = ([0u8; 10], 0, len);
    while value >= 0x80 {
        bytes[n] = value as u8 | 0x80;
        value >>= 7;
        n += 1;
    }
    bytes[n] = value as u8;
    buf.splice(at..at + 1, bytes[..=n].iter().copied());
}

/// Perfetto TrackEvent protobuf output. See the module documentation for the layout.
pub struct PerfettoWriter<W: Write> {
    output: Output<W>,
    strings: Vec<Box<str>>,
    /// Annotation keys, by the address and length of their `&'static str` (one hash of two
    /// words per argument), and their names in order of first use.
    annotation_ids: FxHashMap<(usize, usize), u32>,
    annotation_by_text: FxHashMap<&'static str, u32>,
    annotation_names: Vec<&'static str>,
    /// Recent (address, length) → id of annotation keys.
    annotation_cache: [((usize, usize), u32); ANNOTATION_CACHE_SLOTS],
    /// The iid of each key in each table (`iids[table][key]`, 0: not used yet); keys are
    /// string handle indexes, annotation ids for annotation names.
    iids: [Vec<u32>; 4],
    /// The last iid given out in each table.
    last_iid: [u32; 4],
    /// (pid, track uuid) of each process handle.
    processes: Vec<(u32, u64)>,
    /// Process track uuid by pid: a pid declared again keeps its track.
    process_uuids: FxHashMap<u32, u64>,
    sequences: Vec<Sequence>,
    counters: Vec<u64>,
    next_uuid: u64,
    /// Encoded bytes held back by all sequences.
    pending_total: usize,
    /// An `InternedData` body for the event being built.
    interned: Vec<u8>,
    /// The TrackEvent body of a slice written directly.
    scratch: Vec<u8>,
    /// Emission order scratch for writing a forest, and its stack.
    order: Vec<u32>,
    stack: Vec<u32>,
    stats: Stats,
}

impl<W: Write> PerfettoWriter<W> {
    /// Starts the trace: the metadata sequence and the trace clock. `compress`: write
    /// zlib-deflated `compressed_packets` batches.
    pub fn new(out: W, compress: bool) -> io::Result<Self> {
        let mut output = Output {
            out,
            buf: Vec::with_capacity(WRITE_BATCH + (64 << 10)),
            compress: compress.then(flate2::Compression::default),
            written: 0,
        };
        output.packet(METADATA_SEQUENCE, |p| {
            put_message(p, PACKET_CLOCK_SNAPSHOT, |s| {
                put_message(s, SNAPSHOT_CLOCKS, |c| {
                    put_uint(c, CLOCK_ID, CLOCK_MONOTONIC);
                    put_uint(c, CLOCK_TIMESTAMP, 0);
                });
                put_uint(s, SNAPSHOT_PRIMARY_CLOCK, CLOCK_MONOTONIC);
            });
        });
        Ok(PerfettoWriter {
            output,
            strings: Vec::new(),
            annotation_ids: FxHashMap::default(),
            annotation_by_text: FxHashMap::default(),
            annotation_names: Vec::new(),
            annotation_cache: [((0, 0), 0); ANNOTATION_CACHE_SLOTS],
            iids: Default::default(),
            last_iid: [0; 4],
            processes: Vec::new(),
            process_uuids: FxHashMap::default(),
            sequences: Vec::new(),
            counters: Vec::new(),
            next_uuid: 1,
            pending_total: 0,
            interned: Vec::new(),
            scratch: Vec::with_capacity(256),
            order: Vec::new(),
            stack: Vec::new(),
            stats: Stats::default(),
        })
    }

    /// What the writer adjusted so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Bytes of trace output so far (compressed size with `compress`), not counting what is
    /// still held back.
    pub fn bytes_written(&self) -> u64 {
        self.output.written + self.output.buf.len() as u64
    }

    fn uuid(&mut self) -> u64 {
        self.next_uuid += 1;
        self.next_uuid
    }

    fn descriptor(&mut self, body: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        self.output.packet(METADATA_SEQUENCE, |p| put_message(p, PACKET_TRACK_DESCRIPTOR, body));
        self.output.maybe_flush()
    }

    /// The annotation-name id of `key`.
    #[inline(always)]
    fn annotation_id(&mut self, key: &'static str) -> u32 {
        let address = (key.as_ptr() as usize, key.len());
        // Keys are string literals, a few bytes apart: a multiplicative hash spreads them.
        let slot = ((address.0 ^ address.1 << 48) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58;
        let slot = slot as usize % ANNOTATION_CACHE_SLOTS;
        if self.annotation_cache[slot].0 == address {
            return self.annotation_cache[slot].1;
        }
        self.annotation_id_slow(key, slot)
    }

    #[cold]
    #[inline(never)]
    fn annotation_id_slow(&mut self, key: &'static str, slot: usize) -> u32 {
        let address = (key.as_ptr() as usize, key.len());
        if let Some(&id) = self.annotation_ids.get(&address) {
            self.annotation_cache[slot] = (address, id);
            return id;
        }
        // The same text at another address (another call site) keeps one id.
        let next = self.annotation_names.len() as u32;
        let id = *self.annotation_by_text.entry(key).or_insert(next);
        if id == next {
            self.annotation_names.push(key);
            self.iids[Table::AnnotationName as usize].push(0);
        }
        self.annotation_ids.insert(address, id);
        self.annotation_cache[slot] = (address, id);
        id
    }

    /// Writes the complete trees of a sequence's forest (its `ready` prefix) and keeps the rest.
    fn write_ready(&mut self, index: usize) {
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
            if !e.instant {
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
            } else if !e.instant {
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
    fn begin_event(&mut self, index: usize) -> io::Result<()> {
        let seq = &mut self.sequences[index];
        if let Some(end) = seq.held_end.take() {
            self.output.event(seq.id, &mut seq.last_ts, end, &END_HEAD, &seq.held_extra);
            seq.held_extra.clear();
        }
        if seq.ready > 0 {
            self.write_ready(index);
        }
        self.output.maybe_flush()?;
        self.interned.clear();
        Ok(())
    }

    /// Interns `key` of `table` on the sequence (adding it to the pending `InternedData`), and
    /// returns its iid.
    #[inline(always)]
    fn intern(&mut self, index: usize, table: Table, key: usize) -> u64 {
        let iid = self.iids[table as usize][key];
        if iid == 0 || !self.sequences[index].interned.contains(table, iid) {
            return self.intern_new(index, table, key);
        }
        iid.into()
    }

    /// [`Self::intern`] of a key new to the sequence (or to the trace).
    #[cold]
    #[inline(never)]
    fn intern_new(&mut self, index: usize, table: Table, key: usize) -> u64 {
        let slot = &mut self.iids[table as usize][key];
        if *slot == 0 {
            self.last_iid[table as usize] += 1;
            *slot = self.last_iid[table as usize];
        }
        let iid = *slot;
        self.sequences[index].interned.insert(table, iid);
        let text: &str = match table {
            Table::AnnotationName => self.annotation_names[key],
            _ => &self.strings[key],
        };
        put_message(&mut self.interned, table.field(), |m| {
            put_uint(m, INTERNED_IID, iid.into());
            put_bytes(m, INTERNED_NAME, text.as_bytes());
        });
        iid.into()
    }

    /// Appends the TrackEvent body of a slice's BEGIN or of an instant to `body`.
    #[inline]
    fn encode(
        &mut self,
        index: usize,
        kind: u64,
        name: StringHandle,
        category: StringHandle,
        args: Args<'_>,
        body: &mut Vec<u8>,
    ) {
        let name = self.intern(index, Table::Name, name.index());
        let category = self.intern(index, Table::Category, category.index());
        // Type, name and category; then the arguments, in runs of varint values written in
        // place, each other kind of value on its own.
        let mut next = 0;
        let mut header = true;
        while header || next < args.len() {
            let max = 24 + MAX_ANNOTATION * (args.len() - next);
            let other = append(body, max, |w| {
                if std::mem::take(&mut header) {
                    w.uint(EVENT_TYPE, kind);
                    w.uint(EVENT_NAME_IID, name);
                    w.uint(EVENT_CATEGORY_IIDS, category);
                }
                while let Some(&(key, value)) = args.get(next) {
                    let (field, value) = match value {
                        ArgValue::Int(v) => (ANNOTATION_INT, v as u64),
                        ArgValue::UInt(v) => (ANNOTATION_UINT, v),
                        ArgValue::Bool(v) => (ANNOTATION_BOOL, v.into()),
                        ArgValue::Hex(v) => (ANNOTATION_POINTER, v),
                        ArgValue::Interned(handle) => {
                            (ANNOTATION_STRING_IID, self.intern(index, Table::StringValue, handle.index()))
                        }
                        ArgValue::Double(_) | ArgValue::Str(_) | ArgValue::UInts(_) => {
                            return Some((key, value));
                        }
                    };
                    let key = self.annotation_id(key) as usize;
                    let key = self.intern(index, Table::AnnotationName, key);
                    let at = w.open_short(EVENT_DEBUG_ANNOTATIONS);
                    w.uint(ANNOTATION_NAME_IID, key);
                    w.uint(field, value);
                    w.close_short(at);
                    next += 1;
                }
                None
            });
            if let Some((key, value)) = other {
                let key = self.annotation_id(key) as usize;
                let key = self.intern(index, Table::AnnotationName, key);
                put_message(body, EVENT_DEBUG_ANNOTATIONS, |a| {
                    put_uint(a, ANNOTATION_NAME_IID, key);
                    annotation_value(a, value);
                });
                next += 1;
            }
        }
    }

    /// Encodes an event into the sequence's arena; returns where its body starts.
    fn encode_pending(
        &mut self,
        index: usize,
        kind: u64,
        name: StringHandle,
        category: StringHandle,
        args: Args<'_>,
    ) -> usize {
        let mut arena = std::mem::take(&mut self.sequences[index].arena);
        let from = arena.len();
        self.encode(index, kind, name, category, args, &mut arena);
        self.sequences[index].arena = arena;
        from
    }

    /// Writes the `InternedData` the event being built needs, before it.
    fn write_interned(&mut self, index: usize) {
        if !self.interned.is_empty() {
            let id = self.sequences[index].id;
            let interned = std::mem::take(&mut self.interned);
            self.output.packet(id, |p| put_bytes(p, PACKET_INTERNED_DATA, &interned));
            self.interned = interned;
        }
    }

    /// An outermost slice on a thread with nothing held back (every call of a thread without
    /// spans): its BEGIN goes out at once, its END waits only for the flows that may follow.
    fn direct(&mut self, index: usize, slice: &Slice<'_>) -> io::Result<()> {
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
        buf.extend_from_slice(&[(TRACE_PACKET << 3 | LEN) as u8, 0]);
        put_timestamp(&mut buf, &mut seq.last_ts, start);
        buf.push((PACKET_SEQUENCE_ID << 3) as u8);
        put_varint(&mut buf, seq.id.into());
        buf.extend_from_slice(&[(PACKET_TRACK_EVENT << 3 | LEN) as u8, 0]);
        let event_at = buf.len() - 1;
        seq.held_end = Some(end);
        seq.last_root = (start, end);
        self.encode(index, TYPE_SLICE_BEGIN, slice.name, slice.category, slice.args, &mut buf);
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
    fn add(&mut self, index: usize, from: usize, start: u64, end: u64, instant: bool, outermost: bool) {
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
    fn flow(&mut self, thread: ThreadHandle, field: u32, id: u64) -> io::Result<()> {
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
    fn write_all_pending(&mut self) -> io::Result<()> {
        for index in 0..self.sequences.len() {
            let seq = &mut self.sequences[index];
            seq.ready = seq.pending.len();
            self.begin_event(index)?;
        }
        Ok(())
    }
}

/// The value fields of a debug annotation whose value is not a varint.
fn annotation_value(a: &mut Vec<u8>, value: ArgValue<'_>) {
    match value {
        ArgValue::Int(v) => put_uint(a, ANNOTATION_INT, v as u64),
        ArgValue::UInt(v) => put_uint(a, ANNOTATION_UINT, v),
        ArgValue::Double(v) => put_fixed64(a, ANNOTATION_DOUBLE, v.to_bits()),
        ArgValue::Bool(v) => put_uint(a, ANNOTATION_BOOL, v.into()),
        ArgValue::Str(s) => put_bytes(a, ANNOTATION_STRING, s.as_bytes()),
        ArgValue::Interned(_) => unreachable!("interned values are written by put_annotation"),
        ArgValue::Hex(v) => put_uint(a, ANNOTATION_POINTER, v),
        ArgValue::UInts(values) => {
            for &v in values {
                put_message(a, ANNOTATION_ARRAY, |e| put_uint(e, ANNOTATION_UINT, v));
            }
        }
    }
}

impl<W: Write> TraceWriter for PerfettoWriter<W> {
    type Output = W;

    fn intern(&mut self, text: &str) -> StringHandle {
        self.strings.push(text.into());
        for table in [Table::Name, Table::Category, Table::StringValue] {
            self.iids[table as usize].push(0);
        }
        StringHandle::from_index(self.strings.len() - 1)
    }

    fn process(&mut self, pid: u32, name: Option<&str>) -> io::Result<ProcessHandle> {
        let uuid = match self.process_uuids.get(&pid) {
            Some(&uuid) => uuid,
            None => {
                let uuid = self.uuid();
                self.process_uuids.insert(pid, uuid);
                uuid
            }
        };
        self.descriptor(|d| {
            put_uint(d, TRACK_UUID, uuid);
            put_message(d, TRACK_PROCESS, |p| {
                put_uint(p, PROCESS_PID, pid.into());
                if let Some(name) = name {
                    put_bytes(p, PROCESS_NAME, name.as_bytes());
                }
            });
        })?;
        self.processes.push((pid, uuid));
        Ok(ProcessHandle::from_index(self.processes.len() - 1))
    }

    fn thread(&mut self, process: ProcessHandle, tid: u32, name: Option<&str>) -> io::Result<ThreadHandle> {
        let (pid, _) = self.processes[process.index()];
        let uuid = self.uuid();
        self.descriptor(|d| {
            put_uint(d, TRACK_UUID, uuid);
            put_message(d, TRACK_THREAD, |t| {
                put_uint(t, THREAD_PID, pid.into());
                put_uint(t, THREAD_TID, tid.into());
                if let Some(name) = name {
                    put_bytes(t, THREAD_NAME, name.as_bytes());
                }
            });
        })?;
        let id = COUNTER_SEQUENCE + 1 + self.sequences.len() as u32;
        self.output.packet(id, |p| {
            put_uint(p, PACKET_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
            put_message(p, PACKET_DEFAULTS, |d| {
                put_uint(d, DEFAULTS_CLOCK_ID, CLOCK_INCREMENTAL_NS);
                put_message(d, DEFAULTS_TRACK_EVENT, |t| put_uint(t, TRACK_EVENT_DEFAULTS_TRACK_UUID, uuid));
            });
        });
        self.output.packet(id, |p| {
            put_message(p, PACKET_CLOCK_SNAPSHOT, |s| {
                put_message(s, SNAPSHOT_CLOCKS, |c| {
                    put_uint(c, CLOCK_ID, CLOCK_INCREMENTAL_NS);
                    put_uint(c, CLOCK_TIMESTAMP, 0);
                    put_uint(c, CLOCK_INCREMENTAL, 1);
                });
                put_message(s, SNAPSHOT_CLOCKS, |c| {
                    put_uint(c, CLOCK_ID, CLOCK_MONOTONIC);
                    put_uint(c, CLOCK_TIMESTAMP, 0);
                });
            });
        });
        self.sequences.push(Sequence {
            id,
            last_ts: 0,
            interned: Interned::default(),
            pending: Vec::new(),
            arena: Vec::new(),
            ready: 0,
            last_root: (0, 0),
            held_end: None,
            held_extra: Vec::new(),
        });
        self.output.maybe_flush()?;
        Ok(ThreadHandle::from_index(self.sequences.len() - 1))
    }

    fn counter_track(
        &mut self,
        process: ProcessHandle,
        name: &str,
        unit: CounterUnit,
    ) -> io::Result<CounterHandle> {
        let (uuid, parent) = (self.uuid(), self.processes[process.index()].1);
        self.descriptor(|d| {
            put_uint(d, TRACK_UUID, uuid);
            put_uint(d, TRACK_PARENT_UUID, parent);
            put_bytes(d, TRACK_NAME, name.as_bytes());
            put_message(d, TRACK_COUNTER, |c| put_bytes(c, COUNTER_UNIT_NAME, unit.name.as_bytes()));
        })?;
        self.counters.push(uuid);
        Ok(CounterHandle::from_index(self.counters.len() - 1))
    }

    fn slice(&mut self, thread: ThreadHandle, slice: &Slice<'_>) -> io::Result<()> {
        let index = thread.index();
        self.begin_event(index)?;
        if slice.outermost && self.sequences[index].pending.is_empty() {
            return self.direct(index, slice);
        }
        let from = self.encode_pending(index, TYPE_SLICE_BEGIN, slice.name, slice.category, slice.args);
        let end = slice.start_ns.saturating_add(slice.dur_ns);
        self.add(index, from, slice.start_ns, end, false, slice.outermost);
        Ok(())
    }

    fn instant(&mut self, thread: ThreadHandle, instant: &Instant<'_>) -> io::Result<()> {
        let index = thread.index();
        self.begin_event(index)?;
        let from = self.encode_pending(index, TYPE_INSTANT, instant.name, instant.category, instant.args);
        self.add(index, from, instant.time_ns, instant.time_ns, true, false);
        Ok(())
    }

    fn counter(&mut self, track: CounterHandle, time_ns: u64, value: CounterValue) -> io::Result<()> {
        let uuid = self.counters[track.index()];
        self.output.packet(COUNTER_SEQUENCE, |p| {
            put_uint(p, PACKET_TIMESTAMP, time_ns);
            put_message(p, PACKET_TRACK_EVENT, |e| {
                put_uint(e, EVENT_TYPE, TYPE_COUNTER);
                put_uint(e, EVENT_TRACK_UUID, uuid);
                match value {
                    CounterValue::Int(v) => put_uint(e, EVENT_COUNTER_VALUE, v as u64),
                    CounterValue::UInt(v) => put_uint(e, EVENT_COUNTER_VALUE, v),
                    CounterValue::Double(v) => put_fixed64(e, EVENT_DOUBLE_COUNTER_VALUE, v.to_bits()),
                }
            });
        });
        self.output.maybe_flush()
    }

    /// The flow leaves the slice just added, from its END.
    fn flow_begin(&mut self, thread: ThreadHandle, _time_ns: u64, flow: &Flow<'_>) -> io::Result<()> {
        self.flow(thread, EVENT_FLOW_IDS, flow.id)
    }

    /// The flow arrives at the slice just added, at its END: trace_processor orders flow
    /// steps by time, and a batch's wait ends after its fetch (which its BEGIN may not).
    fn flow_end(&mut self, thread: ThreadHandle, _time_ns: u64, flow: &Flow<'_>) -> io::Result<()> {
        self.flow(thread, EVENT_TERMINATING_FLOW_IDS, flow.id)
    }

    fn finish(mut self) -> io::Result<W> {
        self.write_all_pending()?;
        self.output.flush()?;
        self.output.out.flush()?;
        Ok(self.output.out)
    }
}
