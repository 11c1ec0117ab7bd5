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
//! * Sequence 3 holds the CPU samples, `PerfSample` packets with the stacks they ran interned
//!   on it (`samples`).
//! * A slice is a `TYPE_SLICE_BEGIN` packet (name, category, arguments as debug annotations)
//!   and a `TYPE_SLICE_END` packet (flow ids, when the slice has a flow); an instant a
//!   `TYPE_INSTANT` packet.
//! * Encoding: an event is encoded field by field the first time its kind (name, category,
//!   argument keys and value types) appears on a sequence; the sequence then keeps a template
//!   of it (those fields' bytes, with the key iids), and the next events like it are written
//!   from the template and their values. The bytes are the same either way.
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

// One job each: `field` the proto numbers, `output` packet framing and compression, `encode`
// interning and event bodies, `order` the per-thread forests that put slices out in BEGIN/END
// order, `samples` the CPU samples' sequence; this file the writer's state, its tracks and the
// `TraceWriter` interface.
mod encode;
mod field;
mod order;
mod output;
mod samples;

use std::io;

use rustc_hash::FxHashMap;

use super::proto::{put_bytes, put_fixed64, put_message, put_uint};
use super::{
    CodeFrame, CounterHandle, CounterUnit, CounterValue, Flow, FrameHandle, Instant, ModuleHandle,
    ProcessHandle, Slice, StackHandle, StringHandle, ThreadHandle, TraceWriter,
};
use encode::{ANNOTATION_CACHE_SLOTS, EventBody, Interned, Table};
use field::*;
use order::Sequence;
pub use output::TraceOutput;
use output::{Output, WRITE_BATCH};
use samples::{SAMPLES_SEQUENCE, Samples};

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

/// Perfetto TrackEvent protobuf output. See the module documentation for the layout.
pub struct PerfettoWriter<W: TraceOutput> {
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
    samples: Samples,
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

impl<W: TraceOutput> PerfettoWriter<W> {
    /// Starts the trace: the metadata sequence and the trace clock. `compress`: write
    /// zlib-deflated `compressed_packets` batches.
    pub fn new(out: W, compress: bool) -> io::Result<Self> {
        let mut output = Output {
            out,
            buf: Vec::with_capacity(WRITE_BATCH + (64 << 10)),
            start: 0,
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
            samples: Samples::default(),
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
        self.output.written + self.output.pending() as u64
    }

    fn uuid(&mut self) -> u64 {
        self.next_uuid += 1;
        self.next_uuid
    }

    fn descriptor(&mut self, body: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        self.output.packet(METADATA_SEQUENCE, |p| put_message(p, PACKET_TRACK_DESCRIPTOR, body));
        self.output.maybe_flush()
    }
}

impl<W: TraceOutput> TraceWriter for PerfettoWriter<W> {
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
        let id = SAMPLES_SEQUENCE + 1 + self.sequences.len() as u32;
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
            templates: Vec::new(),
        });
        self.output.maybe_flush()?;
        let handle = ThreadHandle::from_index(self.sequences.len() - 1);
        self.samples.thread(handle, pid, tid);
        Ok(handle)
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
        let from = self.encode_pending(index, EventBody::begin(slice));
        let end = slice.start_ns.saturating_add(slice.dur_ns);
        self.add(index, from, slice.start_ns, end, false, slice.outermost);
        Ok(())
    }

    fn instant(&mut self, thread: ThreadHandle, instant: &Instant<'_>) -> io::Result<()> {
        let index = thread.index();
        self.begin_event(index)?;
        let from = self.encode_pending(index, EventBody::instant(instant));
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

    fn code_module(&mut self, path: &str, build_id: &[u8]) -> ModuleHandle {
        self.samples.module(path, build_id)
    }

    fn code_frame(&mut self, frame: &CodeFrame<'_>) -> FrameHandle {
        self.samples.frame(frame)
    }

    fn stack(&mut self, frames: &[FrameHandle]) -> StackHandle {
        self.samples.stack(frames)
    }

    fn sample(&mut self, thread: ThreadHandle, time_ns: u64, stack: Option<StackHandle>) -> io::Result<()> {
        self.samples.sample(&mut self.output, thread, time_ns, stack);
        self.output.maybe_flush()
    }

    fn finish(mut self) -> io::Result<W> {
        self.write_all_pending()?;
        self.output.flush()?;
        self.output.out.flush()?;
        Ok(self.output.out)
    }
}
