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
    /// The run-wide site of each event (`--sites`): empty while none of the batch has one, else
    /// as long as `events` (see [`Batch::push`]).
    pub(super) sites: Vec<u32>,
    /// Events held aside for their path, with their sites (0: none).
    pub(super) waiting_for_path: Vec<(Event, u32)>,
    pub(super) gpu: Vec<GpuActivity>,
}

impl Batch {
    pub(super) fn new() -> Batch {
        Batch {
            events: Vec::with_capacity(1 << 16),
            sites: Vec::new(),
            waiting_for_path: Vec::new(),
            gpu: Vec::new(),
        }
    }

    /// Adds an event made at `site` (0: none); `sites` is filled in only once some event has one.
    #[inline]
    pub(super) fn push(&mut self, event: Event, site: u32) {
        if site != 0 && self.sites.len() < self.events.len() {
            self.sites.resize(self.events.len(), 0);
        }
        self.events.push(event);
        if !self.sites.is_empty() || site != 0 {
            self.sites.push(site);
        }
    }

    /// Moves every held event into the batch (the run's end: their paths will never come).
    pub(super) fn release_all(&mut self) {
        for (event, site) in std::mem::take(&mut self.waiting_for_path) {
            self.push(event, site);
        }
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
        let Batch { events, sites, .. } = &mut self.batch;
        if events.is_empty() {
            return Ok(());
        }
        if sites.is_empty() {
            events.sort_by_key(|e| e.start.saturating_add(e.dur));
            self.writer.write_events(events)?;
        } else {
            sites.resize(events.len(), 0);
            let mut order: Vec<u32> = (0..events.len() as u32).collect();
            order.sort_by_key(|&i| events[i as usize].start.saturating_add(events[i as usize].dur));
            let sorted: Vec<Event> = order.iter().map(|&i| events[i as usize]).collect();
            let sorted_sites: Vec<u32> = order.iter().map(|&i| sites[i as usize]).collect();
            self.writer.write_events_with_sites(&sorted, &sorted_sites)?;
            sites.clear();
        }
        self.totals.events += events.len() as u64;
        events.clear();
        Ok(())
    }

    /// Moves the events held aside for their path into the batch, those whose path is known
    /// (this runs every round of a pass: nothing is allocated while nothing waits).
    pub(super) fn release_waiting(&mut self) {
        if self.batch.waiting_for_path.is_empty() {
            return;
        }
        let strings = &self.metadata.strings;
        let known: Vec<(Event, u32)> =
            self.batch.waiting_for_path.extract_if(.., |(e, _)| strings.is_known(e.arg2)).collect();
        for (event, site) in known {
            self.batch.push(event, site);
        }
    }
}
