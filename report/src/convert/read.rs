//! Reading the run for a conversion: its frames in file order, event batches held in a
//! look-ahead window while their opens, closes and spans are noted, then converted in turn.

use std::collections::VecDeque;
use std::io;
use std::path::Path;

use mlprof_format::energy::{EnergyDevice, EnergySample};
use mlprof_format::record::Event;
use mlprof_format::runfile::{AggregateSample, DropSample, Frame, InPlace, RunReader};
use mlprof_trace::TraceWriter;
use rustc_hash::FxHashSet;

use super::converter::Converter;
use super::{ConvertError, Options, Outcome, Progress, Stop};
use crate::run::{self, FdIntervals, Mapping, PathIndex, RunMeta};

/// What the events tell about the run: which file each fd named, which threads have spans.
pub(super) struct Learned {
    pub(super) fds: FdIntervals,
    pub(super) span_threads: FxHashSet<(u32, u32)>,
    /// Events read ahead when they are learned while converting (else they are complete).
    pub(super) lookahead: Option<usize>,
}

/// A frame read ahead, waiting for its turn.
pub(super) enum Item<'m> {
    Events(Batch<'m>),
    Aggregates(Vec<AggregateSample>),
    Drops(Vec<DropSample>),
    EnergyDevice(EnergyDevice),
    EnergySamples(Vec<EnergySample>),
}

/// Events read ahead, and what noting them looked up already.
#[derive(Default)]
pub(super) struct Batch<'m> {
    /// The records, when copied (a buffer of the reader's, kept for reuse either way)...
    pub(super) events: Vec<Event>,
    /// ...or where they lie in the mapped run file.
    pub(super) in_place: Option<&'m [Event]>,
    /// The path index of each call that names a path (in order; `None`: not indexed when
    /// the call was read ahead): the lookup in a table of every path, a cache miss, done once
    /// instead of twice.
    pub(super) paths: Vec<Option<PathIndex>>,
}

impl Batch<'_> {
    /// The batch's records.
    pub(super) fn records(&self) -> &[Event] {
        self.in_place.unwrap_or(&self.events)
    }
}

/// The run file's frames: read from the file into the reader's buffers, or (where the file
/// can be mapped) events viewed where they lie.
enum Source<'m> {
    Copied(RunReader),
    Mapped(RunReader<&'m [u8]>),
}

impl<'m> Source<'m> {
    fn next(&mut self) -> Result<Option<InPlace<'_, 'm>>, mlprof_format::runfile::Error> {
        match self {
            Source::Copied(reader) => Ok(reader.next_frame()?.map(InPlace::Frame)),
            Source::Mapped(reader) => reader.next_frame_in_place(),
        }
    }

    fn offset(&self) -> u64 {
        match self {
            Source::Copied(reader) => reader.offset(),
            Source::Mapped(reader) => reader.offset(),
        }
    }

    /// The records of the events frame just read, for a batch that waits (see
    /// `RunReader::take_events`).
    fn take_events(&mut self, replacement: Vec<Event>) -> Vec<Event> {
        match self {
            Source::Copied(reader) => reader.take_events(replacement),
            Source::Mapped(reader) => reader.take_events(replacement),
        }
    }
}

pub(super) fn convert_with<W: TraceWriter>(
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
    let mapping = Mapping::open(input);
    let mut reader = match &mapping {
        Some(mapping) => RunReader::new(mapping.bytes()).map(Source::Mapped).map_err(|e| e.to_string()),
        None => run::open(input).map(Source::Copied),
    }
    .map_err(|e| Stop::Error(ConvertError::Read(format!("{}: {e}", input.display()))))?;
    let mut outcome = Outcome { parts: 1, ..Outcome::default() };
    let mut window =
        Window { items: VecDeque::new(), ahead: 0, spare: Vec::new(), mapping: mapping.as_ref() };
    loop {
        let next = match reader.next() {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(e) => {
                outcome
                    .warnings
                    .push(format!("{}: {e}; the trace holds what was recorded before it", input.display()));
                break;
            }
        };
        let item = match next {
            // Records viewed where they lie in the mapped file: the batch holds them as they are.
            InPlace::Events(records) if converter.streaming => {
                let mut batch = window.note(&mut converter, records);
                batch.in_place = Some(records);
                Item::Events(batch)
            }
            InPlace::Frame(Frame::Events(records)) if converter.streaming => {
                let mut batch = window.note(&mut converter, records);
                // The reader's buffer itself waits in the window (no copy); the spare batch's
                // buffer replaces it.
                batch.events = reader.take_events(std::mem::take(&mut batch.events));
                Item::Events(batch)
            }
            InPlace::Events(records) | InPlace::Frame(Frame::Events(records)) => {
                converter.events(records, None, &mut outcome, open, close)?;
                if let Some(mapping) = window.mapping {
                    mapping.release_through(records);
                }
                on_progress(&Progress { events: outcome.events, bytes_read: reader.offset(), total_bytes });
                continue;
            }
            InPlace::Frame(Frame::Aggregates(samples)) if options.only.io => Item::Aggregates(samples),
            InPlace::Frame(Frame::Drops(samples)) => Item::Drops(samples),
            InPlace::Frame(Frame::EnergyDevice(device)) if options.only.energy => Item::EnergyDevice(device),
            InPlace::Frame(Frame::EnergySamples(samples)) if options.only.energy => {
                Item::EnergySamples(samples)
            }
            InPlace::Frame(_) => continue,
        };
        if !converter.streaming {
            converter.item(item, &mut outcome, open, close, &mut window.spare)?;
            continue;
        }
        window.items.push_back(item);
        if window.convert(&mut converter, &mut outcome, open, close, false)? {
            on_progress(&Progress { events: outcome.events, bytes_read: reader.offset(), total_bytes });
        }
    }
    window.convert(&mut converter, &mut outcome, open, close, true)?;
    converter.exact()?;
    on_progress(&Progress { events: outcome.events, bytes_read: reader.offset(), total_bytes });
    let Converter { out, .. } = converter;
    close(outcome.parts - 1, out)?;
    Ok(outcome)
}

/// The frames read ahead, in file order, waiting for their turn; and the batches free again.
struct Window<'m> {
    items: VecDeque<Item<'m>>,
    /// Events in `items`.
    ahead: usize,
    spare: Vec<Batch<'m>>,
    /// The mapped run, whose pages are released behind the batches converted.
    mapping: Option<&'m Mapping>,
}

impl<'m> Window<'m> {
    /// Notes a batch of records read ahead (its fd changes and spans, the path index of each
    /// call naming a path) into a spare batch, which is to hold them here.
    fn note<W: TraceWriter>(&mut self, converter: &mut Converter<'_, W>, records: &[Event]) -> Batch<'m> {
        let mut batch = self.spare.pop().unwrap_or_default();
        batch.paths.clear();
        batch.in_place = None;
        converter.observe(records, &mut batch.paths);
        self.ahead += records.len();
        batch
    }

    /// Converts items from the front while more events than the look-ahead wait (`all`:
    /// every item, at the end), releasing the mapped pages of the batches done. Whether it
    /// converted any.
    fn convert<W: TraceWriter>(
        &mut self,
        converter: &mut Converter<'_, W>,
        outcome: &mut Outcome,
        open: &mut dyn FnMut(usize) -> io::Result<W>,
        close: &mut dyn FnMut(usize, W) -> io::Result<()>,
        all: bool,
    ) -> Result<bool, Stop> {
        let mut converted = false;
        while all || self.ahead > converter.lookahead {
            let Some(item) = self.items.pop_front() else { break };
            let done = match &item {
                Item::Events(batch) => {
                    self.ahead -= batch.records().len();
                    batch.in_place
                }
                _ => None,
            };
            converter.item(item, outcome, open, close, &mut self.spare)?;
            converted = true;
            if let (Some(mapping), Some(done)) = (self.mapping, done) {
                mapping.release_through(done);
            }
        }
        Ok(converted)
    }
}
