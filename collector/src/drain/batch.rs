//! The batch: the events a pass gathers for its next frame, written in end-time order, and
//! the events held aside until the path they name is defined.

use std::io;

use mlprof_format::gpu::GpuActivity;
use mlprof_format::record::Event;

use super::{DrainedRing, Drainer};

/// The events of the next frame, those waiting for their path, and the GPU activities of the
/// next GPU frame (CUPTI delivers them in its own order, late: they are not sorted in).
pub(super) struct Batch {
    pub(super) events: Vec<Event>,
    pub(super) waiting_for_path: Vec<Event>,
    pub(super) gpu: Vec<GpuActivity>,
}

impl Batch {
    pub(super) fn new() -> Batch {
        Batch { events: Vec::with_capacity(1 << 16), waiting_for_path: Vec::new(), gpu: Vec::new() }
    }
}

impl<R: DrainedRing> Drainer<R> {
    /// Writes the process records whose command line is known, then the pass's events in
    /// end-time order and any held events whose path is now known.
    pub(super) fn write_batch(&mut self) -> io::Result<()> {
        self.metadata.write_processes(&mut self.writer, false)?;
        self.release_waiting();
        self.write_events()
    }

    /// Writes the batch's events in end-time order, as one frame, and its GPU activities, and
    /// empties it.
    pub(super) fn write_events(&mut self) -> io::Result<()> {
        if !self.batch.gpu.is_empty() {
            self.writer.write_gpu_activity(&self.batch.gpu)?;
            self.totals.gpu_activities += self.batch.gpu.len() as u64;
            self.batch.gpu.clear();
        }
        let events = &mut self.batch.events;
        if events.is_empty() {
            return Ok(());
        }
        events.sort_by_key(|e| e.start.saturating_add(e.dur));
        self.writer.write_events(events)?;
        self.totals.events += events.len() as u64;
        events.clear();
        Ok(())
    }

    /// Moves the events held aside for their path into the batch, those whose path is known,
    /// in place (this runs every round of a pass; a partition into two new vectors allocated
    /// each time while anything waited).
    pub(super) fn release_waiting(&mut self) {
        let strings = &self.metadata.strings;
        let Batch { events, waiting_for_path, .. } = &mut self.batch;
        events.extend(waiting_for_path.extract_if(.., |e| strings.is_known(e.arg2)));
    }
}
