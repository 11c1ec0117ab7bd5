//! The one streaming reader of a run's events: every report that reads a whole run in one pass
//! (`convert`, `export`, and what reads GPU activity, call sites and samples next) is a client
//! of [`read_exactly`], which hands it an [`EventStream`].
//!
//! Which file a call's fd named, and which threads have spans (ITT tasks, GPU calls) that may
//! enclose their calls, are learned from the events themselves ([`Learned`]): batches are read
//! [`LOOKAHEAD_EVENTS`] ahead of the one the client is given, and their opens, closes and
//! spans noted first ([`FdIntervals::observe_streaming`]), because the collector writes
//! records in drain order, not causal order. The stream also notes the path index of every
//! call that names a path of its own (a hash lookup over a run's paths, asked for ahead so it
//! is a cache hit), handed to the client with its batch ([`Batch::paths`]).
//!
//! Should a record arrive later than the look-ahead (see [`FdIntervals::inexact`]), the pass
//! is not exact: [`EventStream::next`] says so, the client drops what it wrote, and
//! [`read_exactly`] runs the pass again with the run's complete fd history from a full
//! metadata pass (a second read of the file). What a client makes is therefore always the
//! same as with the complete history, read ahead or not.

use std::collections::VecDeque;
use std::path::Path;

use mlprof_format::energy::{EnergyDevice, EnergySample};
use mlprof_format::func::{Api, Class};
use mlprof_format::record::Event;
use mlprof_format::runfile::{AggregateSample, DropSample};
use rustc_hash::FxHashSet;

use super::kinds::{Kind, kind_of};
use super::source::{End, Read, ReadBy, Source, Wants};
use super::{FdCache, FdIntervals, Mapping, PathIndex, RunMeta};
use crate::prefetch::prefetch;

/// Events read ahead of the batch a client is given, so that their opens, closes and spans
/// are known before the calls they concern (the collector writes in drain order, and holds an
/// open back until its path is defined). 16 MiB of records.
pub(crate) const LOOKAHEAD_EVENTS: usize = 1 << 18;

/// Records between the one [`Learned::observe`] reads and the one it asks the cache for: a
/// page (64 records of 64 bytes), ~2 µs of work ahead, which covers a read from memory.
const RECORDS_AHEAD: usize = 64;
/// Records between the one observed and the one whose path index is asked for ahead.
const PATHS_AHEAD: usize = 16;

/// How a client reads a run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamSpec {
    pub(crate) read_by: ReadBy,
    /// The frames besides events it is given.
    pub(crate) wants: Wants,
    /// Corrupt data ends the pass with an error (else the data before it is the run, and
    /// [`EventStream::read_error`] says why it ended).
    pub(crate) strict: bool,
    /// Events read ahead ([`LOOKAHEAD_EVENTS`]; tests ask for less).
    pub(crate) lookahead: usize,
}

/// A frame read, in file order.
pub(crate) enum Item<'m> {
    Events(Batch<'m>),
    Aggregates(Vec<AggregateSample>),
    Drops(Vec<DropSample>),
    EnergyDevice(EnergyDevice),
    EnergySamples(Vec<EnergySample>),
    /// What the GPUs did (CUPTI records, links), as CUPTI delivered it.
    Gpu(Vec<mlprof_format::gpu::GpuActivity>),
    /// CPU samples (`--sample`), as the collector drained them.
    Samples(Vec<mlprof_format::sample::CpuSample>),
    /// The sites of the events frame before it: never handed to a client (the stream attaches
    /// them to that frame's batch, [`Batch::site`]).
    EventSites(Vec<u32>),
}

/// An events frame read ahead, and what noting it found.
#[derive(Default)]
pub(crate) struct Batch<'m> {
    /// The records, when copied (a buffer of the reader's, kept for reuse either way)...
    events: Vec<Event>,
    /// ...or where they lie in the mapped run file.
    in_place: Option<&'m [Event]>,
    /// The path index of each call naming a path of its own, in order (`None`: no fd ever
    /// named it; and none noted at all when the fd history was complete beforehand).
    paths: Vec<Option<PathIndex>>,
    /// The run-wide call site of each record (`--sites`; empty: none has one).
    sites: Vec<u32>,
}

impl Batch<'_> {
    /// The batch's records.
    #[inline]
    pub(crate) fn records(&self) -> &[Event] {
        self.in_place.unwrap_or(&self.events)
    }

    /// The call sites of the records, by index (empty: none has one, or the pass did not ask).
    pub(crate) fn sites(&self) -> &[u32] {
        &self.sites
    }

    /// The call site of record `at` (0: none), when the pass asked for sites.
    #[inline]
    pub(crate) fn site(&self, at: usize) -> u32 {
        self.sites.get(at).copied().unwrap_or(0)
    }

    /// The path indexes noted, to be taken in record order ([`Paths::next`]).
    pub(crate) fn paths(&self) -> Paths<'_> {
        Paths { noted: self.paths.iter() }
    }
}

/// The path indexes a batch's calls that name a path were given when noted.
pub(crate) struct Paths<'b> {
    noted: std::slice::Iter<'b, Option<PathIndex>>,
}

impl Paths<'_> {
    /// The path index of `event` (of kind `kind`), taken for every record in order, whatever
    /// the client then keeps: `None` for a call that names no path of its own, one that no fd
    /// ever named, and every call when nothing was noted (a complete fd history: then
    /// [`FdIntervals::path_index`] gives the same answer).
    #[inline]
    pub(crate) fn next(&mut self, kind: Kind, event: &Event) -> Option<PathIndex> {
        if kind.names_path(event) { self.noted.next().copied().flatten() } else { None }
    }
}

/// Threads (pid, tid) that recorded ITT spans or GPU calls.
pub(crate) type SpanThreads = FxHashSet<(u32, u32)>;

/// What the events taught, as far as they were read: which file each fd named, and which
/// threads have spans.
pub(crate) struct Learned {
    pub(crate) fds: FdIntervals,
    /// The cache of fd lookups ([`FdIntervals::lookup_cached`]); noting a change of an fd
    /// ends its cached answer, so lookups must go through this one.
    pub(crate) fd_cache: FdCache,
    /// Threads that recorded ITT spans or GPU calls: on them a call may lie inside a slice
    /// recorded after it (a task, a runtime call around a driver call).
    pub(crate) span_threads: SpanThreads,
    /// Threads found to have spans by the last [`EventStream::next`].
    new_span_threads: Vec<(u32, u32)>,
}

impl Learned {
    /// Nothing learned yet: a streaming pass over a run of `meta`'s processes.
    fn streaming(meta: &RunMeta) -> Learned {
        Learned::new(FdIntervals::streaming(meta.images.values().flatten()), SpanThreads::default())
    }

    fn new(fds: FdIntervals, span_threads: SpanThreads) -> Learned {
        Learned { fds, fd_cache: FdCache::default(), span_threads, new_span_threads: Vec::new() }
    }

    /// Notes the fd changes and the spans of records read ahead, and the path index of each
    /// call naming a path (to `paths`).
    fn observe(&mut self, meta: &RunMeta, records: &[Event], paths: &mut Vec<Option<PathIndex>>) {
        let mut last = None;
        for (at, event) in records.iter().enumerate() {
            // Records read where they lie in the mapped run are not in the cache (no copy
            // brought them there), and the hardware's prefetch stops at page boundaries: the
            // reads below would wait on memory for each record. Asked for a page ahead.
            if let Some(far) = records.get(at + RECORDS_AHEAD) {
                prefetch(far);
            }
            // A path's index is a cache miss over a run's paths: asked for ahead.
            if let Some(ahead) =
                records.get(at + PATHS_AHEAD).filter(|e| kind_of(e.kind).is_some_and(|k| k.names_path(e)))
            {
                self.fds.prefetch_path(ahead.arg2);
            }
            let Some(kind) = kind_of(event.kind) else { continue };
            if kind.api == Api::Libc {
                // Opens, closes and duplicates (descriptor calls) change what an fd names; a
                // successful open indexes its path, and says which (not hashed again below).
                let opened = match kind.class {
                    Class::Open | Class::Close | Class::Fd => {
                        self.fds.observe_streaming(meta, event, &mut self.fd_cache)
                    }
                    _ => None,
                };
                if kind.names_path(event) {
                    // Just indexed (an open), or not: found at once or not at all.
                    paths.push(opened.or_else(|| self.fds.path_index(event.arg2)));
                }
            } else if last != Some((event.pid, event.tid)) {
                last = Some((event.pid, event.tid));
                if self.span_threads.insert((event.pid, event.tid)) {
                    self.new_span_threads.push((event.pid, event.tid));
                }
            }
        }
    }
}

/// Why a pass stops early.
#[derive(Debug)]
pub(crate) enum Stop {
    /// A record arrived later than the look-ahead: what the pass made may differ from what
    /// the complete fd history gives (why).
    Inexact(String),
    /// The file could not be read ("PATH: what"; strict passes only).
    Read(String),
}

/// A client's pass, ended early.
#[derive(Debug)]
pub(crate) enum PassError<E> {
    /// Not exact (why): [`read_exactly`] runs it again with the complete fd history.
    Inexact(String),
    Fail(E),
}

impl<E: From<String>> From<Stop> for PassError<E> {
    fn from(stop: Stop) -> Self {
        match stop {
            Stop::Inexact(reason) => PassError::Inexact(reason),
            Stop::Read(message) => PassError::Fail(E::from(message)),
        }
    }
}

/// What an exact pass made, and why the run was read twice, if it was.
pub(crate) struct Exact<T> {
    pub(crate) value: T,
    pub(crate) second_pass: Option<String>,
}

/// Runs `pass` over the events of the run at `path` (metadata `meta`, from any load) with
/// fd histories learned as the events stream; should that pass not be exact, runs it again
/// with the complete histories (from a full metadata pass, [`RunMeta::load`] or, not
/// `strict`, [`RunMeta::load_readable`]). `pass` is called once or twice; it must start
/// afresh each time (what the first call made is the client's to drop).
pub(crate) fn read_exactly<T, E: From<String>>(
    path: &Path,
    meta: &RunMeta,
    spec: &StreamSpec,
    mut pass: impl FnMut(&mut EventStream<'_>) -> Result<T, PassError<E>>,
) -> Result<Exact<T>, E> {
    match one_pass(path, meta, spec, Learned::streaming(meta), Some(spec.lookahead), &mut pass) {
        Ok(value) => Ok(Exact { value, second_pass: None }),
        Err(PassError::Fail(e)) => Err(e),
        Err(PassError::Inexact(reason)) => {
            let complete = if spec.strict { RunMeta::load(path) } else { RunMeta::load_readable(path) };
            let complete = complete.map_err(E::from)?;
            let learned = Learned::new(complete.fds, complete.span_threads);
            match one_pass(path, meta, spec, learned, None, &mut pass) {
                Ok(value) => Ok(Exact { value, second_pass: Some(reason) }),
                Err(PassError::Fail(e)) => Err(e),
                Err(PassError::Inexact(reason)) => {
                    Err(E::from(format!("a complete fd history is exact, yet: {reason}")))
                }
            }
        }
    }
}

fn one_pass<T, E: From<String>>(
    path: &Path,
    meta: &RunMeta,
    spec: &StreamSpec,
    learned: Learned,
    lookahead: Option<usize>,
    pass: &mut impl FnMut(&mut EventStream<'_>) -> Result<T, PassError<E>>,
) -> Result<T, PassError<E>> {
    let mapping = match spec.read_by {
        ReadBy::Mapping => Mapping::open(path),
        ReadBy::Thread => None,
    };
    let source = Source::open(path, spec.read_by, mapping.as_ref(), spec.wants)
        .map_err(|e| PassError::Fail(e.into()))?;
    let mut stream = EventStream {
        meta,
        source,
        mapping: mapping.as_ref(),
        strict: spec.strict,
        lookahead,
        window: VecDeque::new(),
        ahead: 0,
        spare: Vec::new(),
        learned,
        done_reading: false,
        read_error: None,
        ranges: meta.window(),
    };
    pass(&mut stream)
}

/// A run's frames in file order, events read ahead of the one handed out
/// ([`EventStream::next`]), what they taught beside them ([`EventStream::learned`]).
pub(crate) struct EventStream<'m> {
    meta: &'m RunMeta,
    source: Source<'m>,
    /// The mapped run, whose pages are released behind the batches done.
    mapping: Option<&'m Mapping>,
    strict: bool,
    /// Events read ahead (`None`: the fd history is complete, nothing is read ahead).
    lookahead: Option<usize>,
    /// The frames read ahead, in file order, waiting for their turn.
    window: VecDeque<Item<'m>>,
    /// Events in `window`.
    ahead: usize,
    /// Batches done, for frames to come.
    spare: Vec<Batch<'m>>,
    learned: Learned,
    done_reading: bool,
    read_error: Option<String>,
    /// The capture ranges: GPU activities and CPU samples outside them are not handed out.
    ranges: super::ranges::Window,
}

impl<'m> EventStream<'m> {
    /// The next frame, once the events [`LOOKAHEAD_EVENTS`] beyond it are noted; `None` at
    /// the end of the data. Hand batches back with [`EventStream::recycle`].
    pub(crate) fn next(&mut self) -> Result<Option<Item<'m>>, Stop> {
        self.learned.new_span_threads.clear();
        self.exact()?;
        // In a run with call sites, two frames at least: the one after an events frame may be
        // its sites, which must be attached before the batch is handed out.
        let least = if self.meta.sites.is_empty() { 1 } else { 2 };
        while !self.done_reading
            && (self.window.len() < least || self.lookahead.is_some_and(|n| self.ahead <= n))
        {
            self.read_ahead()?;
        }
        let Some(mut item) = self.window.pop_front() else {
            self.exact()?;
            return Ok(None);
        };
        match &mut item {
            Item::Events(batch) => self.ahead -= batch.records().len(),
            Item::Gpu(records) => self.ranges.keep_gpu(records),
            Item::Samples(samples) => self.ranges.keep_samples(samples),
            _ => {}
        }
        Ok(Some(item))
    }

    /// A batch done with: its buffers serve frames to come, its mapped pages are released.
    pub(crate) fn recycle(&mut self, mut batch: Batch<'m>) {
        if let (Some(mapping), Some(done)) = (self.mapping, batch.in_place) {
            mapping.release_through(done);
        }
        if batch.events.capacity() > 0 {
            // Its records are not cleared: the reader overwrites them with the next frame's.
            self.source.give_back(std::mem::take(&mut batch.events));
        }
        self.spare.push(batch);
    }

    /// What the events read so far taught.
    pub(crate) fn learned(&mut self) -> &mut Learned {
        &mut self.learned
    }

    /// Threads the last [`EventStream::next`] found to have spans (when it read ahead), in
    /// the order found: a client that declared them without spans changes its mind here.
    pub(crate) fn new_span_threads(&self) -> &[(u32, u32)] {
        &self.learned.new_span_threads
    }

    /// Bytes of the run file read so far (ahead of the batch handed out).
    pub(crate) fn bytes_read(&self) -> u64 {
        self.source.offset()
    }

    /// Why reading stopped before the end of the data (not strict: corrupt data), if it did.
    pub(crate) fn read_error(&self) -> Option<&str> {
        self.read_error.as_deref()
    }

    /// What the reader noticed (at the end of the data: all of it).
    pub(crate) fn end(&self) -> End {
        self.source.end()
    }

    /// Whether the pass can go on exactly.
    fn exact(&self) -> Result<(), Stop> {
        match self.learned.fds.inexact() {
            Some(reason) => Err(Stop::Inexact(reason.to_string())),
            None => Ok(()),
        }
    }

    /// Reads one more frame into the window, noting an events frame's records.
    fn read_ahead(&mut self) -> Result<(), Stop> {
        let read = match self.source.next() {
            Ok(Some(read)) => read,
            Ok(None) => {
                self.done_reading = true;
                return Ok(());
            }
            Err(e) if self.strict => return Err(Stop::Read(e)),
            Err(e) => {
                self.read_error = Some(e);
                self.done_reading = true;
                return Ok(());
            }
        };
        let item = match read {
            Read::InPlace(records) => {
                let mut batch = self.note(records);
                batch.in_place = Some(records);
                Item::Events(batch)
            }
            Read::Copied(events) => {
                let mut batch = self.note(&events);
                // A spare batch holds no buffer: `recycle` gave it back to the source.
                batch.events = events;
                Item::Events(batch)
            }
            Read::Other(Item::EventSites(sites)) => {
                // The sites frame follows its events frame (the reader checked the count).
                if let Some(Item::Events(batch)) = self.window.back_mut() {
                    batch.sites = sites;
                    if !self.meta.folded_sites.is_empty() {
                        for site in &mut batch.sites {
                            *site = self.meta.standing_site(*site);
                        }
                    }
                }
                return Ok(());
            }
            Read::Other(item) => item,
        };
        self.window.push_back(item);
        Ok(())
    }

    /// Notes records read ahead into a spare batch, which is to hold them.
    fn note(&mut self, records: &[Event]) -> Batch<'m> {
        let mut batch = self.spare.pop().unwrap_or_default();
        batch.paths.clear();
        batch.sites.clear();
        batch.in_place = None;
        if self.lookahead.is_some() {
            self.learned.observe(self.meta, records, &mut batch.paths);
        }
        self.ahead += records.len();
        batch
    }
}

#[cfg(test)]
mod tests;
