//! The conversion's state: the writer's handles for what the run names (processes, threads,
//! strings, counter tracks), what it learned of fds and spans, and the event loop that hands
//! each record to `calls` or `itt`.

use std::io;

use mlprof_format::energy::EnergyDevice;
use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::Event;
use mlprof_format::runfile::{AggregateSample, DropSample};
use mlprof_trace::{
    CounterHandle, CounterUnit, CounterValue, ProcessHandle, StringHandle, ThreadHandle, TraceWriter,
};
use rustc_hash::{FxHashMap, FxHashSet};

use super::read::{Batch, Item, Learned};
use super::{Options, Outcome, Stop, calls, itt};
use crate::energy::tracks::EnergyTracks;
use crate::prefetch::prefetch;
use crate::run::{FdCache, FdIntervals, PathIndex, RunMeta};

/// What a record's `kind` says, looked up once per event.
#[derive(Clone, Copy)]
pub(super) struct Kind {
    pub(super) func: Func,
    pub(super) class: Class,
    pub(super) api: Api,
    /// A libc function with a path argument.
    pub(super) has_path: bool,
}

impl Kind {
    /// Whether the call names a path of its own (see `calls::libc_args`).
    #[inline]
    pub(super) fn names_path(&self, event: &Event) -> bool {
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

/// Records between the one [`Converter::observe`] reads and the one it asks the cache for:
/// a page (64 records of 64 bytes), ~2 µs of work ahead, which covers a read from memory.
const RECORDS_AHEAD: usize = 64;

/// What a record's kind says, if it is a function this build knows.
#[inline]
fn kind_of(kind: u16) -> Option<Kind> {
    KIND_TABLE.get(kind as usize).copied().flatten()
}

/// A string the trace uses, by what it is in the run: computed and interned once.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Text {
    Literal(&'static str),
    /// A function's name (keyed by the function: one small integer to hash per event).
    Function(Func),
    /// A string of the run (a path, a task or domain name).
    Run(u64),
    /// `itt,<domain>` for a domain's string id (0: no domain).
    IttCategory(u64),
    /// A kernel's demangled name: (pid, function handle).
    Kernel(u32, u64),
    /// A trapped system call's name (complete mode), by number.
    Syscall(u32),
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
pub(super) struct Converter<'a, W: TraceWriter> {
    pub(super) meta: &'a RunMeta,
    options: &'a Options<'a>,
    pub(super) out: W,
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
    pub(super) function_texts: Vec<Option<(StringHandle, StringHandle)>>,
    /// The handle of each path, by its index in `fds`.
    path_texts: Vec<Option<StringHandle>>,
    /// Recent threads, by a hash of (pid, tid): (pid << 32 | tid, index in `thread_states`).
    thread_cache: Box<[(u64, u32); THREAD_CACHE_SLOTS]>,
    pub(super) fds: FdIntervals,
    pub(super) fd_cache: FdCache,
    /// Threads that recorded ITT spans or GPU calls: on them a call may lie inside a slice
    /// recorded after it (a task, a runtime call around a driver call). On the other threads
    /// no call encloses another, which lets a trace writer put each out as it comes.
    span_threads: FxHashSet<(u32, u32)>,
    /// `fds` and `span_threads` are learned as the events stream (else known beforehand)...
    pub(super) streaming: bool,
    /// ...from events read this far ahead.
    pub(super) lookahead: usize,
    /// Events written to the current part.
    in_part: u64,
}

/// A thread of the current part.
#[derive(Clone, Copy)]
pub(super) struct ThreadState {
    pub(super) handle: ThreadHandle,
    /// In `span_threads`.
    pub(super) spans: bool,
}

const THREAD_CACHE_SLOTS: usize = 256;

impl<'a, W: TraceWriter> Converter<'a, W> {
    pub(super) fn new(meta: &'a RunMeta, options: &'a Options<'a>, out: W, learned: Learned) -> Self {
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
    pub(super) fn observe(&mut self, batch: &[Event], paths: &mut Vec<Option<PathIndex>>) {
        let mut last = None;
        for (at, event) in batch.iter().enumerate() {
            // Records read where they lie in the mapped run are not in the cache (no copy
            // brought them there), and the hardware's prefetch stops at page boundaries: the
            // reads below would wait on memory for each record. Asked for a page ahead.
            if let Some(far) = batch.get(at + RECORDS_AHEAD) {
                prefetch(far);
            }
            // A path's index is a cache miss over a run's paths: asked for ahead.
            if let Some(ahead) =
                batch.get(at + 16).filter(|e| kind_of(e.kind).is_some_and(|k| k.names_path(e)))
            {
                self.fds.prefetch_path(ahead.arg2);
            }
            let Some(kind) = kind_of(event.kind) else { continue };
            if kind.api == Api::Libc {
                // Opens, closes and duplicates (descriptor calls) change what an fd names; a
                // successful open indexes its path, and says which (not hashed again below).
                let opened = match kind.class {
                    Class::Open | Class::Close | Class::Fd => {
                        self.fds.observe_streaming(self.meta, event, &mut self.fd_cache)
                    }
                    _ => None,
                };
                if kind.names_path(event) {
                    // Just indexed (an open), or not: found at once or not at all.
                    paths.push(opened.or_else(|| self.fds.path_index(event.arg2)));
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
    pub(super) fn item<'m>(
        &mut self,
        item: Item<'m>,
        outcome: &mut Outcome,
        open: &mut dyn FnMut(usize) -> io::Result<W>,
        close: &mut dyn FnMut(usize, W) -> io::Result<()>,
        spare: &mut Vec<Batch<'m>>,
    ) -> Result<(), Stop> {
        match item {
            Item::Events(batch) => {
                self.events(batch.records(), Some(&batch.paths), outcome, open, close)?;
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
    pub(super) fn events(
        &mut self,
        batch: &[Event],
        paths: Option<&[Option<PathIndex>]>,
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
            let path = if kind.names_path(event) { paths.next().copied().flatten() } else { None };
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
    pub(super) fn exact(&self) -> Result<(), Stop> {
        match self.fds.inexact() {
            Some(reason) => Err(Stop::Inexact(reason.to_string())),
            None => Ok(()),
        }
    }

    /// Names every process (its programs, in exec order) and every named thread, by id
    /// (those the options keep).
    pub(super) fn declare_named_tracks(&mut self) -> io::Result<()> {
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
    pub(super) fn path_text(&mut self, index: PathIndex) -> StringHandle {
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

    pub(super) fn text(&mut self, text: Text) -> StringHandle {
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
            Text::Syscall(nr) => self.out.intern(&crate::summary::syscalls::syscall_name(nr)),
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
