//! `run.bin`: a file header followed by length-framed records.
//!
//! ```text
//! file   = header frame*
//! header = magic "MLPROFRB" | major u16 | minor u16 | header_bytes u32 (= 16)      (little endian)
//! frame  = kind u16 | flags u16 | len u32 | payload[len] | zero padding to a multiple of 8
//! ```
//!
//! Bulk events are [`FRAME_EVENTS`] frames holding `len / 64` raw [`Event`] records (times in
//! CLOCK_MONOTONIC ns); metadata frames are postcard-encoded structs whose fields are only ever
//! appended. Readers skip frame kinds they do not know, stop with a warning at a truncated
//! final frame (a collector killed mid-run), and return an error — never panic — on corrupt
//! input. A cleanly finalized file ends with a [`FRAME_END`] frame.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use zerocopy::IntoBytes;

use crate::energy::{EnergyDevice, EnergyNote, EnergySample};
use crate::record::{Event, RECORD_BYTES};

pub const FILE_MAGIC: [u8; 8] = *b"MLPROFRB";
/// Incompatible changes; readers refuse a newer major.
pub const FORMAT_MAJOR: u16 = 1;
/// Compatible additions (new frame kinds, appended fields).
/// 1.2: energy frames (kinds 10..=12).
pub const FORMAT_MINOR: u16 = 2;
const FILE_HEADER_BYTES: u32 = 16;

/// Frame kinds. Only ever added.
pub const FRAME_RUN_INFO: u16 = 1;
pub const FRAME_STRING: u16 = 2;
pub const FRAME_PROCESS: u16 = 3;
pub const FRAME_PROCESS_EXIT: u16 = 4;
pub const FRAME_EVENTS: u16 = 5;
pub const FRAME_AGGREGATES: u16 = 6;
pub const FRAME_DROPS: u16 = 7;
pub const FRAME_THREAD: u16 = 8;
pub const FRAME_END: u16 = 9;
// 10..=19: energy and device samples (see [`crate::energy`]): one device, a batch of samples, a note.
pub const FRAME_ENERGY_DEVICE: u16 = 10;
pub const FRAME_ENERGY_SAMPLES: u16 = 11;
pub const FRAME_ENERGY_NOTE: u16 = 12;
/// Name of a GPU function handle (kernel) in one process.
pub const FRAME_SYMBOL: u16 = 20;

/// Largest frame a reader accepts; anything larger is corruption, not data.
pub const MAX_FRAME_BYTES: u32 = 64 << 20;

/// Run-wide facts, the first frame of every file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub mlprof_version: String,
    pub host: String,
    pub session: String,
    /// The launched command; empty in attach mode.
    pub command: Vec<String>,
    /// CLOCK_MONOTONIC ns when the collector started; all times in the file use this clock.
    pub start_mono_ns: u64,
    /// CLOCK_REALTIME ns read right next to `start_mono_ns` (the wall-clock anchor).
    pub start_realtime_ns: u64,
    /// Clock the producers stamped with (`tsc` or `clock_monotonic`); converted on the way in.
    pub clock_source: String,
    pub ring_abi_version: u32,
    pub lane_count: u32,
    pub lane_capacity: u32,
}

/// One process image (a new process, or a new program after exec in the same pid).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub ppid: u32,
    pub argv: Vec<String>,
    pub start_ns: u64,
    /// A fork child: it starts with its parent's open files.
    pub forked: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessExit {
    pub pid: u32,
    pub time_ns: u64,
    /// Exit code when known (exit/_exit seen, or waited for by the launcher).
    pub exit_code: Option<i32>,
    /// Terminating signal when the launcher saw one.
    pub signal: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadInfo {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
}

/// Cumulative counters of an aggregated call on one thread, as of `time_ns`. Each `stream`
/// (one claim of a ring lane by one thread) reports running totals; the last sample of a
/// stream is its final value, and a thread's total is the sum over its streams.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AggregateSample {
    pub stream: u64,
    pub pid: u32,
    pub tid: u32,
    pub func: u16,
    /// The clock id for clock_gettime; `None` for gettimeofday or an unlisted clock.
    pub clock_id: Option<i32>,
    pub time_ns: u64,
    pub count: u64,
    /// Calls whose duration was measured, and the sum of those durations.
    pub timed: u64,
    pub timed_ns: u64,
}

/// Cumulative drop counters, as of `time_ns`: per stream, plus `stream == 0` for records that
/// found no free lane. Last value per stream wins; the run total is the sum.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DropSample {
    pub stream: u64,
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    pub dropped: u64,
}

/// The name of a GPU function handle (a kernel) in process `pid`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SymbolInfo {
    pub pid: u32,
    pub handle: u64,
    /// String id of the name (mangled as the library reports it; tools demangle).
    pub name: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    pub end_ns: u64,
    pub events: u64,
    pub dropped: u64,
}

#[derive(Debug)]
pub enum Error {
    Io(io::Error),
    NotARunFile,
    UnsupportedVersion { major: u16, minor: u16 },
    Corrupt { offset: u64, what: String },
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

/// Streaming writer. Frames are buffered; [`RunWriter::flush`] makes them durable enough that a
/// collector killed later leaves a readable (truncated) file.
pub struct RunWriter<W: Write = BufWriter<File>> {
    out: W,
    bytes: u64,
    scratch: Vec<u8>,
}

impl RunWriter<BufWriter<File>> {
    /// Creates (or truncates) `path`; a new file is private to the user (0600): it names the
    /// user's files and command lines.
    pub fn create(path: &Path, info: &RunInfo) -> io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
        RunWriter::new(BufWriter::with_capacity(1 << 20, file), info)
    }
}

impl<W: Write> RunWriter<W> {
    pub fn new(mut out: W, info: &RunInfo) -> io::Result<Self> {
        out.write_all(&FILE_MAGIC)?;
        out.write_all(&FORMAT_MAJOR.to_le_bytes())?;
        out.write_all(&FORMAT_MINOR.to_le_bytes())?;
        out.write_all(&FILE_HEADER_BYTES.to_le_bytes())?;
        let mut writer = RunWriter { out, bytes: FILE_HEADER_BYTES as u64, scratch: Vec::new() };
        writer.write_meta(FRAME_RUN_INFO, info)?;
        Ok(writer)
    }

    /// Bytes written so far, including buffered ones.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    pub fn write_frame(&mut self, kind: u16, payload: &[u8]) -> io::Result<()> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l <= MAX_FRAME_BYTES)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
        self.out.write_all(&kind.to_le_bytes())?;
        self.out.write_all(&0u16.to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(payload)?;
        let padding = padding_for(len);
        self.out.write_all(&[0u8; 8][..padding])?;
        self.bytes += 8 + len as u64 + padding as u64;
        Ok(())
    }

    fn write_meta<T: Serialize>(&mut self, kind: u16, value: &T) -> io::Result<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let encoded = postcard::to_extend(value, scratch)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        let result = self.write_frame(kind, &encoded);
        self.scratch = encoded;
        result
    }

    pub fn write_string(&mut self, id: u64, bytes: &[u8]) -> io::Result<()> {
        let mut payload = Vec::with_capacity(8 + bytes.len());
        payload.extend_from_slice(&id.to_le_bytes());
        payload.extend_from_slice(bytes);
        self.write_frame(FRAME_STRING, &payload)
    }

    pub fn write_process(&mut self, info: &ProcessInfo) -> io::Result<()> {
        self.write_meta(FRAME_PROCESS, info)
    }

    pub fn write_process_exit(&mut self, exit: &ProcessExit) -> io::Result<()> {
        self.write_meta(FRAME_PROCESS_EXIT, exit)
    }

    pub fn write_symbol(&mut self, symbol: &SymbolInfo) -> io::Result<()> {
        self.write_meta(FRAME_SYMBOL, symbol)
    }

    pub fn write_thread(&mut self, thread: &ThreadInfo) -> io::Result<()> {
        self.write_meta(FRAME_THREAD, thread)
    }

    /// Writes events in frames of at most 64 Ki records.
    pub fn write_events(&mut self, events: &[Event]) -> io::Result<()> {
        for chunk in events.chunks(65536) {
            self.write_frame(FRAME_EVENTS, chunk.as_bytes())?;
        }
        Ok(())
    }

    pub fn write_aggregates(&mut self, samples: &[AggregateSample]) -> io::Result<()> {
        self.write_meta(FRAME_AGGREGATES, &samples)
    }

    pub fn write_drops(&mut self, samples: &[DropSample]) -> io::Result<()> {
        self.write_meta(FRAME_DROPS, &samples)
    }

    pub fn write_energy_device(&mut self, device: &EnergyDevice) -> io::Result<()> {
        self.write_meta(FRAME_ENERGY_DEVICE, device)
    }

    pub fn write_energy_samples(&mut self, samples: &[EnergySample]) -> io::Result<()> {
        self.write_meta(FRAME_ENERGY_SAMPLES, &samples)
    }

    pub fn write_energy_note(&mut self, note: &EnergyNote) -> io::Result<()> {
        self.write_meta(FRAME_ENERGY_NOTE, note)
    }

    /// Writes the end frame and flushes; the file is then complete.
    pub fn finish(mut self, end: &RunEnd) -> io::Result<W> {
        self.write_meta(FRAME_END, end)?;
        self.out.flush()?;
        Ok(self.out)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

fn padding_for(len: u32) -> usize {
    (8 - (len as usize % 8)) % 8
}

/// One decoded frame.
#[derive(Debug)]
pub enum Frame<'a> {
    RunInfo(RunInfo),
    String {
        id: u64,
        bytes: &'a [u8],
    },
    Process(ProcessInfo),
    ProcessExit(ProcessExit),
    /// Borrowed from the reader's buffer until the next call.
    Events(&'a [Event]),
    Aggregates(Vec<AggregateSample>),
    Drops(Vec<DropSample>),
    Thread(ThreadInfo),
    Symbol(SymbolInfo),
    End(RunEnd),
    EnergyDevice(EnergyDevice),
    EnergySamples(Vec<EnergySample>),
    EnergyNote(EnergyNote),
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
}

impl RunReader<BufReader<File>> {
    pub fn open(path: &Path) -> Result<Self, Error> {
        let file = File::open(path)?;
        RunReader::new(BufReader::with_capacity(1 << 20, file))
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
            if kind == FRAME_EVENTS && self.skip_events {
                let skipped = io::copy(&mut (&mut self.input).take(padded as u64), &mut io::sink())?;
                if skipped < len as u64 {
                    self.offset += 8 + skipped;
                    return self.truncate("inside a frame");
                }
                self.offset += 8 + skipped;
                continue;
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
                FRAME_PROCESS => Frame::Process(decode(payload).map_err(corrupt)?),
                FRAME_PROCESS_EXIT => Frame::ProcessExit(decode(payload).map_err(corrupt)?),
                FRAME_AGGREGATES => Frame::Aggregates(decode(payload).map_err(corrupt)?),
                FRAME_DROPS => Frame::Drops(decode(payload).map_err(corrupt)?),
                FRAME_THREAD => Frame::Thread(decode(payload).map_err(corrupt)?),
                FRAME_SYMBOL => Frame::Symbol(decode(payload).map_err(corrupt)?),
                FRAME_ENERGY_DEVICE => Frame::EnergyDevice(decode(payload).map_err(corrupt)?),
                FRAME_ENERGY_SAMPLES => Frame::EnergySamples(decode(payload).map_err(corrupt)?),
                FRAME_ENERGY_NOTE => Frame::EnergyNote(decode(payload).map_err(corrupt)?),
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
        self.events.clear();
        let mut remaining = len;
        while remaining > 0 {
            let take = remaining.min(1 << 20);
            let old = self.events.len();
            self.events.resize(old + take / RECORD_BYTES, Event::default());
            let got = read_fully(&mut self.input, self.events[old..].as_mut_bytes())?;
            if got < take {
                self.offset += 8 + (len - remaining + got) as u64;
                return self.truncate("inside a frame");
            }
            remaining -= take;
        }
        // A multiple of 64 bytes needs no padding.
        self.offset += 8 + len as u64;
        Ok(Some(Frame::Events(&self.events)))
    }
}

fn decode<'de, T: Deserialize<'de>>(payload: &'de [u8]) -> Result<T, String> {
    postcard::from_bytes(payload).map_err(|e| format!("undecodable metadata: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_file() -> Vec<u8> {
        let info = RunInfo { host: "h".into(), session: "s".into(), ..Default::default() };
        let mut w = RunWriter::new(Vec::new(), &info).unwrap();
        w.write_string(42, b"/tmp/x").unwrap();
        w.write_process(&ProcessInfo { pid: 10, ppid: 1, argv: vec!["a".into()], ..Default::default() })
            .unwrap();
        let events: Vec<Event> =
            (0..100).map(|i| Event { kind: 20, pid: 10, tid: 10, arg: i, ..Default::default() }).collect();
        w.write_events(&events).unwrap();
        w.finish(&RunEnd { end_ns: 5, events: 100, dropped: 0 }).unwrap()
    }

    fn read_all(bytes: &[u8]) -> Result<(usize, bool, bool, u64), Error> {
        let mut r = RunReader::new(bytes)?;
        let mut events = 0;
        while let Some(frame) = r.next_frame()? {
            if let Frame::Events(e) = frame {
                events += e.len();
            }
        }
        Ok((events, r.truncated(), r.complete(), r.skipped_frames()))
    }

    #[test]
    fn round_trip() {
        let bytes = sample_file();
        let mut r = RunReader::new(&bytes[..]).unwrap();
        let mut saw = Vec::new();
        while let Some(frame) = r.next_frame().unwrap() {
            match frame {
                Frame::RunInfo(i) => saw.push(format!("info {}", i.host)),
                Frame::String { id, bytes } => {
                    saw.push(format!("str {id} {}", String::from_utf8_lossy(bytes)))
                }
                Frame::Process(p) => saw.push(format!("proc {}", p.pid)),
                Frame::Events(e) => saw.push(format!("events {} last {}", e.len(), e[e.len() - 1].arg)),
                Frame::End(e) => saw.push(format!("end {}", e.events)),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(saw, ["info h", "str 42 /tmp/x", "proc 10", "events 100 last 99", "end 100"]);
        assert!(r.complete() && !r.truncated());
    }

    #[test]
    fn truncation_at_every_byte_reads_a_prefix_without_error() {
        let bytes = sample_file();
        let mut last = 0;
        for cut in 16..bytes.len() {
            let (events, truncated, complete, _) = read_all(&bytes[..cut]).unwrap();
            // Only a cut inside the end frame's padding still reads as complete.
            assert!(truncated != complete, "cut {cut}");
            assert!(!complete || cut > bytes.len() - 8, "cut {cut}");
            assert!(events == 0 || events == 100);
            assert!(events >= last);
            last = events;
        }
        assert_eq!(read_all(&bytes).unwrap(), (100, false, true, 0));
    }

    #[test]
    fn unknown_frames_are_skipped() {
        let info = RunInfo::default();
        let mut w = RunWriter::new(Vec::new(), &info).unwrap();
        w.write_frame(999, b"future stuff").unwrap();
        w.write_events(&[Event { kind: 20, ..Default::default() }]).unwrap();
        let bytes = w.finish(&RunEnd::default()).unwrap();
        assert_eq!(read_all(&bytes).unwrap(), (1, false, true, 1));
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        assert!(matches!(RunReader::new(&b"hello world, not a run"[..]), Err(Error::NotARunFile)));
        let mut bytes = sample_file();
        // Newer major version.
        bytes[8] = 9;
        assert!(matches!(RunReader::new(&bytes[..]), Err(Error::UnsupportedVersion { .. })));
        // An absurd frame length.
        let mut bytes = sample_file();
        bytes[16 + 4..16 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(read_all(&bytes), Err(Error::Corrupt { .. })));
        // Garbage metadata.
        let mut bytes = sample_file();
        for b in &mut bytes[24..40] {
            *b = 0xff;
        }
        assert!(read_all(&bytes).is_err());
        // Random corruption anywhere: errors or a readable prefix, never a panic.
        let clean = sample_file();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut bytes = clean.clone();
            for _ in 0..4 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed as usize) % bytes.len();
                bytes[at] = (seed >> 32) as u8;
            }
            let _ = read_all(&bytes);
        }
    }
}
