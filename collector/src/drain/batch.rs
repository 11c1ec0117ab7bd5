//! The batch: the events a pass gathers for its next frame, written in end-time order, and
//! the events held aside until the path they name, or their call site, is defined.

use std::io;

use mlprof_format::func::Func;
use mlprof_format::gpu::GpuActivity;
use mlprof_format::record::Event;

use super::metadata::Metadata;
use super::{DrainedRing, Drainer};

/// An event's call site (`--sites`) as the drain knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Site {
    /// Its run-wide id (0: none).
    Id(u32),
    /// The number its process image (the nonce) gave it, which stands for a run-wide id once
    /// defined: the thread that met the site first defined it on its own lane, which the
    /// drain may not have reached that far.
    Number { number: u32, image: u64 },
}

/// An event that waits aside for a definition, and its site.
pub(super) type Waiting = (Event, Site);

/// Whether what `event` names is defined: its path (a string) and its site. Its run-wide
/// site then.
pub(super) fn defined(metadata: &Metadata, event: &Event, site: Site) -> Option<u32> {
    let needs_path = event.arg2 != 0 && Func::kind_has_path(event.kind);
    if needs_path && !metadata.strings.is_known(event.arg2) {
        return None;
    }
    match site {
        Site::Id(id) => Some(id),
        Site::Number { number, image } => metadata.sites.lookup((event.pid, image), number),
    }
}

/// The events of the next frame, those waiting for their path, and the GPU activities of the
/// next GPU frame (CUPTI delivers them in its own order, late: they are not sorted in).
pub(super) struct Batch {
    pub(super) events: Vec<Event>,
    /// The run-wide site of each event (`--sites`): empty while none of the batch has one, else
    /// as long as `events` (see [`Batch::push`]).
    pub(super) sites: Vec<u32>,
    /// Events held aside for their path or site, in lane order.
    pub(super) waiting: Vec<Waiting>,
    pub(super) gpu: Vec<GpuActivity>,
}

impl Batch {
    pub(super) fn new() -> Batch {
        Batch { events: Vec::with_capacity(1 << 16), sites: Vec::new(), waiting: Vec::new(), gpu: Vec::new() }
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

    /// Moves every held event into the batch (the run's end: their paths and sites will never
    /// come; a site never defined is counted in [`super::sites::Sites::undefined`]).
    pub(super) fn release_all(&mut self, metadata: &mut Metadata) {
        for (event, site) in std::mem::take(&mut self.waiting) {
            let id = match site {
                Site::Id(id) => id,
                Site::Number { number, image } => metadata.sites.id((event.pid, image), number),
            };
            self.push(event, id);
        }
    }
}

impl<R: DrainedRing> Drainer<R> {
    /// Writes the process records whose command line is known, then the pass's events in
    /// end-time order and any held events whose path and site are now known.
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

    /// Moves the events held aside into the batch, those whose path and site are defined now
    /// (this runs every round of a pass: nothing is allocated while nothing waits).
    pub(super) fn release_waiting(&mut self) {
        if self.batch.waiting.is_empty() {
            return;
        }
        let metadata = &self.metadata;
        let mut ready = Vec::new();
        self.batch.waiting.retain(|&(event, site)| match defined(metadata, &event, site) {
            Some(id) => {
                ready.push((event, id));
                false
            }
            None => true,
        });
        for (event, id) in ready {
            self.batch.push(event, id);
        }
    }
}
