//! Chrome Trace Event Format JSON (`{"traceEvents": [...]}`), which Perfetto UI and
//! chrome://tracing open. One record per line. Slices are `"ph":"X"` events, instants `"i"`
//! (thread-scoped), counters `"C"`, flows `"s"`/`"f"` (the head bound to its enclosing slice,
//! `"bp":"e"`), names `"M"` metadata. `ts`/`dur` are µs with three decimals (ns precision)
//! from the writer's origin, since JSON `ts` is a float in µs. CPU samples are not written:
//! Perfetto's JSON importer reads no `stackFrames` or `samples` (only the legacy
//! chrome://tracing did), so they would cost bytes and show nowhere; the Perfetto writer has
//! them.
//!
//! Records are assembled in a scratch buffer with `itoa` and byte copies rather than the
//! formatting machinery, which was most of a conversion's time; interned strings are kept
//! already escaped.

use std::io::{self, Write};

use super::{
    ArgValue, Args, CodeFrame, CounterHandle, CounterUnit, CounterValue, Flow, FrameHandle, Instant,
    ModuleHandle, ProcessHandle, Slice, StackHandle, StringHandle, ThreadHandle, TraceWriter,
};

/// Chrome JSON output to `W`. See the module documentation for the records.
pub struct ChromeWriter<W: Write> {
    out: W,
    /// Times are written relative to this (the run start).
    origin_ns: u64,
    /// No record written yet (records are separated by `,\n`).
    first: bool,
    /// Interned strings as JSON literals, quotes included.
    strings: Vec<Box<[u8]>>,
    /// pid of each process handle.
    processes: Vec<u32>,
    /// (pid, tid) of each thread handle.
    threads: Vec<(u32, u32)>,
    counters: Vec<Counter>,
    /// The record being written.
    scratch: Vec<u8>,
    /// Code modules, frames and stacks declared (handles only: samples are not written).
    code: [usize; 3],
}

struct Counter {
    pid: u32,
    /// The name as a JSON literal.
    name: Box<[u8]>,
    unit: CounterUnit,
}

/// `text` as a JSON string literal, escaped the way serde_json escapes.
fn push_json_string(buffer: &mut Vec<u8>, text: &str) {
    // Writing into a Vec cannot fail, and a &str always serializes.
    let _ = serde_json::to_writer(&mut *buffer, text);
}

impl<W: Write> ChromeWriter<W> {
    /// Starts the trace; times will be written relative to `origin_ns`.
    pub fn new(mut out: W, origin_ns: u64) -> io::Result<Self> {
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
        Ok(ChromeWriter {
            out,
            origin_ns,
            first: true,
            strings: Vec::new(),
            processes: Vec::new(),
            threads: Vec::new(),
            counters: Vec::new(),
            scratch: Vec::with_capacity(256),
            code: [0; 3],
        })
    }

    /// Starts a record: the separator from the previous one, then `{"ph":"<phase>"`.
    fn begin(&mut self, phase: &[u8]) {
        if self.first {
            self.first = false;
        } else {
            self.scratch.extend_from_slice(b",\n");
        }
        self.raw(b"{\"ph\":\"");
        self.raw(phase);
        self.raw(b"\"");
    }

    /// Writes the record out.
    fn end(&mut self) -> io::Result<()> {
        self.raw(b"}");
        let result = self.out.write_all(&self.scratch);
        self.scratch.clear();
        result
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.scratch.extend_from_slice(bytes);
    }

    fn int<I: itoa::Integer>(&mut self, value: I) {
        let mut buffer = itoa::Buffer::new();
        self.scratch.extend_from_slice(buffer.format(value).as_bytes());
    }

    fn string(&mut self, handle: StringHandle) {
        self.scratch.extend_from_slice(&self.strings[handle.index()]);
    }

    /// `,"name":N,"cat":C`
    fn name_and_category(&mut self, name: StringHandle, category: StringHandle) {
        self.raw(b",\"name\":");
        self.string(name);
        self.raw(b",\"cat\":");
        self.string(category);
    }

    /// `,"pid":P,"tid":T`
    fn thread_ids(&mut self, thread: ThreadHandle) {
        let (pid, tid) = self.threads[thread.index()];
        self.raw(b",\"pid\":");
        self.int(pid);
        self.raw(b",\"tid\":");
        self.int(tid);
    }

    /// `,"ts":` and the time in µs from the origin.
    fn timestamp(&mut self, ns: u64) {
        // The sign is applied to the whole µs only: a time less than 1 µs before the origin
        // prints as 0.xxx. Kept, as traces have always been written so.
        let relative = ns as i128 - self.origin_ns as i128;
        let sign = if relative < 0 { -1 } else { 1 };
        let magnitude = relative.unsigned_abs() as u64;
        self.raw(b",\"ts\":");
        self.micros(sign * (magnitude / 1000) as i64, magnitude % 1000);
    }

    /// `whole.fraction` µs with three decimals.
    fn micros(&mut self, whole: i64, fraction: u64) {
        self.int(whole);
        self.scratch.push(b'.');
        let digits = [
            b'0' + (fraction / 100 % 10) as u8,
            b'0' + (fraction / 10 % 10) as u8,
            b'0' + (fraction % 10) as u8,
        ];
        self.scratch.extend_from_slice(&digits);
    }

    /// `,"args":{...}`
    fn args(&mut self, args: Args<'_>) {
        self.raw(b",\"args\":{");
        for (i, (key, value)) in args.iter().enumerate() {
            if i > 0 {
                self.raw(b",");
            }
            self.raw(b"\"");
            self.raw(key.as_bytes());
            self.raw(b"\":");
            self.value(value);
        }
        self.raw(b"}");
    }

    fn value(&mut self, value: &ArgValue<'_>) {
        match *value {
            ArgValue::Int(v) => self.int(v),
            ArgValue::UInt(v) => self.int(v),
            // Not-a-number and infinities become null: JSON has neither.
            ArgValue::Double(v) => {
                let _ = serde_json::to_writer(&mut self.scratch, &v);
            }
            ArgValue::Bool(v) => self.raw(if v { b"true" } else { b"false" }),
            ArgValue::Str(text) => push_json_string(&mut self.scratch, text),
            ArgValue::Interned(handle) => self.string(handle),
            ArgValue::Hex(v) => {
                // Writing into a Vec cannot fail.
                let _ = write!(self.scratch, "\"{v:#x}\"");
            }
            ArgValue::UInts(values) => {
                self.raw(b"[");
                for (i, v) in values.iter().enumerate() {
                    if i > 0 {
                        self.raw(b",");
                    }
                    self.int(*v);
                }
                self.raw(b"]");
            }
        }
    }

    /// A `process_name` or `thread_name` record.
    fn name_record(&mut self, kind: &[u8], pid: u32, tid: u32, name: &str) -> io::Result<()> {
        self.begin(b"M");
        self.raw(b",\"name\":\"");
        self.raw(kind);
        self.raw(b"\",\"pid\":");
        self.int(pid);
        self.raw(b",\"tid\":");
        self.int(tid);
        self.raw(b",\"args\":{\"name\":");
        push_json_string(&mut self.scratch, name);
        self.raw(b"}");
        self.end()
    }

    fn flow(&mut self, phase: &[u8], thread: ThreadHandle, time_ns: u64, flow: &Flow<'_>) -> io::Result<()> {
        self.begin(phase);
        self.name_and_category(flow.name, flow.category);
        self.raw(b",\"id\":");
        self.int(flow.id);
        self.thread_ids(thread);
        self.timestamp(time_ns);
        if phase == b"f" {
            // Bound to the enclosing slice, not to the next one to begin.
            self.raw(b",\"bp\":\"e\"");
        }
        self.args(flow.args);
        self.end()
    }
}

impl<W: Write> TraceWriter for ChromeWriter<W> {
    type Output = W;

    fn intern(&mut self, text: &str) -> StringHandle {
        let mut literal = Vec::with_capacity(text.len() + 2);
        push_json_string(&mut literal, text);
        self.strings.push(literal.into_boxed_slice());
        StringHandle::from_index(self.strings.len() - 1)
    }

    fn process(&mut self, pid: u32, name: Option<&str>) -> io::Result<ProcessHandle> {
        if let Some(name) = name {
            self.name_record(b"process_name", pid, 0, name)?;
        }
        self.processes.push(pid);
        Ok(ProcessHandle::from_index(self.processes.len() - 1))
    }

    fn thread(&mut self, process: ProcessHandle, tid: u32, name: Option<&str>) -> io::Result<ThreadHandle> {
        let pid = self.processes[process.index()];
        if let Some(name) = name {
            self.name_record(b"thread_name", pid, tid, name)?;
        }
        self.threads.push((pid, tid));
        Ok(ThreadHandle::from_index(self.threads.len() - 1))
    }

    fn counter_track(
        &mut self,
        process: ProcessHandle,
        name: &str,
        unit: CounterUnit,
    ) -> io::Result<CounterHandle> {
        let mut literal = Vec::new();
        push_json_string(&mut literal, name);
        let pid = self.processes[process.index()];
        self.counters.push(Counter { pid, name: literal.into_boxed_slice(), unit });
        Ok(CounterHandle::from_index(self.counters.len() - 1))
    }

    fn slice(&mut self, thread: ThreadHandle, slice: &Slice<'_>) -> io::Result<()> {
        self.begin(b"X");
        self.name_and_category(slice.name, slice.category);
        self.thread_ids(thread);
        self.timestamp(slice.start_ns);
        self.raw(b",\"dur\":");
        self.micros((slice.dur_ns / 1000) as i64, slice.dur_ns % 1000);
        self.args(slice.args);
        self.end()
    }

    fn instant(&mut self, thread: ThreadHandle, instant: &Instant<'_>) -> io::Result<()> {
        self.begin(b"i");
        // Thread-scoped: drawn on its thread's track.
        self.raw(b",\"s\":\"t\"");
        self.name_and_category(instant.name, instant.category);
        self.thread_ids(thread);
        self.timestamp(instant.time_ns);
        self.args(instant.args);
        self.end()
    }

    fn counter(&mut self, track: CounterHandle, time_ns: u64, value: CounterValue) -> io::Result<()> {
        let Counter { pid, unit, .. } = self.counters[track.index()];
        self.begin(b"C");
        self.raw(b",\"name\":");
        self.scratch.extend_from_slice(&self.counters[track.index()].name);
        self.raw(b",\"pid\":");
        self.int(pid);
        self.timestamp(time_ns);
        self.raw(b",\"args\":{");
        push_json_string(&mut self.scratch, unit.name);
        self.raw(b":");
        match value {
            CounterValue::Int(v) => self.int(v),
            CounterValue::UInt(v) => self.int(v),
            CounterValue::Double(v) => {
                // Writing into a Vec cannot fail.
                let _ = write!(self.scratch, "{v:.*}", unit.decimals as usize);
            }
        }
        self.raw(b"}");
        self.end()
    }

    fn flow_begin(&mut self, thread: ThreadHandle, time_ns: u64, flow: &Flow<'_>) -> io::Result<()> {
        self.flow(b"s", thread, time_ns, flow)
    }

    fn flow_end(&mut self, thread: ThreadHandle, time_ns: u64, flow: &Flow<'_>) -> io::Result<()> {
        self.flow(b"f", thread, time_ns, flow)
    }

    fn code_module(&mut self, _path: &str, _build_id: &[u8]) -> ModuleHandle {
        self.code[0] += 1;
        ModuleHandle::from_index(self.code[0] - 1)
    }

    fn code_frame(&mut self, _frame: &CodeFrame<'_>) -> FrameHandle {
        self.code[1] += 1;
        FrameHandle::from_index(self.code[1] - 1)
    }

    fn stack(&mut self, _frames: &[FrameHandle]) -> StackHandle {
        self.code[2] += 1;
        StackHandle::from_index(self.code[2] - 1)
    }

    /// Not written (see the module documentation).
    fn sample(
        &mut self,
        _thread: ThreadHandle,
        _time_ns: u64,
        _stack: Option<StackHandle>,
    ) -> io::Result<()> {
        Ok(())
    }

    fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ArgList, ArgShape};
    use super::*;

    #[test]
    fn writes_every_kind_of_record() {
        let mut w = ChromeWriter::new(Vec::new(), 1_000_000).unwrap();
        let process = w.process(42, Some("train \"a\" (pid 42)")).unwrap();
        let thread = w.thread(process, 43, Some("worker")).unwrap();
        let unnamed = w.thread(process, 44, None).unwrap();
        let (read, io) = (w.intern("read"), w.intern("io"));
        let path = w.intern("/data/x\n.bin");
        let mut args = ArgList::<8>::new();
        args.push("fd", ArgValue::Int(-1));
        args.push("bytes", ArgValue::UInt(4096));
        args.push("path", ArgValue::Interned(path));
        args.push("request", ArgValue::Hex(0x5401));
        args.push("grid", ArgValue::UInts(&[1, 2, 3]));
        args.push("nested", ArgValue::Bool(true));
        args.push("direction", ArgValue::Str("H2D"));
        args.push("ratio", ArgValue::Double(0.5));
        let slice = Slice {
            start_ns: 1_002_345,
            dur_ns: 1_500,
            name: read,
            category: io,
            args: args.as_slice(),
            shape: ArgShape::NONE,
            outermost: true,
        };
        w.slice(thread, &slice).unwrap();
        let mark = w.intern("mark");
        w.instant(unnamed, &Instant { time_ns: 1_000_500, name: mark, category: io, args: &[] }).unwrap();
        let flow = Flow { id: 7, name: mark, category: io, args: &[("batch_id", ArgValue::UInt(3))] };
        w.flow_begin(thread, 1_003_844, &flow).unwrap();
        w.flow_end(unnamed, 1_010_001, &flow).unwrap();
        let energy = w.counter_track(process, "energy J", CounterUnit { name: "J", decimals: 6 }).unwrap();
        w.counter(energy, 3_000_000, CounterValue::Double(1.25)).unwrap();
        let calls = w.counter_track(process, "calls", CounterUnit { name: "count", decimals: 0 }).unwrap();
        w.counter(calls, 0, CounterValue::UInt(9)).unwrap();
        let json = String::from_utf8(w.finish().unwrap()).unwrap();
        let expected = r#"{"displayTimeUnit":"ns","traceEvents":[
{"ph":"M","name":"process_name","pid":42,"tid":0,"args":{"name":"train \"a\" (pid 42)"}},
{"ph":"M","name":"thread_name","pid":42,"tid":43,"args":{"name":"worker"}},
{"ph":"X","name":"read","cat":"io","pid":42,"tid":43,"ts":2.345,"dur":1.500,"args":{"fd":-1,"bytes":4096,"path":"/data/x\n.bin","request":"0x5401","grid":[1,2,3],"nested":true,"direction":"H2D","ratio":0.5}},
{"ph":"i","s":"t","name":"mark","cat":"io","pid":42,"tid":44,"ts":0.500,"args":{}},
{"ph":"s","name":"mark","cat":"io","id":7,"pid":42,"tid":43,"ts":3.844,"args":{"batch_id":3}},
{"ph":"f","name":"mark","cat":"io","id":7,"pid":42,"tid":44,"ts":10.001,"bp":"e","args":{"batch_id":3}},
{"ph":"C","name":"energy J","pid":42,"ts":2000.000,"args":{"J":1.250000}},
{"ph":"C","name":"calls","pid":42,"ts":-1000.000,"args":{"count":9}}
]}
"#;
        assert_eq!(json, expected);
        // And it is JSON.
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["traceEvents"].as_array().map(Vec::len), Some(8));
    }
}
