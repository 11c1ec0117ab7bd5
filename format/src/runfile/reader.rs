//! [`RunReader`]: streams the frames of a `run.bin` with memory bounded by one frame. Corrupt
//! input is an [`Error`] with its byte offset, a truncated file a warning: never a panic.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use serde::Deserialize;
use zerocopy::{FromBytes, IntoBytes};

use super::frames::{
    FRAME_AGGREGATES, FRAME_DROPS, FRAME_END, FRAME_ENERGY_DEVICE, FRAME_ENERGY_NOTE, FRAME_ENERGY_SAMPLES,
    FRAME_EVENTS, FRAME_GPU_ACTIVITY, FRAME_NODE, FRAME_PROCESS, FRAME_PROCESS_EXIT, FRAME_RUN_INFO,
    FRAME_STRING, FRAME_SYMBOL, FRAME_THREAD, Frame, MAX_FRAME_BYTES,
};
use super::{FILE_HEADER_BYTES, FILE_MAGIC, FORMAT_MAJOR, padding_for};
use crate::gpu::GpuActivity;
use crate::range::{FRAME_CAPTURE, FRAME_RANGE_EDGE};
use crate::record::{Event, RECORD_BYTES};
use crate::sample::{FRAME_MODULE, FRAME_PYTHON, FRAME_SAMPLES, FRAME_SAMPLING, FRAME_STACK};
use crate::site::{FRAME_EVENT_SITES, FRAME_SITE, decode_event_sites};

/// Why a run file cannot be read (further).
#[derive(Debug)]
pub enum Error {
    /// The input failed to read.
    Io(io::Error),
    /// The input does not start with [`FILE_MAGIC`].
    NotARunFile,
    /// The file's major version is not [`FORMAT_MAJOR`].
    UnsupportedVersion {
        /// The file's major version.
        major: u16,
        /// The file's minor version.
        minor: u16,
    },
    /// The bytes at `offset` cannot be a run file's (a bad frame header, undecodable metadata).
    Corrupt {
        /// Byte offset from the file start of the header or frame found corrupt.
        offset: u64,
        /// What was wrong, for the user.
        what: String,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::NotARunFile => write!(f, "not an mlprof run file (bad magic)"),
            Error::UnsupportedVersion { major, minor } => write!(
                f,
                "run file format {major}.{minor} is newer than this mlprof understands ({FORMAT_MAJOR}.x)"
            ),
            Error::Corrupt { offset, what } => {
                write!(f, "corrupt run file at byte {offset}: {what}")
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

/// Streaming reader; memory stays at one frame (≤ 64 MiB, normally ≤ 4 MiB) whatever the file
/// size.
pub struct RunReader<R: Read = BufReader<File>> {
    input: R,
    offset: u64,
    version: (u16, u16),
    buf: Vec<u8>,
    events: Vec<Event>,
    warnings: Vec<String>,
    truncated: bool,
    ended: bool,
    skipped_frames: u64,
    skip_events: bool,
    /// The number of events of the frame just returned when it was an events frame (the
    /// [`FRAME_EVENT_SITES`] frame that may follow it has one site per event).
    last_events: Option<usize>,
    /// Moves the input forward without reading (where it can seek), and the input's length.
    seek_over: Option<(SeekOver<R>, u64)>,
}

/// Moves an input forward by a number of bytes without reading them.
type SeekOver<R> = fn(&mut R, u64) -> io::Result<()>;

impl RunReader<BufReader<File>> {
    /// Opens `path` and reads its header.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let file = File::open(path)?;
        // Small next to the 1 MiB reads of event records: those go from the file straight into
        // the event buffer (BufReader passes a read its buffer cannot hold through once the
        // buffer is drained), not through the buffer and a second copy.
        RunReader::new(BufReader::with_capacity(64 << 10, file))
    }

    /// Opens `path` for metadata-only reading ([`RunReader::skip_events`]): event frames are
    /// sought over, never read, so a pass costs the metadata frames, not the file's size.
    pub fn open_metadata(path: &Path) -> Result<Self, Error> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        // A small buffer: each seek past an events frame refills it.
        let mut reader = RunReader::new(BufReader::with_capacity(64 << 10, file))?;
        reader.skip_events = true;
        reader.seek_over = Some((|input, n| input.seek_relative(n as i64), len));
        Ok(reader)
    }
}

/// Reads as much of `buf` as the input holds; returns the number of bytes read.
fn read_fully<R: Read>(input: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

impl<R: Read> RunReader<R> {
    /// Reads and checks the file header from `input`; the frames follow with
    /// [`RunReader::next_frame`].
    pub fn new(mut input: R) -> Result<Self, Error> {
        let mut header = [0u8; FILE_HEADER_BYTES as usize];
        let got = read_fully(&mut input, &mut header)?;
        if got < 8 || header[..8] != FILE_MAGIC {
            return Err(Error::NotARunFile);
        }
        if got < header.len() {
            return Err(Error::Corrupt { offset: got as u64, what: "file ends inside its header".into() });
        }
        let major = u16::from_le_bytes([header[8], header[9]]);
        let minor = u16::from_le_bytes([header[10], header[11]]);
        let header_bytes = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
        if major != FORMAT_MAJOR {
            return Err(Error::UnsupportedVersion { major, minor });
        }
        if !(FILE_HEADER_BYTES..=4096).contains(&header_bytes) {
            return Err(Error::Corrupt { offset: 12, what: format!("header size {header_bytes}") });
        }
        // A later minor version may grow the header; skip what we do not know.
        let extra = (header_bytes - FILE_HEADER_BYTES) as usize;
        let mut skip = vec![0u8; extra];
        if read_fully(&mut input, &mut skip)? < extra {
            return Err(Error::Corrupt {
                offset: header_bytes as u64,
                what: "file ends inside its header".into(),
            });
        }
        Ok(RunReader {
            input,
            offset: header_bytes as u64,
            version: (major, minor),
            buf: Vec::new(),
            events: Vec::new(),
            warnings: Vec::new(),
            truncated: false,
            ended: false,
            skipped_frames: 0,
            skip_events: false,
            last_events: None,
            seek_over: None,
        })
    }

    /// Metadata-only reading: event frames are passed over without being decoded (a first
    /// pass that collects processes and strings before the events are streamed).
    pub fn skip_events(&mut self, skip: bool) {
        self.skip_events = skip;
    }

    /// Bytes consumed so far (for progress reports).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The file's (major, minor) format version.
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// Warnings met so far (truncation, trailing data).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The file ended inside a frame: the collector did not finish it.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Whether the end frame was seen.
    pub fn complete(&self) -> bool {
        self.ended
    }

    /// Frames of kinds this reader does not know, skipped.
    pub fn skipped_frames(&self) -> u64 {
        self.skipped_frames
    }

    fn truncate(&mut self, what: &str) -> Result<Option<Frame<'_>>, Error> {
        self.truncated = true;
        self.warnings.push(format!(
            "run file is truncated at byte {} ({what}); reading what was recorded before it",
            self.offset
        ));
        Ok(None)
    }

    /// Skips a frame's payload of `len` bytes (`padded` with its padding), which the caller
    /// does not want (events, for metadata readers): true when skipped, false when the data
    /// ended inside it (the reader is then truncated, with its warning).
    fn skip_payload(&mut self, len: u32, padded: usize) -> Result<bool, Error> {
        if let Some((seek, input_len)) = self.seek_over {
            let end = self.offset + 8 + len as u64;
            if end > input_len {
                self.offset = input_len;
                self.truncate("inside a frame")?;
                return Ok(false);
            }
            seek(&mut self.input, padded as u64)?;
            // The padding of the very last frame may be missing after a kill.
            self.offset = (self.offset + 8 + padded as u64).min(input_len);
            return Ok(true);
        }
        let skipped = io::copy(&mut (&mut self.input).take(padded as u64), &mut io::sink())?;
        self.offset += 8 + skipped;
        if skipped < len as u64 {
            self.truncate("inside a frame")?;
            return Ok(false);
        }
        Ok(true)
    }

    /// The next frame, `Ok(None)` at the end of the data.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, Error> {
        loop {
            if self.truncated {
                return Ok(None);
            }
            let mut head = [0u8; 8];
            let got = read_fully(&mut self.input, &mut head)?;
            if got == 0 {
                if !self.ended {
                    self.truncated = true;
                    self.warnings.push(
                        "run file has no end record (collector killed or still running); \
                         reading what was recorded"
                            .into(),
                    );
                }
                return Ok(None);
            }
            if got < head.len() {
                return self.truncate("inside a frame header");
            }
            let frame_offset = self.offset;
            let kind = u16::from_le_bytes([head[0], head[1]]);
            let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            if kind == 0 || len > MAX_FRAME_BYTES {
                return Err(Error::Corrupt {
                    offset: frame_offset,
                    what: format!("frame header kind {kind} length {len}"),
                });
            }
            let padded = len as usize + padding_for(len);
            let previous_events = self.last_events.take();
            if (kind == FRAME_EVENTS || kind == FRAME_EVENT_SITES) && self.skip_events {
                if self.skip_payload(len, padded)? {
                    continue;
                }
                return Ok(None);
            }
            if kind == FRAME_EVENTS {
                return self.read_events(frame_offset, len);
            }
            // Grow with the data actually read, not with the length the header claims: a
            // corrupt 20-byte file must not cost a 64 MiB allocation (found by fuzz/ runfile).
            self.buf.clear();
            let got = (&mut self.input).take(padded as u64).read_to_end(&mut self.buf)?;
            if got < padded {
                // Padding of the very last frame may be missing after a kill; the payload counts.
                if got < len as usize {
                    self.offset += 8 + got as u64;
                    return self.truncate("inside a frame");
                }
            }
            self.offset += 8 + padded as u64;
            let payload = &self.buf[..len as usize];
            let corrupt = |what: String| Error::Corrupt { offset: frame_offset, what };
            let frame = match kind {
                FRAME_RUN_INFO => Frame::RunInfo(decode(payload).map_err(corrupt)?),
                FRAME_STRING => {
                    if payload.len() < 8 {
                        return Err(corrupt("string frame shorter than its id".into()));
                    }
                    let id = u64::from_le_bytes(payload[..8].try_into().unwrap_or([0; 8]));
                    Frame::String { id, bytes: &self.buf[8..len as usize] }
                }
                FRAME_PROCESS if self.version.1 >= 4 => Frame::Process(decode(payload).map_err(corrupt)?),
                FRAME_PROCESS => {
                    Frame::Process(decode::<super::frames::ProcessInfoV1_3>(payload).map_err(corrupt)?.into())
                }
                FRAME_NODE => Frame::Node(decode(payload).map_err(corrupt)?),
                FRAME_PROCESS_EXIT => Frame::ProcessExit(decode(payload).map_err(corrupt)?),
                FRAME_AGGREGATES => Frame::Aggregates(decode(payload).map_err(corrupt)?),
                FRAME_DROPS if self.version.1 >= 3 => Frame::Drops(decode(payload).map_err(corrupt)?),
                FRAME_DROPS => Frame::Drops(
                    decode::<Vec<super::frames::DropSampleV1_2>>(payload)
                        .map_err(corrupt)?
                        .into_iter()
                        .map(super::frames::DropSample::from)
                        .collect(),
                ),
                FRAME_THREAD => Frame::Thread(decode(payload).map_err(corrupt)?),
                FRAME_SYMBOL => Frame::Symbol(decode(payload).map_err(corrupt)?),
                FRAME_ENERGY_DEVICE => Frame::EnergyDevice(decode(payload).map_err(corrupt)?),
                FRAME_ENERGY_SAMPLES => Frame::EnergySamples(decode(payload).map_err(corrupt)?),
                FRAME_ENERGY_NOTE => Frame::EnergyNote(decode(payload).map_err(corrupt)?),
                FRAME_GPU_ACTIVITY => Frame::GpuActivity(gpu_records(payload).map_err(corrupt)?),
                FRAME_SITE => Frame::Site(decode(payload).map_err(corrupt)?),
                FRAME_MODULE => Frame::Module(decode(payload).map_err(corrupt)?),
                FRAME_STACK => Frame::Stack(decode(payload).map_err(corrupt)?),
                FRAME_SAMPLES => Frame::Samples(decode(payload).map_err(corrupt)?),
                FRAME_SAMPLING => Frame::Sampling(decode(payload).map_err(corrupt)?),
                FRAME_PYTHON => Frame::PythonFrame(decode(payload).map_err(corrupt)?),
                FRAME_CAPTURE => Frame::Capture(decode(payload).map_err(corrupt)?),
                FRAME_RANGE_EDGE => Frame::RangeEdge(decode(payload).map_err(corrupt)?),
                FRAME_EVENT_SITES => {
                    let Some(events) = previous_events else {
                        return Err(corrupt("event sites without the events frame they belong to".into()));
                    };
                    Frame::EventSites(decode_event_sites(payload, events).map_err(corrupt)?)
                }
                FRAME_END => {
                    self.ended = true;
                    Frame::End(decode(payload).map_err(corrupt)?)
                }
                _ => {
                    self.skipped_frames += 1;
                    continue;
                }
            };
            return Ok(Some(frame));
        }
    }
}

impl<R: Read> RunReader<R> {
    /// The records of the events frame just returned, as an owned buffer, without copying
    /// them: `replacement` (any buffer, typically one given back by an earlier call) becomes
    /// the reader's. For a caller that keeps batches for a while (reading ahead).
    /// Its records need not be cleared: the next frame overwrites them.
    pub fn take_events(&mut self, replacement: Vec<Event>) -> Vec<Event> {
        std::mem::replace(&mut self.events, replacement)
    }

    /// An events frame, read straight into the aligned event buffer (one copy), growing with
    /// the data actually read so a corrupt length cannot cost a large allocation.
    fn read_events(&mut self, frame_offset: u64, len: u32) -> Result<Option<Frame<'_>>, Error> {
        let len = len as usize;
        if !len.is_multiple_of(RECORD_BYTES) {
            return Err(Error::Corrupt {
                offset: frame_offset,
                what: format!("events frame of {len} bytes"),
            });
        }
        // The buffer keeps the length of the frame it last held (see `take_events`): records
        // already there are overwritten, not zeroed first; it grows by at most 1 MiB at a
        // time, ahead of what is read.
        let (mut filled, mut remaining) = (0, len);
        while remaining > 0 {
            let take = remaining.min(1 << 20);
            let upto = filled + take / RECORD_BYTES;
            if self.events.len() < upto {
                self.events.resize(upto, Event::default());
            }
            let got = read_fully(&mut self.input, self.events[filled..upto].as_mut_bytes())?;
            if got < take {
                self.offset += 8 + (len - remaining + got) as u64;
                self.events.clear();
                return self.truncate("inside a frame");
            }
            filled = upto;
            remaining -= take;
        }
        self.events.truncate(filled);
        // A multiple of 64 bytes needs no padding.
        self.offset += 8 + len as u64;
        self.last_events = Some(self.events.len());
        Ok(Some(Frame::Events(&self.events)))
    }
}

/// A frame of a run file held in memory: an events frame as a slice of that memory.
#[derive(Debug)]
pub enum InPlace<'r, 'a> {
    /// The records of an events frame, where they lie in the input (not copied).
    Events(&'a [Event]),
    /// Any other frame (and an events frame that could not be viewed in place).
    Frame(Frame<'r>),
}

impl<'a> RunReader<&'a [u8]> {
    /// [`RunReader::next_frame`] for a run file in memory (mapped, typically): an events
    /// frame's records are returned as a slice of the input itself, which outlives the reader's
    /// borrow, instead of copied into the reader's buffer. Frames that cannot be viewed there
    /// (a records frame not 8-byte aligned in memory, one cut short, a corrupt length) go
    /// through [`RunReader::next_frame`], with its checks and warnings.
    pub fn next_frame_in_place(&mut self) -> Result<Option<InPlace<'_, 'a>>, Error> {
        let input: &'a [u8] = self.input;
        if !self.truncated
            && !self.skip_events
            && let Some(head) = input.first_chunk::<8>()
            && u16::from_le_bytes([head[0], head[1]]) == FRAME_EVENTS
        {
            let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            let payload = input
                .get(8..8 + len as usize)
                .filter(|_| len <= MAX_FRAME_BYTES && (len as usize).is_multiple_of(RECORD_BYTES));
            if let Some(Ok(events)) = payload.map(<[Event]>::ref_from_bytes) {
                // A multiple of 64 bytes needs no padding.
                self.input = &input[8 + len as usize..];
                self.offset += 8 + len as u64;
                self.last_events = Some(events.len());
                return Ok(Some(InPlace::Events(events)));
            }
        }
        Ok(self.next_frame()?.map(InPlace::Frame))
    }
}

/// The records of a [`FRAME_GPU_ACTIVITY`], copied out (the payload need not be aligned).
fn gpu_records(payload: &[u8]) -> Result<Vec<GpuActivity>, String> {
    if !payload.len().is_multiple_of(RECORD_BYTES) {
        return Err(format!("GPU activity frame of {} bytes", payload.len()));
    }
    Ok(payload
        .chunks_exact(RECORD_BYTES)
        .filter_map(|bytes| GpuActivity::read_from_bytes(bytes).ok())
        .collect())
}

fn decode<'de, T: Deserialize<'de>>(payload: &'de [u8]) -> Result<T, String> {
    postcard::from_bytes(payload).map_err(|e| format!("undecodable metadata: {e}"))
}
