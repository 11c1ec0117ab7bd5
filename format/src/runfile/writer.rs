//! [`RunWriter`]: the collector's side of `run.bin`. Frames are appended as the run goes; a
//! flushed prefix is always a readable (truncated) file.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde::Serialize;
use zerocopy::IntoBytes;

use super::frames::{
    AggregateSample, DropSample, FRAME_AGGREGATES, FRAME_DROPS, FRAME_END, FRAME_ENERGY_DEVICE,
    FRAME_ENERGY_NOTE, FRAME_ENERGY_SAMPLES, FRAME_EVENTS, FRAME_GPU_ACTIVITY, FRAME_NODE, FRAME_PROCESS,
    FRAME_PROCESS_EXIT, FRAME_RUN_INFO, FRAME_STRING, FRAME_SYMBOL, FRAME_THREAD, MAX_FRAME_BYTES, NodeInfo,
    ProcessExit, ProcessInfo, RunEnd, RunInfo, SymbolInfo, ThreadInfo,
};
use super::{FILE_HEADER_BYTES, FILE_MAGIC, FORMAT_MAJOR, FORMAT_MINOR, padding_for};
use crate::energy::{EnergyDevice, EnergyNote, EnergySample};
use crate::gpu::GpuActivity;
use crate::record::Event;

/// Streaming writer. Frames are buffered; [`RunWriter::flush`] makes them durable enough that a
/// collector killed later leaves a readable (truncated) file.
pub struct RunWriter<W: Write = BufWriter<File>> {
    out: W,
    bytes: u64,
    scratch: Vec<u8>,
}

/// Creates (or truncates) `path` for a run file; a new file is private to the user (0600): a
/// run names the user's files and command lines. For a writer other than
/// [`RunWriter::create`]'s (one that writes the file on a thread of its own).
pub fn create_run_file(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)
}

impl RunWriter<BufWriter<File>> {
    /// Creates (or truncates) `path` ([`create_run_file`]) and writes its header.
    pub fn create(path: &Path, info: &RunInfo) -> io::Result<Self> {
        RunWriter::new(BufWriter::with_capacity(1 << 20, create_run_file(path)?), info)
    }
}

impl<W: Write> RunWriter<W> {
    /// Writes the file header and the [`RunInfo`] frame to `out`.
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

    /// The output, for calls of its own between frames (the collector's
    /// `BackgroundFile::write_small_now`); bytes written through it are not frames.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Writes one frame of kind `kind` around `payload` (at most [`MAX_FRAME_BYTES`], else
    /// `InvalidInput` and nothing is written), padded to a multiple of 8 bytes.
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

    /// Writes the string `id` (a [`FRAME_STRING`]); the caller writes each id once.
    pub fn write_string(&mut self, id: u64, bytes: &[u8]) -> io::Result<()> {
        let mut payload = Vec::with_capacity(8 + bytes.len());
        payload.extend_from_slice(&id.to_le_bytes());
        payload.extend_from_slice(bytes);
        self.write_frame(FRAME_STRING, &payload)
    }

    /// Writes a [`FRAME_PROCESS`].
    pub fn write_process(&mut self, info: &ProcessInfo) -> io::Result<()> {
        self.write_meta(FRAME_PROCESS, info)
    }

    /// Writes a [`FRAME_PROCESS_EXIT`].
    pub fn write_process_exit(&mut self, exit: &ProcessExit) -> io::Result<()> {
        self.write_meta(FRAME_PROCESS_EXIT, exit)
    }

    /// Writes a [`FRAME_SYMBOL`].
    pub fn write_symbol(&mut self, symbol: &SymbolInfo) -> io::Result<()> {
        self.write_meta(FRAME_SYMBOL, symbol)
    }

    /// Writes a [`crate::site::FRAME_SITE`].
    pub fn write_site(&mut self, site: &crate::site::SiteInfo) -> io::Result<()> {
        self.write_meta(crate::site::FRAME_SITE, site)
    }

    /// Writes a [`crate::sample::FRAME_MODULE`].
    pub fn write_module(&mut self, module: &crate::sample::ModuleInfo) -> io::Result<()> {
        self.write_meta(crate::sample::FRAME_MODULE, module)
    }

    /// Writes a [`crate::sample::FRAME_PYTHON`].
    pub fn write_python_frame(&mut self, frame: &crate::sample::PythonFrameInfo) -> io::Result<()> {
        self.write_meta(crate::sample::FRAME_PYTHON, frame)
    }

    /// Writes a [`crate::sample::FRAME_STACK`].
    pub fn write_stack(&mut self, stack: &crate::sample::StackInfo) -> io::Result<()> {
        self.write_meta(crate::sample::FRAME_STACK, stack)
    }

    /// Writes `samples` in [`crate::sample::FRAME_SAMPLES`] frames of at most 64 Ki samples.
    pub fn write_samples(&mut self, samples: &[crate::sample::CpuSample]) -> io::Result<()> {
        for chunk in samples.chunks(65536) {
            self.write_meta(crate::sample::FRAME_SAMPLES, &chunk)?;
        }
        Ok(())
    }

    /// Writes a [`crate::sample::FRAME_SAMPLING`].
    pub fn write_sampling(&mut self, info: &crate::sample::SamplingInfo) -> io::Result<()> {
        self.write_meta(crate::sample::FRAME_SAMPLING, info)
    }

    /// Writes a [`crate::range::FRAME_CAPTURE`].
    pub fn write_capture(&mut self, info: &crate::range::CaptureInfo) -> io::Result<()> {
        self.write_meta(crate::range::FRAME_CAPTURE, info)
    }

    /// Writes a [`crate::range::FRAME_RANGE_EDGE`].
    pub fn write_range_edge(&mut self, edge: &crate::range::RangeEdge) -> io::Result<()> {
        self.write_meta(crate::range::FRAME_RANGE_EDGE, edge)
    }

    /// Writes a [`FRAME_NODE`] (merged runs).
    pub fn write_node(&mut self, node: &NodeInfo) -> io::Result<()> {
        self.write_meta(FRAME_NODE, node)
    }

    /// Writes a [`FRAME_THREAD`].
    pub fn write_thread(&mut self, thread: &ThreadInfo) -> io::Result<()> {
        self.write_meta(FRAME_THREAD, thread)
    }

    /// Writes events (times already in CLOCK_MONOTONIC ns) in frames of at most 64 Ki records.
    pub fn write_events(&mut self, events: &[Event]) -> io::Result<()> {
        self.write_events_with_sites(events, &[])
    }

    /// [`RunWriter::write_events`], each frame followed by a
    /// [`crate::site::FRAME_EVENT_SITES`] frame of its events' sites (`sites[i]` is event
    /// `i`'s; 0: none) when one of them has a site. `sites` is empty, or as long as `events`.
    pub fn write_events_with_sites(&mut self, events: &[Event], sites: &[u32]) -> io::Result<()> {
        let sites = if sites.len() == events.len() { sites } else { &[] };
        for (at, chunk) in events.chunks(65536).enumerate() {
            self.write_frame(FRAME_EVENTS, chunk.as_bytes())?;
            let chunk_sites =
                sites.get(at * 65536..).map_or(&[][..], |rest| &rest[..chunk.len().min(rest.len())]);
            if chunk_sites.iter().any(|&site| site != 0) {
                self.write_frame(
                    crate::site::FRAME_EVENT_SITES,
                    &crate::site::encode_event_sites(chunk_sites),
                )?;
            }
        }
        Ok(())
    }

    /// Writes GPU activity records (times already in CLOCK_MONOTONIC ns) in frames of at most
    /// 64 Ki records.
    pub fn write_gpu_activity(&mut self, records: &[GpuActivity]) -> io::Result<()> {
        for chunk in records.chunks(65536) {
            self.write_frame(FRAME_GPU_ACTIVITY, chunk.as_bytes())?;
        }
        Ok(())
    }

    /// Writes one [`FRAME_AGGREGATES`] with `samples`.
    pub fn write_aggregates(&mut self, samples: &[AggregateSample]) -> io::Result<()> {
        self.write_meta(FRAME_AGGREGATES, &samples)
    }

    /// Writes one [`FRAME_DROPS`] with `samples`.
    pub fn write_drops(&mut self, samples: &[DropSample]) -> io::Result<()> {
        self.write_meta(FRAME_DROPS, &samples)
    }

    /// Writes a [`FRAME_ENERGY_DEVICE`]; before the device's first sample.
    pub fn write_energy_device(&mut self, device: &EnergyDevice) -> io::Result<()> {
        self.write_meta(FRAME_ENERGY_DEVICE, device)
    }

    /// Writes one [`FRAME_ENERGY_SAMPLES`] with `samples`.
    pub fn write_energy_samples(&mut self, samples: &[EnergySample]) -> io::Result<()> {
        self.write_meta(FRAME_ENERGY_SAMPLES, &samples)
    }

    /// Writes a [`FRAME_ENERGY_NOTE`].
    pub fn write_energy_note(&mut self, note: &EnergyNote) -> io::Result<()> {
        self.write_meta(FRAME_ENERGY_NOTE, note)
    }

    /// Writes the end frame and flushes; the file is then complete.
    pub fn finish(mut self, end: &RunEnd) -> io::Result<W> {
        self.write_meta(FRAME_END, end)?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// Flushes buffered frames to the underlying writer (the file), so a collector killed
    /// later leaves them readable.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
