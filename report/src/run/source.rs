//! Where a streaming pass's frames come from ([`crate::run::stream`]): the run file mapped and
//! its records read where they lie, read into the reader's buffers on the pass's own thread
//! where it cannot be mapped, or read on a thread of its own.
//!
//! Mapping spares the kernel's copy of the file (13 % of a conversion's CPU, see
//! [`Mapping`]); a reader thread moves that copy beside the pass instead, which suits a pass
//! whose own work is spread over threads (the export's table writers). Either way the records
//! a pass holds are the file's, in file order.

use std::path::Path;
use std::sync::mpsc::{Receiver, Sender, channel, sync_channel};

use mlprof_format::record::Event;
use mlprof_format::runfile::{Frame, InPlace, RunReader};

use super::Mapping;
use super::stream::Item;

/// How a pass reads the run file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadBy {
    /// Mapped where the file can be (records read where they lie, pages released behind the
    /// pass), else read on the pass's thread.
    Mapping,
    /// Read on a thread of its own, [`READ_AHEAD_FRAMES`] frames ahead.
    Thread,
}

/// Which frames besides the events a pass asks for (the metadata was read before it).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wants {
    /// Aggregated call counters (clock reads).
    pub(crate) aggregates: bool,
    /// Drop counters.
    pub(crate) drops: bool,
    /// Energy devices and samples.
    pub(crate) energy: bool,
    /// GPU activity records (the GPU timeline).
    pub(crate) gpu: bool,
    /// The call sites of the events (`--sites`), attached to their batches.
    pub(crate) sites: bool,
    /// CPU samples (`--sample`; their modules and stacks are in the metadata).
    pub(crate) samples: bool,
}

impl Wants {
    /// The item a frame that is not an events frame becomes, if asked for.
    fn item(self, frame: Frame<'_>) -> Option<Item<'static>> {
        match frame {
            Frame::Aggregates(samples) if self.aggregates => Some(Item::Aggregates(samples)),
            Frame::Drops(samples) if self.drops => Some(Item::Drops(samples)),
            Frame::EnergyDevice(device) if self.energy => Some(Item::EnergyDevice(device)),
            Frame::EnergySamples(samples) if self.energy => Some(Item::EnergySamples(samples)),
            Frame::GpuActivity(records) if self.gpu => Some(Item::Gpu(records)),
            Frame::EventSites(sites) if self.sites => Some(Item::EventSites(sites)),
            Frame::Samples(samples) if self.samples => Some(Item::Samples(samples)),
            _ => None,
        }
    }
}

/// What a source hands on.
pub(crate) enum Read<'m> {
    /// An events frame's records where they lie in the mapped file.
    InPlace(&'m [Event]),
    /// An events frame's records, in a buffer of the reader's (given back with
    /// [`Source::give_back`] when done, to be filled again).
    Copied(Vec<Event>),
    /// Any other frame asked for (never [`Item::Events`]).
    Other(Item<'m>),
}

/// What the reader said at the end of the data.
#[derive(Clone, Debug, Default)]
pub(crate) struct End {
    /// The reader's warnings (a truncated file, an older minor version).
    pub(crate) warnings: Vec<String>,
    /// Frames of kinds this build does not know, skipped.
    pub(crate) skipped_frames: u64,
}

/// Frames a reader thread reads ahead of the pass (events frames are up to a few MiB).
const READ_AHEAD_FRAMES: usize = 2;

/// What a reader thread sends, in file order, with the file offset after it.
enum Sent {
    Events(Vec<Event>),
    Other(Item<'static>),
    End(End),
}

/// A run file's frames, for one pass.
pub(crate) struct Source<'m> {
    reader: Reader<'m>,
    /// Buffers of copied records given back, for frames to come (a reader thread has its own).
    spares: Vec<Vec<Event>>,
    /// The run file, for messages.
    path: &'m Path,
    wants: Wants,
}

/// How a [`Source`] reads.
enum Reader<'m> {
    Mapped(RunReader<&'m [u8]>),
    Copied(RunReader),
    Thread(ReaderThread),
}

/// The pass's side of a reader thread.
struct ReaderThread {
    frames: Receiver<Result<(Sent, u64), String>>,
    spares: Sender<Vec<Event>>,
    /// The file offset after the last frame received.
    offset: u64,
    end: End,
}

impl<'m> Source<'m> {
    /// Opens `path` to be read as `read_by` says, for the frames `wants` names; `mapping` is
    /// its mapping, if the caller could make one (it outlives the source, whose records borrow
    /// it).
    pub(crate) fn open(
        path: &'m Path,
        read_by: ReadBy,
        mapping: Option<&'m Mapping>,
        wants: Wants,
    ) -> Result<Source<'m>, String> {
        let reader = match (read_by, mapping) {
            (ReadBy::Mapping, Some(mapping)) => Reader::Mapped(
                RunReader::new(mapping.bytes()).map_err(|e| format!("{}: {e}", path.display()))?,
            ),
            (ReadBy::Mapping, None) => Reader::Copied(super::open(path)?),
            (ReadBy::Thread, _) => Reader::Thread(reader_thread(path, wants)?),
        };
        Ok(Source { reader, spares: Vec::new(), path, wants })
    }

    /// The next frame asked for, `None` at the end of the data (then [`Source::end`] says what
    /// the reader noticed), or why reading stopped ("PATH: what").
    pub(crate) fn next(&mut self) -> Result<Option<Read<'m>>, String> {
        loop {
            let frame = match &mut self.reader {
                Reader::Mapped(reader) => reader.next_frame_in_place(),
                Reader::Copied(reader) => reader.next_frame().map(|frame| frame.map(InPlace::Frame)),
                Reader::Thread(thread) => return thread.next(),
            }
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
            let read = match frame {
                None => return Ok(None),
                Some(InPlace::Events(records)) => Read::InPlace(records),
                // Read into the reader's buffer (a file read, or a frame that could not be
                // viewed where it lies in the mapping): the buffer itself is handed on.
                Some(InPlace::Frame(Frame::Events(_))) => Read::Copied(self.take_events()),
                Some(InPlace::Frame(frame)) => match self.wants.item(frame) {
                    Some(item) => Read::Other(item),
                    None => continue,
                },
            };
            return Ok(Some(read));
        }
    }

    /// The records of the events frame just read, the reader given a spare buffer instead.
    fn take_events(&mut self) -> Vec<Event> {
        let spare = self.spares.pop().unwrap_or_default();
        match &mut self.reader {
            Reader::Mapped(reader) => reader.take_events(spare),
            Reader::Copied(reader) => reader.take_events(spare),
            Reader::Thread(_) => unreachable!("a reader thread sends its records"),
        }
    }

    /// A buffer of [`Read::Copied`] records, done with: filled again by a later frame.
    pub(crate) fn give_back(&mut self, events: Vec<Event>) {
        match &self.reader {
            // The thread may be gone (it stops at the end of the data): the buffer goes too.
            Reader::Thread(thread) => drop(thread.spares.send(events)),
            Reader::Mapped(_) | Reader::Copied(_) => self.spares.push(events),
        }
    }

    /// Bytes of the file read so far.
    pub(crate) fn offset(&self) -> u64 {
        match &self.reader {
            Reader::Mapped(reader) => reader.offset(),
            Reader::Copied(reader) => reader.offset(),
            Reader::Thread(thread) => thread.offset,
        }
    }

    /// What the reader noticed by the end of the data (or so far).
    pub(crate) fn end(&self) -> End {
        let of = |warnings: &[String], skipped_frames| End { warnings: warnings.to_vec(), skipped_frames };
        match &self.reader {
            Reader::Mapped(reader) => of(reader.warnings(), reader.skipped_frames()),
            Reader::Copied(reader) => of(reader.warnings(), reader.skipped_frames()),
            Reader::Thread(thread) => thread.end.clone(),
        }
    }
}

impl ReaderThread {
    /// The next frame the thread sent (it filtered them), or `None` at the end of the data.
    fn next<'m>(&mut self) -> Result<Option<Read<'m>>, String> {
        let (sent, after) =
            self.frames.recv().unwrap_or_else(|_| Err("the run reader thread stopped".into()))?;
        self.offset = after;
        Ok(match sent {
            Sent::Events(events) => Some(Read::Copied(events)),
            Sent::Other(item) => Some(Read::Other(item)),
            Sent::End(last) => {
                self.end = last;
                None
            }
        })
    }
}

/// Reads the frames of `path` that a pass wants on a thread of its own: the system calls that
/// copy the file from the page cache then run beside the pass rather than in it. Event buffers
/// given back are filled again. The thread stops at the end of the data, at an error (sent
/// on), or when the source is dropped.
fn reader_thread(path: &Path, wants: Wants) -> Result<ReaderThread, String> {
    let mut reader = super::open(path)?;
    let path = path.to_path_buf();
    let (frames, receiver) = sync_channel(READ_AHEAD_FRAMES);
    let (spare, spares) = channel::<Vec<Event>>();
    std::thread::Builder::new()
        .name("run-reader".into())
        .spawn(move || {
            loop {
                let sent = match reader.next_frame() {
                    Err(e) => Err(format!("{}: {e}", path.display())),
                    Ok(None) => Ok(Sent::End(End {
                        warnings: reader.warnings().to_vec(),
                        skipped_frames: reader.skipped_frames(),
                    })),
                    Ok(Some(Frame::Events(_))) => {
                        Ok(Sent::Events(reader.take_events(spares.try_recv().unwrap_or_default())))
                    }
                    Ok(Some(frame)) => match wants.item(frame) {
                        Some(item) => Ok(Sent::Other(item)),
                        None => continue,
                    },
                };
                let last = !matches!(sent, Ok(Sent::Events(_) | Sent::Other(_)));
                if frames.send(sent.map(|sent| (sent, reader.offset()))).is_err() || last {
                    break;
                }
            }
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    Ok(ReaderThread { frames: receiver, spares: spare, offset: 0, end: End::default() })
}
