//! The conversion's state: the writer's handles for what the run names (processes, threads,
//! strings, counter tracks), what it learned of fds and spans, and the event loop that hands
//! each record to `calls` or `itt`.

use std::io;

use mlprof_format::energy::EnergyDevice;
use mlprof_format::func::{Api, Func};
use mlprof_format::record::Event;
use mlprof_format::runfile::{AggregateSample, DropSample};
use mlprof_trace::{
    CounterHandle, CounterUnit, CounterValue, ProcessHandle, StringHandle, ThreadHandle, TraceWriter,
};
use rustc_hash::FxHashMap;

use super::{ConvertError, Options, Outcome, calls, itt};
use crate::energy::tracks::EnergyTracks;
use crate::run::kinds::kind_of;
use crate::run::stream::{Item, Learned, PassError, Paths, SpanThreads};
use crate::run::{FdIntervals, PathIndex, RunMeta};

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
    /// A kernel's demangled name, by its string id (the GPU timeline's).
    KernelName(u64),
    /// A GPU copy, by its CUPTI copy kind: `memcpy H2D`, … (`memcpy other` for kinds not named).
    Memcpy(u8),
    /// A trapped system call's name (complete mode), by number.
    Syscall(u32),
}

/// The counter tracks of calls and drops.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum CounterKey {
    /// Aggregated calls of one function (and clock) on one thread.
    Calls { pid: u32, tid: u32, func: u16, clock: Option<i32> },
    /// Records dropped on a thread, or (`tid: None`) for want of a free lane.
    Drops { pid: u32, tid: Option<u32> },
    /// Whether a CUDA device runs anything (the GPU timeline's device process).
    GpuBusy { pid: u32 },
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
    /// Events written to the current part.
    in_part: u64,
    /// Links of GPU work to host calls not written yet: (pid, tid, start) → correlation id.
    pub(super) gpu_links: FxHashMap<(u32, u32, u64), u32>,
    /// Per CUDA device: the intervals its work ran, for its busy counter at the end.
    pub(super) gpu_busy: std::collections::BTreeMap<u8, Vec<(u64, u64)>>,
    /// The writer's handles of the sampled stacks, and their frames' names.
    pub(super) stacks: super::samples::Stacks,
}

/// A thread of the current part.
#[derive(Clone, Copy)]
pub(super) struct ThreadState {
    pub(super) handle: ThreadHandle,
    /// Whether the thread has spans (`Learned::span_threads`, as far as the stream read): a
    /// call on it may lie inside a slice recorded after it (a task, a runtime call around a
    /// driver call). On the other threads no call encloses another, which lets a trace writer
    /// put each out as it comes.
    pub(super) spans: bool,
}

const THREAD_CACHE_SLOTS: usize = 256;

impl<'a, W: TraceWriter> Converter<'a, W> {
    /// A conversion into `out`.
    pub(super) fn new(meta: &'a RunMeta, options: &'a Options<'a>, out: W) -> Self {
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
            in_part: 0,
            gpu_links: Default::default(),
            gpu_busy: Default::default(),
            stacks: Default::default(),
        }
    }

    /// A new writer took over: its handles start afresh, with the same metadata.
    fn new_part(&mut self, span_threads: &SpanThreads) -> io::Result<()> {
        self.processes.clear();
        self.threads.clear();
        self.thread_states.clear();
        self.texts.clear();
        self.function_texts.clear();
        self.path_texts.clear();
        self.thread_cache.fill((u64::MAX, 0));
        self.counters.clear();
        self.stacks.new_part();
        self.energy = EnergyTracks::default();
        self.declare_named_tracks(span_threads)?;
        for device in &self.devices {
            self.energy.device(device, &mut self.out)?;
        }
        // Every part is a complete trace: the capture ranges' track too.
        super::ranges::write(self)?;
        Ok(())
    }

    /// Threads the stream found to have spans while reading ahead: those declared already
    /// are told, before any more of their calls is written (those declared later find them in
    /// `Learned::span_threads`).
    pub(super) fn spans_found(&mut self, threads: &[(u32, u32)]) {
        for thread in threads {
            if let Some(&index) = self.threads.get(thread) {
                self.thread_states[index as usize].spans = true;
            }
        }
    }

    /// Converts a frame other than events.
    pub(super) fn item(&mut self, item: Item<'_>) -> io::Result<()> {
        match item {
            Item::Events(_) | Item::Gpu(_) | Item::Samples(_) => {
                unreachable!("events, GPU work and CPU samples have their own")
            }
            // Not asked for: the stream attaches sites to their batch anyway.
            Item::EventSites(_) => {}
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

    /// Writes a batch of events (with their call sites, if any); `paths`: the path indexes the
    /// stream noted for it; `learned`: the fds it learned.
    pub(super) fn events(
        &mut self,
        (batch, sites): (&[Event], &[u32]),
        mut paths: Paths<'_>,
        learned: &mut Learned,
        outcome: &mut Outcome,
        open: &mut dyn FnMut(usize) -> io::Result<W>,
        close: &mut dyn FnMut(usize, W) -> io::Result<()>,
    ) -> Result<(), PassError<ConvertError>> {
        let options = self.options;
        for (at, event) in batch.iter().enumerate() {
            let Some(kind) = kind_of(event.kind) else {
                continue;
            };
            // Taken before any filter, in record order.
            let path = paths.next(kind, event);
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
                self.new_part(&learned.span_threads)?;
            }
            let thread = self.thread(event.pid, event.tid, &learned.span_threads)?;
            let site = sites.get(at).copied().unwrap_or(0);
            if kind.api == Api::Itt {
                itt::write(self, kind.func, event, thread.handle, site)?;
            } else {
                calls::write(self, learned, kind, event, thread, (path, site))?;
            }
            self.in_part += 1;
            outcome.events += 1;
        }
        Ok(())
    }

    /// Names every process (its programs, in exec order) and every named thread, by id
    /// (those the options keep); `span_threads`: the threads known to have spans.
    pub(super) fn declare_named_tracks(&mut self, span_threads: &SpanThreads) -> io::Result<()> {
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
            self.add_thread(pid, tid, thread, span_threads);
        }
        Ok(())
    }

    fn add_thread(&mut self, pid: u32, tid: u32, handle: ThreadHandle, span_threads: &SpanThreads) -> u32 {
        let spans = span_threads.contains(&(pid, tid));
        self.thread_states.push(ThreadState { handle, spans });
        let index = (self.thread_states.len() - 1) as u32;
        self.threads.insert((pid, tid), index);
        index
    }

    /// The options of this conversion.
    pub(super) fn options(&self) -> &'a Options<'a> {
        self.options
    }

    /// Whether thread (`pid`, `tid`) is declared in this part.
    pub(super) fn has_thread(&self, pid: u32, tid: u32) -> bool {
        self.threads.contains_key(&(pid, tid))
    }

    /// Process `pid` declared with `name` (a track of the conversion's own: a GPU).
    pub(super) fn named_process(&mut self, pid: u32, name: &str) -> io::Result<ProcessHandle> {
        if let Some(&process) = self.processes.get(&pid) {
            return Ok(process);
        }
        let process = self.out.process(pid, Some(name))?;
        self.processes.insert(pid, process);
        Ok(process)
    }

    /// Thread `tid` of `process` declared with `name` (a track of the conversion's own: a
    /// stream), as having spans: its slices do not come in time order.
    pub(super) fn named_thread(
        &mut self,
        process: ProcessHandle,
        pid: u32,
        tid: u32,
        name: &str,
        span_threads: &SpanThreads,
    ) -> io::Result<()> {
        let handle = self.out.thread(process, tid, Some(name))?;
        let index = self.add_thread(pid, tid, handle, span_threads);
        self.thread_states[index as usize].spans = true;
        Ok(())
    }

    /// The process `pid`, declared without a name the first time the run mentions it
    /// without describing it.
    pub(super) fn process(&mut self, pid: u32) -> io::Result<ProcessHandle> {
        if let Some(&process) = self.processes.get(&pid) {
            return Ok(process);
        }
        let process = self.out.process(pid, None)?;
        self.processes.insert(pid, process);
        Ok(process)
    }

    #[inline]
    pub(super) fn thread(
        &mut self,
        pid: u32,
        tid: u32,
        span_threads: &SpanThreads,
    ) -> io::Result<ThreadState> {
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
                self.add_thread(pid, tid, thread, span_threads)
            }
        };
        self.thread_cache[slot] = (key, index);
        Ok(self.thread_states[index as usize])
    }

    /// The handle of path `index` of `fds`.
    #[inline]
    pub(super) fn path_text(&mut self, fds: &FdIntervals, index: PathIndex) -> StringHandle {
        if let Some(&Some(handle)) = self.path_texts.get(index as usize) {
            return handle;
        }
        let handle = self.text(Text::Run(fds.path_id(index)));
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
            Text::KernelName(id) => self.out.intern(&crate::run::demangle(&meta.string(id))),
            Text::Memcpy(kind) => {
                self.out.intern(&format!("memcpy {}", mlprof_format::gpu::copy_kind_name(kind)))
            }
            Text::Syscall(nr) => self.out.intern(&crate::run::syscall_name(nr)),
        };
        self.texts.insert(text, handle);
        handle
    }

    pub(super) fn counter(
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
            CounterKey::GpuBusy { .. } => CounterUnit { name: "busy", decimals: 0 },
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
