//! CPU samples: `PerfSample` packets on a sequence of their own, the code they ran interned on
//! it, which is what trace_processor files under `perf_sample` and the UI shows as the
//! threads' callstack tracks (flame chart of an area selection).
//!
//! The sequence's first packet clears its incremental state; every sample packet says it
//! needs that state (`SEQ_NEEDS_INCREMENTAL_STATE`) and carries, in its own `InternedData`,
//! whatever of its stack the sequence has not interned yet: the callstack (frame iids root
//! first, as Perfetto wants them; ours come leaf first), its frames (function name, mapping,
//! `rel_pc`), their function names, their mappings (one per file: path components, build id)
//! and those mappings' strings. Each table numbers its iids as the writer's handles: entry
//! `i` is iid `i + 1`, so a handle needs no lookup to be named.
//!
//! What a mapping says: the file's path and build id, offsets 0 and no address range. The
//! run knows where a file lies in the file, not where it was loaded (which differs by
//! process), so `rel_pc` is the frame's offset in the *file*; for a mapping that starts at
//! offset 0 of its file that is the pc relative to the mapping, as the field means. Perfetto's
//! offline symbolizers read it as an address of the ELF file, the same number for code where
//! the file's segments are laid out at their file offsets (`p_vaddr = p_offset`, GNU ld's
//! default), not for every file: frames named at conversion time need none of that.
//!
//! Timestamps are absolute, on the trace's clock (CLOCK_MONOTONIC): samples are few next to
//! calls (hundreds a second a thread), and arrive in the order the collector drained them.

use rustc_hash::FxHashMap;

use super::field::*;
use super::output::{Output, TraceOutput};
use crate::proto::{put_bytes, put_message, put_uint};
use crate::{CodeFrame, FrameHandle, ModuleHandle, StackHandle, ThreadHandle};

/// The samples' sequence (the threads' sequences follow it).
pub(super) const SAMPLES_SEQUENCE: u32 = 3;

/// A file of native code.
struct Module {
    /// Indexes in `Samples::parts` of its path's components.
    parts: Box<[u32]>,
    build_id: Box<[u8]>,
}

/// A frame: its module's index, its offset, its function's index.
#[derive(Clone, Copy)]
struct Frame {
    module: Option<u32>,
    offset: u64,
    function: Option<u32>,
}

/// Strings by index, each added once.
#[derive(Default)]
struct Strings {
    texts: Vec<Box<str>>,
    index: FxHashMap<Box<str>, u32>,
}

impl Strings {
    fn add(&mut self, text: &str) -> u32 {
        if let Some(&at) = self.index.get(text) {
            return at;
        }
        self.texts.push(text.into());
        self.index.insert(text.into(), (self.texts.len() - 1) as u32);
        (self.texts.len() - 1) as u32
    }
}

/// Which entries of a table the sequence has interned.
#[derive(Default)]
struct Sent(Vec<bool>);

impl Sent {
    /// Marks entry `at`; whether it was new.
    fn mark(&mut self, at: u32) -> bool {
        let at = at as usize;
        if self.0.len() <= at {
            self.0.resize(at + 1, false);
        }
        !std::mem::replace(&mut self.0[at], true)
    }
}

/// The samples' declarations and what their sequence has interned of them.
#[derive(Default)]
pub(super) struct Samples {
    modules: Vec<Module>,
    frames: Vec<Frame>,
    /// Root first.
    stacks: Vec<Box<[u32]>>,
    functions: Strings,
    /// Components of the modules' paths (Perfetto's `mapping_paths`).
    parts: Strings,
    /// (pid, tid) of each thread handle.
    threads: Vec<(u32, u32)>,
    /// Interned on the sequence so far: modules (mappings and build ids), path parts,
    /// functions, frames, stacks.
    sent: [Sent; 5],
    started: bool,
    /// The `InternedData` of the sample being written.
    interned: Vec<u8>,
}

const MODULES: usize = 0;
const PARTS: usize = 1;
const FUNCTIONS: usize = 2;
const FRAMES: usize = 3;
const STACKS: usize = 4;

/// The iid of entry `at` of a table.
fn iid(at: u32) -> u64 {
    u64::from(at) + 1
}

impl Samples {
    /// Thread `thread` (the next handle) is `tid` of `pid`.
    pub(super) fn thread(&mut self, thread: ThreadHandle, pid: u32, tid: u32) {
        debug_assert_eq!(thread.index(), self.threads.len());
        self.threads.push((pid, tid));
    }

    pub(super) fn module(&mut self, path: &str, build_id: &[u8]) -> ModuleHandle {
        let parts = path.split('/').filter(|p| !p.is_empty()).map(|p| self.parts.add(p)).collect();
        self.modules.push(Module { parts, build_id: build_id.into() });
        ModuleHandle::from_index(self.modules.len() - 1)
    }

    pub(super) fn frame(&mut self, frame: &CodeFrame<'_>) -> FrameHandle {
        let function = frame.function.map(|f| self.functions.add(f));
        let module = frame.module.map(|m| m.index() as u32);
        self.frames.push(Frame { module, offset: frame.offset, function });
        FrameHandle::from_index(self.frames.len() - 1)
    }

    pub(super) fn stack(&mut self, leaf_first: &[FrameHandle]) -> StackHandle {
        self.stacks.push(leaf_first.iter().rev().map(|f| f.index() as u32).collect());
        StackHandle::from_index(self.stacks.len() - 1)
    }

    /// One sample's packet (after the one that starts the sequence, the first time).
    pub(super) fn sample<W: TraceOutput>(
        &mut self,
        output: &mut Output<W>,
        thread: ThreadHandle,
        time_ns: u64,
        stack: Option<StackHandle>,
    ) {
        if !self.started {
            self.started = true;
            output.packet(SAMPLES_SEQUENCE, |p| {
                put_uint(p, PACKET_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED)
            });
        }
        self.interned.clear();
        if let Some(stack) = stack {
            self.intern_stack(stack.index() as u32);
        }
        let (pid, tid) = self.threads[thread.index()];
        let interned = &self.interned;
        output.packet(SAMPLES_SEQUENCE, |p| {
            put_uint(p, PACKET_TIMESTAMP, time_ns);
            put_uint(p, PACKET_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
            if !interned.is_empty() {
                put_bytes(p, PACKET_INTERNED_DATA, interned);
            }
            put_message(p, PACKET_PERF_SAMPLE, |s| {
                put_uint(s, PERF_SAMPLE_PID, pid.into());
                put_uint(s, PERF_SAMPLE_TID, tid.into());
                if let Some(stack) = stack {
                    put_uint(s, PERF_SAMPLE_CALLSTACK_IID, iid(stack.index() as u32));
                }
            });
        });
    }

    /// Adds to `interned` what stack `at` needs that the sequence lacks: its frames' strings
    /// and mappings, its frames, itself (in that order, each before what names it).
    fn intern_stack(&mut self, at: u32) {
        if !self.sent[STACKS].mark(at) {
            return;
        }
        let frames = std::mem::take(&mut self.stacks[at as usize]);
        for &frame in &frames {
            self.intern_frame(frame);
        }
        put_message(&mut self.interned, INTERNED_CALLSTACKS, |c| {
            put_uint(c, CODE_IID, iid(at));
            // Unpacked, as the proto2 schema declares the field.
            for &frame in &frames {
                put_uint(c, CALLSTACK_FRAME_IDS, iid(frame));
            }
        });
        self.stacks[at as usize] = frames;
    }

    fn intern_frame(&mut self, at: u32) {
        if !self.sent[FRAMES].mark(at) {
            return;
        }
        let Frame { module, offset, function } = self.frames[at as usize];
        if let Some(function) = function
            && self.sent[FUNCTIONS].mark(function)
        {
            let name = &self.functions.texts[function as usize];
            intern_string(&mut self.interned, INTERNED_FUNCTION_NAMES, iid(function), name.as_bytes());
        }
        if let Some(module) = module {
            self.intern_module(module);
        }
        put_message(&mut self.interned, INTERNED_FRAMES, |f| {
            put_uint(f, CODE_IID, iid(at));
            if let Some(function) = function {
                put_uint(f, FRAME_FUNCTION_NAME_ID, iid(function));
            }
            // Without a mapping, trace_processor keeps the name alone (its "dummy" frames):
            // the address goes in the name the caller gave, if any.
            if let Some(module) = module {
                put_uint(f, FRAME_MAPPING_ID, iid(module));
                put_uint(f, FRAME_REL_PC, offset);
            }
        });
    }

    fn intern_module(&mut self, at: u32) {
        if !self.sent[MODULES].mark(at) {
            return;
        }
        let module = &self.modules[at as usize];
        for &part in &module.parts {
            if self.sent[PARTS].mark(part) {
                let text = &self.parts.texts[part as usize];
                intern_string(&mut self.interned, INTERNED_MAPPING_PATHS, iid(part), text.as_bytes());
            }
        }
        let with_build_id = !module.build_id.is_empty();
        if with_build_id {
            // The build id's raw bytes (trace_processor shows them in hex).
            intern_string(&mut self.interned, INTERNED_BUILD_IDS, iid(at), &module.build_id);
        }
        put_message(&mut self.interned, INTERNED_MAPPINGS, |m| {
            put_uint(m, CODE_IID, iid(at));
            if with_build_id {
                put_uint(m, MAPPING_BUILD_ID, iid(at));
            }
            put_uint(m, MAPPING_START_OFFSET, 0);
            put_uint(m, MAPPING_EXACT_OFFSET, 0);
            for &part in &module.parts {
                put_uint(m, MAPPING_PATH_STRING_IDS, iid(part));
            }
        });
    }
}

/// An `InternedString` entry of table `field`.
fn intern_string(buf: &mut Vec<u8>, field: u32, iid: u64, text: &[u8]) {
    put_message(buf, field, |s| {
        put_uint(s, INTERNED_IID, iid);
        put_bytes(s, INTERNED_NAME, text);
    });
}

#[cfg(test)]
mod tests {
    use crate::perfetto::PerfettoWriter;
    use crate::{CodeFrame, TraceWriter};

    /// A protobuf field: (number, varint value or bytes).
    #[derive(Debug, Clone, PartialEq)]
    enum Value {
        Int(u64),
        Bytes(Vec<u8>),
    }

    fn varint(buf: &[u8], at: &mut usize) -> u64 {
        let (mut value, mut shift) = (0, 0);
        loop {
            let byte = buf[*at];
            *at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return value;
            }
            shift += 7;
        }
    }

    /// The fields of a message, in order (varints and length-delimited ones: all this writes).
    fn fields(buf: &[u8]) -> Vec<(u32, Value)> {
        let (mut out, mut at) = (Vec::new(), 0);
        while at < buf.len() {
            let tag = varint(buf, &mut at);
            let value = match tag & 7 {
                0 => Value::Int(varint(buf, &mut at)),
                2 => {
                    let len = varint(buf, &mut at) as usize;
                    at += len;
                    Value::Bytes(buf[at - len..at].to_vec())
                }
                wire => panic!("wire type {wire}"),
            };
            out.push(((tag >> 3) as u32, value));
        }
        out
    }

    fn get(message: &[(u32, Value)], field: u32) -> Vec<Value> {
        message.iter().filter(|(f, _)| *f == field).map(|(_, v)| v.clone()).collect()
    }

    fn bytes(v: &Value) -> Vec<(u32, Value)> {
        match v {
            Value::Bytes(b) => fields(b),
            Value::Int(_) => panic!("not a message"),
        }
    }

    /// Two samples of one stack and one without: the stack, its frames (named or not), their
    /// mapping and its strings are interned once, in the first sample's packet, the callstack
    /// root first; every sample packet needs the sequence's state, cleared before the first.
    #[test]
    fn samples_intern_their_stack_once_root_first() {
        let mut w = PerfettoWriter::new(Vec::new(), false).unwrap();
        let process = w.process(7, Some("p")).unwrap();
        let thread = w.thread(process, 8, None).unwrap();
        let module = w.code_module("/usr/lib/libhot.so", &[0xab, 0xcd]);
        let leaf = w.code_frame(&CodeFrame { module: Some(module), offset: 0x1234, function: Some("hot") });
        let caller = w.code_frame(&CodeFrame { module: Some(module), offset: 0x2000, function: None });
        let jit = w.code_frame(&CodeFrame { module: None, offset: 0x7f00, function: Some("0x7f00") });
        let stack = w.stack(&[leaf, caller, jit]);
        w.sample(thread, 1_000, Some(stack)).unwrap();
        w.sample(thread, 2_000, Some(stack)).unwrap();
        w.sample(thread, 3_000, None).unwrap();
        let trace = w.finish().unwrap();
        let packets: Vec<_> = get(&fields(&trace), 1).iter().map(bytes).collect();
        let on_samples: Vec<_> = packets.iter().filter(|p| get(p, 10) == [Value::Int(3)]).collect();
        assert_eq!(on_samples.len(), 4);
        assert_eq!(get(on_samples[0], 13), [Value::Int(1)], "the first packet clears the state");
        let samples: Vec<_> = on_samples[1..].iter().map(|p| bytes(&get(p, 66)[0])).collect();
        for (packet, time) in on_samples[1..].iter().zip([1_000, 2_000, 3_000]) {
            assert_eq!((get(packet, 8), get(packet, 13)), (vec![Value::Int(time)], vec![Value::Int(2)]));
        }
        for (sample, callstack) in samples.iter().zip([vec![Value::Int(1)], vec![Value::Int(1)], vec![]]) {
            assert_eq!((get(sample, 2), get(sample, 3)), (vec![Value::Int(7)], vec![Value::Int(8)]));
            assert_eq!(get(sample, 4), callstack);
        }
        assert_eq!((get(on_samples[2], 12).len(), get(on_samples[3], 12).len()), (0, 0));
        let interned = bytes(&get(on_samples[1], 12)[0]);
        let strings = |field| -> Vec<(u64, Vec<u8>)> {
            let mut entries: Vec<_> = get(&interned, field)
                .iter()
                .map(|e| {
                    let e = bytes(e);
                    match (&get(&e, 1)[..], &get(&e, 2)[..]) {
                        ([Value::Int(iid)], [Value::Bytes(s)]) => (*iid, s.clone()),
                        other => panic!("{other:?}"),
                    }
                })
                .collect();
            entries.sort();
            entries
        };
        assert_eq!(strings(5), [(1, b"hot".to_vec()), (2, b"0x7f00".to_vec())]);
        assert_eq!(strings(17), [(1, b"usr".to_vec()), (2, b"lib".to_vec()), (3, b"libhot.so".to_vec())]);
        assert_eq!(strings(16), [(1, vec![0xab, 0xcd])]);
        let mapping = bytes(&get(&interned, 19)[0]);
        let ints = |m: &[(u32, Value)], f| get(m, f);
        assert_eq!(ints(&mapping, 1), [Value::Int(1)]);
        assert_eq!(ints(&mapping, 2), [Value::Int(1)]);
        assert_eq!(ints(&mapping, 7), [Value::Int(1), Value::Int(2), Value::Int(3)]);
        let frames: Vec<_> = get(&interned, 6).iter().map(bytes).collect();
        let frame = |iid: u64| frames.iter().find(|f| get(f, 1) == [Value::Int(iid)]).unwrap();
        // (function name iid, mapping iid, rel_pc) of the leaf, its caller and the JIT frame.
        let described =
            |iid| [2, 3, 4].map(|field| get(frame(iid), field).first().cloned().unwrap_or(Value::Int(0)));
        assert_eq!(described(1), [Value::Int(1), Value::Int(1), Value::Int(0x1234)]);
        assert_eq!(described(2), [Value::Int(0), Value::Int(1), Value::Int(0x2000)]);
        assert_eq!(described(3), [Value::Int(2), Value::Int(0), Value::Int(0)]);
        let callstack = bytes(&get(&interned, 7)[0]);
        assert_eq!(get(&callstack, 1), [Value::Int(1)]);
        assert_eq!(get(&callstack, 2), [Value::Int(3), Value::Int(2), Value::Int(1)], "root first");
    }
}
