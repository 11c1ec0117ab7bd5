//! `mlprof convert`: a run as a timeline, written to any [`TraceWriter`]. One pass over the
//! file's events, each written as it is read, after a pass over its metadata frames: memory
//! holds the metadata (processes, strings), the fds in use and the writer's handles, never
//! the events.
//!
//! Which file a call's fd named, and whether a thread has spans (ITT tasks, GPU calls) that
//! may enclose its calls, are learned from the events themselves: batches are read
//! [`LOOKAHEAD_EVENTS`] ahead of the one converted, and their opens, closes and spans noted
//! first ([`FdIntervals::observe_streaming`]), because the collector writes records in drain
//! order, not causal order. Should a record arrive later than that (see
//! [`FdIntervals::inexact`]), the conversion starts over with the run's complete fd history
//! from a full metadata pass (a second read of the file): the trace is always the same.
//! A thread whose first span is found only after some of its calls were written needs no
//! second pass: the span goes out of order with an absolute timestamp (a Perfetto writer's
//! "late parent"), and trace_processor nests slices by time.
//!
//! What becomes what: a recorded call is a slice on its thread named after the function, with
//! its arguments (`calls`); an ITT task a slice named after the task, a marker an instant, a
//! DataLoader batch a flow from its fetch to its wait (`itt`); aggregated clock reads and
//! drop counts are counter tracks of their process; energy samples are counter tracks of one
//! pseudo-process per device ([`crate::energy::tracks`]).
//!
//! [`Options`] cut a run too big for a browser: a time window, some processes, some kinds of
//! event, and parts of at most N events, each a complete trace with all the metadata.

mod calls;
mod itt;

use std::collections::VecDeque;
use std::io;
use std::path::Path;

use mlprof_format::energy::{EnergyDevice, EnergySample};
use mlprof_format::func::{Api, Func};
use mlprof_format::record::Event;
use mlprof_format::runfile::{AggregateSample, DropSample, Frame};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::energy::tracks::EnergyTracks;
use crate::run::{self, FdCache, FdIntervals, Image, PathIndex, RunMeta};
use crate::trace::{
    CounterHandle, CounterUnit, CounterValue, ProcessHandle, StringHandle, ThreadHandle, TraceWriter,
};
use mlprof_format::func::Class;

/// Where a conversion is, reported after each batch of events.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub events: u64,
    /// Bytes of the run file read so far, of `total_bytes`.
    pub bytes_read: u64,
    pub total_bytes: u64,
}

#[derive(Debug)]
pub enum ConvertError {
    /// The run file could not be read; the message names it.
    Read(String),
    /// The writer's output failed.
    Write(io::Error),
}

/// Why a pass stopped early.
enum Stop {
    Error(ConvertError),
    /// A streaming pass met a record it would have needed earlier: `convert` starts over with
    /// the complete fd history.
    Inexact(String),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Self {
        Stop::Error(ConvertError::Write(e))
    }
}

impl From<io::Error> for ConvertError {
    fn from(e: io::Error) -> Self {
        ConvertError::Write(e)
    }
}

/// Kinds of event a trace can be limited to (`--only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kinds {
    /// C library calls, and the counters of aggregated clock reads.
    pub io: bool,
    /// ITT tasks, frames and markers (PyTorch ops, phases, DataLoader spans and flows).
    pub itt: bool,
    /// CUDA runtime, CUDA driver and NCCL calls.
    pub gpu: bool,
    /// Energy, power and the other device counters.
    pub energy: bool,
}

impl Kinds {
    pub const ALL: Kinds = Kinds { io: true, itt: true, gpu: true, energy: true };

    /// `io,itt,gpu,energy` (any subset, comma-separated).
    pub fn parse(list: &str) -> Result<Kinds, String> {
        let mut kinds = Kinds { io: false, itt: false, gpu: false, energy: false };
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "io" => kinds.io = true,
                "itt" => kinds.itt = true,
                "gpu" => kinds.gpu = true,
                "energy" => kinds.energy = true,
                _ => return Err(format!("unknown kind '{word}' (expected io, itt, gpu, energy)")),
            }
        }
        Ok(kinds)
    }

    fn api(&self, api: Api) -> bool {
        match api {
            Api::Libc => self.io,
            Api::Itt => self.itt,
            Api::CudaRuntime | Api::CudaDriver | Api::Nccl => self.gpu,
        }
    }
}

/// Names a process's track from its pid and its images (exec order). The hook where a merged
/// multi-node run will put its node and rank.
pub type ProcessNamer<'a> = &'a dyn Fn(u32, &[Image]) -> String;

/// The default process name: its programs in exec order, and the pid.
pub fn process_name(pid: u32, images: &[Image]) -> String {
    let names: Vec<String> = images.iter().map(|i| i.info.argv.join(" ")).collect();
    format!("{} (pid {pid})", names.join(" → exec "))
}

/// What to convert. The default is everything, in one trace.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    /// Only events that end at or after this time (ns on the run's clock)…
    pub from_ns: Option<u64>,
    /// …and start at or before this one.
    pub to_ns: Option<u64>,
    /// Only these processes (empty: all). Energy tracks are the machine's, kept.
    pub pids: &'a [u32],
    pub only: Kinds,
    /// Start a new part after this many events (slices and instants).
    pub split_every: Option<u64>,
    pub process_name: ProcessNamer<'a>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            from_ns: None,
            to_ns: None,
            pids: &[],
            only: Kinds::ALL,
            split_every: None,
            process_name: &process_name,
        }
    }
}

impl Options<'_> {
    /// Whether [start, end] meets the time window.
    fn in_window(&self, start: u64, end: u64) -> bool {
        self.from_ns.is_none_or(|from| end >= from) && self.to_ns.is_none_or(|to| start <= to)
    }

    fn pid(&self, pid: u32) -> bool {
        self.pids.is_empty() || self.pids.contains(&pid)
    }
}

/// What a conversion wrote.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Events written (slices and instants), over all parts.
    pub events: u64,
    /// Traces written (1 unless split).
    pub parts: usize,
    /// Problems with the input met on the way (corrupt data ends the conversion early).
    pub warnings: Vec<String>,
    /// Why the conversion was done again with the run's complete fd history (a record of an
    /// open or close arrived in the file after calls it names), if it was.
    pub second_pass: Option<String>,
}

/// Events read ahead of the batch being converted, so that their opens, closes and spans are
/// known before the calls they concern (the collector writes in drain order, and holds an
/// open back until its path is defined). 16 MiB of records.
pub const LOOKAHEAD_EVENTS: usize = 1 << 18;

/// Writes the run at `input`, whose metadata is `meta` (from [`RunMeta::load_metadata`] or any
/// other load), as one trace or (with `split_every`) several: `open(i)` makes the writer of
/// part `i` (from 0), `close(i, w)` finishes it. `on_progress` is called after every batch of
/// events. Corrupt data ends the conversion with a warning: the traces hold what was readable.
///
/// Should the streaming pass meet an fd change too late (see the module documentation), the
/// writers of that pass are dropped unfinished and the conversion starts over: `open(0)` is
/// called again, and `close` again for every part.
pub fn convert<W: TraceWriter>(
    meta: &RunMeta,
    input: &Path,
    options: &Options<'_>,
    open: &mut dyn FnMut(usize) -> io::Result<W>,
    close: &mut dyn FnMut(usize, W) -> io::Result<()>,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<Outcome, ConvertError> {
    convert_looking_ahead(meta, input, options, open, close, on_progress, LOOKAHEAD_EVENTS)
}

/// [`convert`], reading `lookahead` events ahead.
fn convert_looking_ahead<W: TraceWriter>(
    meta: &RunMeta,
    input: &Path,
    options: &Options<'_>,
    open: &mut dyn FnMut(usize) -> io::Result<W>,
    close: &mut dyn FnMut(usize, W) -> io::Result<()>,
    on_progress: &mut dyn FnMut(&Progress),
    lookahead: usize,
) -> Result<Outcome, ConvertError> {
    let streaming = Learned {
        fds: FdIntervals::streaming(meta.images.values().flatten()),
        span_threads: FxHashSet::default(),
        lookahead: Some(lookahead),
    };
    match convert_with(meta, input, options, open, close, on_progress, streaming) {
        Ok(outcome) => Ok(outcome),
        Err(Stop::Error(e)) => Err(e),
        Err(Stop::Inexact(reason)) => {
            let complete = RunMeta::load_readable(input).map_err(ConvertError::Read)?;
            let learned = Learned { fds: complete.fds, span_threads: complete.span_threads, lookahead: None };
            match convert_with(meta, input, options, open, close, on_progress, learned) {
                Ok(outcome) => Ok(Outcome { second_pass: Some(reason), ..outcome }),
                Err(Stop::Error(e)) => Err(e),
                Err(Stop::Inexact(reason)) => unreachable!("a complete fd history is exact: {reason}"),
            }
        }
    }
}

/// What the events tell about the run: which file each fd named, which threads have spans.
struct Learned {
    fds: FdIntervals,
    span_threads: FxHashSet<(u32, u32)>,
    /// Events read ahead when they are learned while converting (else they are complete).
    lookahead: Option<usize>,
}

/// A frame read ahead, waiting for its turn.
enum Item {
    Events(Batch),
    Aggregates(Vec<AggregateSample>),
    Drops(Vec<DropSample>),
    EnergyDevice(EnergyDevice),
    EnergySamples(Vec<EnergySample>),
}

/// Events read ahead, and what noting them looked up already.
#[derive(Default)]
struct Batch {
    events: Vec<Event>,
    /// The path index of each call that names a path (in order; [`NO_PATH`]: none yet): the
    /// lookup in a table of every path, a cache miss, done once instead of twice.
    paths: Vec<PathIndex>,
}

/// A path not indexed when its call was read ahead.
const NO_PATH: PathIndex = PathIndex::MAX;

fn convert_with<W: TraceWriter>(
    meta: &RunMeta,
    input: &Path,
    options: &Options<'_>,
    open: &mut dyn FnMut(usize) -> io::Result<W>,
    close: &mut dyn FnMut(usize, W) -> io::Result<()>,
    on_progress: &mut dyn FnMut(&Progress),
    learned: Learned,
) -> Result<Outcome, Stop> {
    let total_bytes = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0);
    let mut converter = Converter::new(meta, options, open(0)?, learned);
    converter.declare_named_tracks()?;
    let mut reader = run::open(input).map_err(|e| Stop::Error(ConvertError::Read(e)))?;
    let mut outcome = Outcome { parts: 1, ..Outcome::default() };
    let mut window = VecDeque::new();
    let mut spare: Vec<Batch> = Vec::new();
    // Events in `window`.
    let mut ahead = 0;
    loop {
        let frame = match reader.next_frame() {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                outcome
                    .warnings
                    .push(format!("{}: {e}; the trace holds what was recorded before it", input.display()));
                break;
            }
        };
        let item = match frame {
            Frame::Events(batch) if converter.streaming => {
                let Batch { events: buffer, mut paths } = spare.pop().unwrap_or_default();
                paths.clear();
                converter.observe(batch, &mut paths);
                // The reader's buffer itself waits in the window (no copy); a spare one
                // replaces it.
                let events = reader.take_events(buffer);
                ahead += events.len();
                Item::Events(Batch { events, paths })
            }
            Frame::Events(batch) => {
                converter.events(batch, None, &mut outcome, open, close)?;
                on_progress(&Progress { events: outcome.events, bytes_read: reader.offset(), total_bytes });
                continue;
            }
            Frame::Aggregates(samples) if options.only.io => Item::Aggregates(samples),
            Frame::Drops(samples) => Item::Drops(samples),
            Frame::EnergyDevice(device) if options.only.energy => Item::EnergyDevice(device),
            Frame::EnergySamples(samples) if options.only.energy => Item::EnergySamples(samples),
            _ => continue,
        };
        if !converter.streaming {
            converter.item(item, &mut outcome, open, close, &mut spare)?;
            continue;
        }
        window.push_back(item);
        while ahead > converter.lookahead
            && let Some(item) = window.pop_front()
        {
            if let Item::Events(batch) = &item {
                ahead -= batch.events.len();
            }
            converter.item(item, &mut outcome, open, close, &mut spare)?;
            on_progress(&Progress { events: outcome.events, bytes_read: reader.offset(), total_bytes });
        }
    }
    while let Some(item) = window.pop_front() {
        converter.item(item, &mut outcome, open, close, &mut spare)?;
    }
    converter.exact()?;
    on_progress(&Progress { events: outcome.events, bytes_read: reader.offset(), total_bytes });
    let Converter { out, .. } = converter;
    close(outcome.parts - 1, out)?;
    Ok(outcome)
}

/// What a record's `kind` says, looked up once per event.
#[derive(Clone, Copy)]
struct Kind {
    func: Func,
    class: Class,
    api: Api,
    /// A libc function with a path argument.
    has_path: bool,
}

impl Kind {
    /// Whether the call names a path of its own (see `calls::libc_args`).
    #[inline]
    fn names_path(&self, event: &Event) -> bool {
        self.has_path && event.arg2 != 0
    }
}

/// Kinds of the functions known, as a table (`Func::from_id` and `Func::class` are long
/// matches).
const KINDS: usize = 1024;
static KIND_TABLE: [Option<Kind>; KINDS] = {
    let mut table = [None; KINDS];
    let mut kind = 0;
    while kind < KINDS {
        if let Some(func) = Func::from_id(kind as u16) {
            let (class, api) = (func.class(), func.api());
            let has_path = matches!(api, Api::Libc) && func.has_path();
            table[kind] = Some(Kind { func, class, api, has_path });
        }
        kind += 1;
    }
    table
};

/// What a record's kind says, if it is a function this build knows.
#[inline]
fn kind_of(kind: u16) -> Option<Kind> {
    KIND_TABLE.get(kind as usize).copied().flatten()
}

/// A string the trace uses, by what it is in the run: computed and interned once.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Text {
    Literal(&'static str),
    /// A function's name (keyed by the function: one small integer to hash per event).
    Function(Func),
    /// A string of the run (a path, a task or domain name).
    Run(u64),
    /// `itt,<domain>` for a domain's string id (0: no domain).
    IttCategory(u64),
    /// A kernel's demangled name: (pid, function handle).
    Kernel(u32, u64),
}

/// The counter tracks of calls and drops.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum CounterKey {
    /// Aggregated calls of one function (and clock) on one thread.
    Calls { pid: u32, tid: u32, func: u16, clock: Option<i32> },
    /// Records dropped on a thread, or (`tid: None`) for want of a free lane.
    Drops { pid: u32, tid: Option<u32> },
}

/// The conversion's state: the writer's handles for what the run names.
struct Converter<'a, W: TraceWriter> {
    meta: &'a RunMeta,
    options: &'a Options<'a>,
    out: W,
    processes: FxHashMap<u32, ProcessHandle>,
    /// Index in `thread_states` of each thread declared in this part.
    threads: FxHashMap<(u32, u32), u32>,
    thread_states: Vec<ThreadState>,
    texts: FxHashMap<Text, StringHandle>,
    counters: FxHashMap<CounterKey, CounterHandle>,
    energy: EnergyTracks,
    /// The energy devices described so far, described again in each part.
    devices: Vec<EnergyDevice>,
    /// (name, category) of each function, by id: two handles looked up per call otherwise.
    function_texts: Vec<Option<(StringHandle, StringHandle)>>,
    /// The handle of each path, by its index in `fds`.
    path_texts: Vec<Option<StringHandle>>,
    /// Recent threads, by a hash of (pid, tid): (pid << 32 | tid, index in `thread_states`).
    thread_cache: Box<[(u64, u32); THREAD_CACHE_SLOTS]>,
    fds: FdIntervals,
    fd_cache: FdCache,
    /// Threads that recorded ITT spans or GPU calls: on them a call may lie inside a slice
    /// recorded after it (a task, a runtime call around a driver call). On the other threads
    /// no call encloses another, which lets a trace writer put each out as it comes.
    span_threads: FxHashSet<(u32, u32)>,
    /// `fds` and `span_threads` are learned as the events stream (else known beforehand)...
    streaming: bool,
    /// ...from events read this far ahead.
    lookahead: usize,
    /// Events written to the current part.
    in_part: u64,
}

/// A thread of the current part.
#[derive(Clone, Copy)]
struct ThreadState {
    handle: ThreadHandle,
    /// In `span_threads`.
    spans: bool,
}

const THREAD_CACHE_SLOTS: usize = 256;

impl<'a, W: TraceWriter> Converter<'a, W> {
    fn new(meta: &'a RunMeta, options: &'a Options<'a>, out: W, learned: Learned) -> Self {
        Converter {
            meta,
            options,
            out,
            processes: Default::default(),
            threads: Default::default(),
            thread_states: Vec::new(),
            texts: Default::default(),
            counters: Default::default(),
            energy: Default::default(),
            devices: Vec::new(),
            function_texts: Vec::new(),
            path_texts: Vec::new(),
            thread_cache: Box::new([(u64::MAX, 0); THREAD_CACHE_SLOTS]),
            fds: learned.fds,
            fd_cache: FdCache::default(),
            span_threads: learned.span_threads,
            streaming: learned.lookahead.is_some(),
            lookahead: learned.lookahead.unwrap_or(0),
            in_part: 0,
        }
    }

    /// A new writer took over: its handles start afresh, with the same metadata.
    fn new_part(&mut self) -> io::Result<()> {
        self.processes.clear();
        self.threads.clear();
        self.thread_states.clear();
        self.texts.clear();
        self.function_texts.clear();
        self.path_texts.clear();
        self.thread_cache.fill((u64::MAX, 0));
        self.counters.clear();
        self.energy = EnergyTracks::default();
        self.declare_named_tracks()?;
        for device in &self.devices {
            self.energy.device(device, &mut self.out)?;
        }
        Ok(())
    }

    /// Streaming: notes the fd changes and the spans of a batch read ahead, and the path index
    /// of each call naming a path (to `paths`, for [`Converter::events`]).
    fn observe(&mut self, batch: &[Event], paths: &mut Vec<PathIndex>) {
        let mut last = None;
        for event in batch {
            let Some(kind) = kind_of(event.kind) else { continue };
            if kind.api == Api::Libc {
                // Opens, closes and duplicates (descriptor calls) change what an fd names.
                if matches!(kind.class, Class::Open | Class::Close | Class::Fd) {
                    self.fds.observe_streaming(self.meta, event, &mut self.fd_cache);
                }
                if kind.names_path(event) {
                    // Just indexed (an open), or not: found at once or not at all.
                    paths.push(self.fds.path_index(event.arg2).unwrap_or(NO_PATH));
                }
            } else if last != Some((event.pid, event.tid)) {
                last = Some((event.pid, event.tid));
                if self.span_threads.insert((event.pid, event.tid))
                    && let Some(&index) = self.threads.get(&(event.pid, event.tid))
                {
                    self.thread_states[index as usize].spans = true;
                }
            }
        }
    }

    /// Converts a frame read ahead; an events buffer goes back to `spare`.
    fn item(
        &mut self,
        item: Item,
        outcome: &mut Outcome,
        open: &mut dyn FnMut(usize) -> io::Result<W>,
        close: &mut dyn FnMut(usize, W) -> io::Result<()>,
        spare: &mut Vec<Batch>,
    ) -> Result<(), Stop> {
        match item {
            Item::Events(batch) => {
                self.events(&batch.events, Some(&batch.paths), outcome, open, close)?;
                // Its records are not cleared: the reader overwrites them with the next frame's.
                spare.push(batch);
            }
            Item::Aggregates(samples) => self.aggregates(&samples)?,
            Item::Drops(samples) => self.drops(&samples)?,
            Item::EnergyDevice(device) => {
                self.energy.device(&device, &mut self.out)?;
                self.devices.push(device);
            }
            Item::EnergySamples(mut samples) => {
                samples.retain(|s| self.options.in_window(s.time_ns, s.time_ns));
                self.energy.samples(&samples, &mut self.out)?;
            }
        }
        Ok(())
    }

    /// Writes a batch of events; `paths`: the path indexes [`Converter::observe`] found for it.
    fn events(
        &mut self,
        batch: &[Event],
        paths: Option<&[PathIndex]>,
        outcome: &mut Outcome,
        open: &mut dyn FnMut(usize) -> io::Result<W>,
        close: &mut dyn FnMut(usize, W) -> io::Result<()>,
    ) -> Result<(), Stop> {
        let options = self.options;
        let mut paths = paths.unwrap_or_default().iter();
        for event in batch {
            let Some(kind) = kind_of(event.kind) else {
                continue;
            };
            // Taken before any filter, in the order `observe` pushed them.
            let path = if kind.names_path(event) { paths.next().copied() } else { None };
            let path = path.filter(|&index| index != NO_PATH);
            if !options.only.api(kind.api)
                || !options.pid(event.pid)
                || !options.in_window(event.start, event.start.saturating_add(event.dur))
            {
                continue;
            }
            if options.split_every.is_some_and(|n| self.in_part >= n) {
                let next = open(outcome.parts)?;
                let full = std::mem::replace(&mut self.out, next);
                close(outcome.parts - 1, full)?;
                outcome.parts += 1;
                self.in_part = 0;
                self.new_part()?;
            }
            let thread = self.thread(event.pid, event.tid)?;
            if kind.api == Api::Itt {
                itt::write(self, kind.func, event, thread.handle)?;
            } else {
                calls::write(self, kind, event, thread, path)?;
            }
            self.in_part += 1;
            outcome.events += 1;
        }
        self.exact()
    }

    /// Whether the streaming pass can go on exactly.
    fn exact(&self) -> Result<(), Stop> {
        match self.fds.inexact() {
            Some(reason) => Err(Stop::Inexact(reason.to_string())),
            None => Ok(()),
        }
    }

    /// Names every process (its programs, in exec order) and every named thread, by id
    /// (those the options keep).
    fn declare_named_tracks(&mut self) -> io::Result<()> {
        let mut pids: Vec<_> = self.meta.images.iter().filter(|(pid, _)| self.options.pid(**pid)).collect();
        pids.sort_by_key(|(pid, _)| **pid);
        for (&pid, images) in pids {
            let label = (self.options.process_name)(pid, images);
            let process = self.out.process(pid, Some(&label))?;
            self.processes.insert(pid, process);
        }
        let mut threads: Vec<_> =
            self.meta.threads.iter().filter(|((pid, _), _)| self.options.pid(*pid)).collect();
        threads.sort();
        for (&(pid, tid), name) in threads {
            let process = self.process(pid)?;
            let thread = self.out.thread(process, tid, Some(&format!("{name} ({tid})")))?;
            self.add_thread(pid, tid, thread);
        }
        Ok(())
    }

    fn add_thread(&mut self, pid: u32, tid: u32, handle: ThreadHandle) -> u32 {
        let spans = self.span_threads.contains(&(pid, tid));
        self.thread_states.push(ThreadState { handle, spans });
        let index = (self.thread_states.len() - 1) as u32;
        self.threads.insert((pid, tid), index);
        index
    }

    /// The process `pid`, declared without a name the first time the run mentions it
    /// without describing it.
    fn process(&mut self, pid: u32) -> io::Result<ProcessHandle> {
        if let Some(&process) = self.processes.get(&pid) {
            return Ok(process);
        }
        let process = self.out.process(pid, None)?;
        self.processes.insert(pid, process);
        Ok(process)
    }

    #[inline]
    fn thread(&mut self, pid: u32, tid: u32) -> io::Result<ThreadState> {
        let key = u64::from(pid) << 32 | u64::from(tid);
        let slot = (tid ^ pid.rotate_left(7)) as usize % THREAD_CACHE_SLOTS;
        let (cached, index) = self.thread_cache[slot];
        if cached == key {
            return Ok(self.thread_states[index as usize]);
        }
        let index = match self.threads.get(&(pid, tid)) {
            Some(&index) => index,
            None => {
                let process = self.process(pid)?;
                let thread = self.out.thread(process, tid, None)?;
                self.add_thread(pid, tid, thread)
            }
        };
        self.thread_cache[slot] = (key, index);
        Ok(self.thread_states[index as usize])
    }

    /// The handle of path `index` of `fds`.
    #[inline]
    fn path_text(&mut self, index: PathIndex) -> StringHandle {
        if let Some(&Some(handle)) = self.path_texts.get(index as usize) {
            return handle;
        }
        let handle = self.text(Text::Run(self.fds.path_id(index)));
        if self.path_texts.len() <= index as usize {
            self.path_texts.resize(index as usize + 1, None);
        }
        self.path_texts[index as usize] = Some(handle);
        handle
    }

    fn text(&mut self, text: Text) -> StringHandle {
        if let Some(&handle) = self.texts.get(&text) {
            return handle;
        }
        let meta = self.meta;
        let handle = match text {
            Text::Literal(s) => self.out.intern(s),
            Text::Function(func) => self.out.intern(func.name()),
            Text::Run(id) => self.out.intern(&meta.string(id)),
            Text::IttCategory(0) => self.out.intern("itt,"),
            Text::IttCategory(domain) => self.out.intern(&format!("itt,{}", meta.string(domain))),
            Text::Kernel(pid, function) => self.out.intern(&meta.kernel_name(pid, function)),
        };
        self.texts.insert(text, handle);
        handle
    }

    fn counter(
        &mut self,
        key: CounterKey,
        pid: u32,
        name: impl FnOnce() -> String,
    ) -> io::Result<CounterHandle> {
        if let Some(&counter) = self.counters.get(&key) {
            return Ok(counter);
        }
        let process = self.process(pid)?;
        let unit = match key {
            CounterKey::Calls { .. } => CounterUnit { name: "count", decimals: 0 },
            CounterKey::Drops { .. } => CounterUnit { name: "dropped", decimals: 0 },
        };
        let counter = self.out.counter_track(process, &name(), unit)?;
        self.counters.insert(key, counter);
        Ok(counter)
    }

    /// Cumulative counts of aggregated calls (clock reads), one track per thread and clock.
    fn aggregates(&mut self, samples: &[AggregateSample]) -> io::Result<()> {
        for sample in samples {
            let Some(func) = Func::from_id(sample.func) else {
                continue;
            };
            if !self.options.pid(sample.pid) || !self.options.in_window(sample.time_ns, sample.time_ns) {
                continue;
            }
            let key = CounterKey::Calls {
                pid: sample.pid,
                tid: sample.tid,
                func: sample.func,
                clock: sample.clock_id,
            };
            let track = self.counter(key, sample.pid, || match sample.clock_id {
                Some(clock) => format!("{} calls (clock {clock}, tid {})", func.name(), sample.tid),
                None => format!("{} calls (tid {})", func.name(), sample.tid),
            })?;
            self.out.counter(track, sample.time_ns, CounterValue::UInt(sample.count))?;
        }
        Ok(())
    }

    /// Cumulative drop counts, per thread and for records that found no free lane.
    fn drops(&mut self, samples: &[DropSample]) -> io::Result<()> {
        for sample in samples {
            if !self.options.pid(sample.pid) || !self.options.in_window(sample.time_ns, sample.time_ns) {
                continue;
            }
            let tid = (sample.stream != 0).then_some(sample.tid);
            let track =
                self.counter(CounterKey::Drops { pid: sample.pid, tid }, sample.pid, || match tid {
                    None => "dropped records (no free lane)".to_string(),
                    Some(tid) => format!("dropped records (tid {tid})"),
                })?;
            self.out.counter(track, sample.time_ns, CounterValue::UInt(sample.dropped))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_run::{self, DATASET, START};
    use crate::trace::chrome::ChromeWriter;
    use crate::trace::perfetto::PerfettoWriter;
    use mlprof_format::record::IttSpan;
    use mlprof_format::runfile::{RunEnd, RunInfo, RunWriter};
    use mlprof_format::string_id;

    /// Converts `path` to Chrome JSON, reading `lookahead` events ahead.
    fn chrome(path: &Path, lookahead: usize) -> (Outcome, serde_json::Value) {
        let meta = RunMeta::load_metadata(path).unwrap();
        let mut json = Vec::new();
        let outcome = convert_looking_ahead(
            &meta,
            path,
            &Options::default(),
            &mut |_| ChromeWriter::new(Vec::new(), START),
            &mut |_, w| {
                json = w.finish()?;
                Ok(())
            },
            &mut |_| {},
            lookahead,
        )
        .unwrap();
        (outcome, serde_json::from_slice(&json).unwrap())
    }

    #[test]
    fn a_span_found_after_its_threads_calls_were_written_still_encloses_them() {
        // Two reads, then (a batch later, as a task is recorded when it ends) the task around
        // them: read ahead, the thread is known to have spans and its reads wait in its
        // forest; not, they were written first and the task goes out as a late parent.
        let path = std::env::temp_dir().join(format!("mlprof-report-late-span-{}.bin", std::process::id()));
        let info = RunInfo { start_mono_ns: START, ..RunInfo::default() };
        let mut w = RunWriter::create(&path, &info).unwrap();
        let read = Event { kind: Func::Read as u16, pid: 10, tid: 10, fd: 0, dur: 100, ..Event::default() };
        w.write_events(&[Event { start: START + 1_000, ..read }, Event { start: START + 2_000, ..read }])
            .unwrap();
        let task = IttSpan {
            kind: Func::IttTask as u16,
            pid: 10,
            tid: 10,
            start: START + 500,
            dur: 4_500,
            ..IttSpan::default()
        };
        w.write_events(&[task.into_event()]).unwrap();
        w.finish(&RunEnd::default()).unwrap();
        let meta = RunMeta::load_metadata(&path).unwrap();
        let convert = |lookahead| {
            let mut stats = None;
            let outcome = convert_looking_ahead(
                &meta,
                &path,
                &Options::default(),
                &mut |_| PerfettoWriter::new(Vec::new(), false),
                &mut |_, w| {
                    stats = Some(w.stats());
                    w.finish().map(drop)
                },
                &mut |_| {},
                lookahead,
            )
            .unwrap();
            (outcome.events, outcome.second_pass, stats.unwrap())
        };
        let (ahead, late) = (convert(LOOKAHEAD_EVENTS), convert(0));
        std::fs::remove_file(&path).unwrap();
        assert_eq!((ahead.0, ahead.1.as_deref()), (3, None));
        assert_eq!((ahead.2.late_parents, ahead.2.clamped), (0, 0));
        // Learning spans late costs no second pass: the writer puts the task out of order,
        // with an absolute timestamp, and trace_processor nests it by time.
        assert_eq!((late.0, late.1.as_deref()), (3, None));
        assert_eq!((late.2.late_parents, late.2.clamped), (1, 0));
    }

    #[test]
    fn an_open_recorded_after_its_reads_names_them_all_the_same() {
        // The collector holds an open back until its path is defined: here its read comes a
        // batch before it in the file.
        let path = std::env::temp_dir().join(format!("mlprof-report-late-open-{}.bin", std::process::id()));
        let info = RunInfo { start_mono_ns: START, ..RunInfo::default() };
        let mut w = RunWriter::create(&path, &info).unwrap();
        w.write_string(string_id(DATASET.as_bytes()), DATASET.as_bytes()).unwrap();
        let base = Event { pid: 10, tid: 10, fd: 3, ..Event::default() };
        let read = Event { kind: Func::Read as u16, start: START + 5_000, dur: 100, ..base };
        let open = Event {
            kind: Func::Open as u16,
            start: START + 1_000,
            dur: 1_000,
            ret: 3,
            arg2: string_id(DATASET.as_bytes()),
            ..base
        };
        w.write_events(&[read]).unwrap();
        w.write_events(&[open]).unwrap();
        w.finish(&RunEnd::default()).unwrap();
        let converted = [chrome(&path, LOOKAHEAD_EVENTS), chrome(&path, 0)];
        std::fs::remove_file(&path).unwrap();
        for (lookahead, (outcome, trace)) in [LOOKAHEAD_EVENTS, 0].into_iter().zip(converted) {
            let read = trace["traceEvents"].as_array().unwrap().iter().find(|r| r["name"] == "read").unwrap();
            assert_eq!(read["args"]["path"], DATASET, "lookahead {lookahead}");
            // Read ahead, the open was known in time; not, the run was read again.
            assert_eq!(outcome.second_pass.is_some(), lookahead == 0, "{:?}", outcome.second_pass);
        }
    }

    #[test]
    fn a_run_becomes_named_tracks_slices_and_counters() {
        let run = test_run::write("convert");
        let meta = RunMeta::load(run.path()).unwrap();
        let mut reports = 0;
        let mut json = Vec::new();
        let outcome = convert(
            &meta,
            run.path(),
            &Options::default(),
            &mut |_| ChromeWriter::new(Vec::new(), START),
            &mut |_, w| {
                json = w.finish()?;
                Ok(())
            },
            &mut |_| reports += 1,
        )
        .unwrap();
        assert_eq!((outcome.events, outcome.parts, reports), (5, 1, 1));
        let trace: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let records = trace["traceEvents"].as_array().unwrap();
        let of_phase = |ph: &'static str| records.iter().filter(move |r| r["ph"] == ph);
        let names: Vec<_> = of_phase("M").map(|r| r["args"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["train --epochs=1 (pid 10)", "train --epochs=1 (pid 11)", "python (10)"]);
        // The worker's read of its inherited fd names the parent's file.
        let child_read = of_phase("X").find(|r| r["pid"] == 11).unwrap();
        assert_eq!(child_read["args"]["path"], DATASET);
        assert_eq!((child_read["ts"].as_f64(), child_read["dur"].as_f64()), (Some(9.0), Some(1.0)));
        let counters: Vec<_> =
            of_phase("C").map(|r| (r["name"].as_str().unwrap(), r["args"].clone())).collect();
        assert_eq!(counters.len(), 2);
        assert_eq!(counters[0].0, "clock_gettime calls (clock 1, tid 10)");
        assert_eq!(counters[1].1["dropped"], 3);
    }
}
