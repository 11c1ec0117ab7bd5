//! Reading the run for a conversion: its frames in file order, event batches held in a
//! look-ahead window while their opens, closes and spans are noted, then converted in turn.

use std::collections::VecDeque;
use std::io;
use std::path::Path;

use mlprof_format::energy::{EnergyDevice, EnergySample};
use mlprof_format::record::Event;
use mlprof_format::runfile::{AggregateSample, DropSample, Frame};
use rustc_hash::FxHashSet;

use super::converter::Converter;
use super::{ConvertError, Options, Outcome, Progress, Stop};
use crate::run::{self, FdIntervals, PathIndex, RunMeta};
use crate::trace::TraceWriter;

/// What the events tell about the run: which file each fd named, which threads have spans.
pub(super) struct Learned {
    pub(super) fds: FdIntervals,
    pub(super) span_threads: FxHashSet<(u32, u32)>,
    /// Events read ahead when they are learned while converting (else they are complete).
    pub(super) lookahead: Option<usize>,
}

/// A frame read ahead, waiting for its turn.
pub(super) enum Item {
    Events(Batch),
    Aggregates(Vec<AggregateSample>),
    Drops(Vec<DropSample>),
    EnergyDevice(EnergyDevice),
    EnergySamples(Vec<EnergySample>),
}

/// Events read ahead, and what noting them looked up already.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) events: Vec<Event>,
    /// The path index of each call that names a path (in order; `None`: not indexed when
    /// the call was read ahead): the lookup in a table of every path, a cache miss, done once
    /// instead of twice.
    pub(super) paths: Vec<Option<PathIndex>>,
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
