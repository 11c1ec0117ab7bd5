//! The consumer: drains every lane of the ring into `run.bin`, turns control records into
//! metadata frames, snapshots the per-thread aggregates and drop counters, and frees the lanes of
//! threads that exited or died. Everything read from the segment is validated: a producer can
//! lose its own records, never crash the collector.

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mlprof_filewrite::BackgroundFile;
use mlprof_format::ring::{LANE_ACTIVE, LANE_RETIRED, LaneConsumer, lane_state};
use mlprof_format::runfile::{ProcessExit, RunEnd, RunWriter};

use crate::segment::Segment;
use crate::timebase::Timebase;

mod batch;
mod lanes;
mod liveness;
mod metadata;
mod pass;
mod procfs;
mod ring;
mod sites;
mod step;
mod streams;
mod strings;
#[cfg(test)]
pub(crate) mod testing;

use batch::Batch;
use lanes::LanesInUse;
use liveness::Liveness;
use metadata::Metadata;
use pass::Pass;
use procfs::thread_alive;
pub use ring::DrainedRing;
use streams::Streams;

/// Events a pass gathers before it writes them out as a frame and goes on (128 KiB). A pass in
/// a burst takes a lane or two (~120 K records); gathered whole, its batch and the sort's
/// scratch were ~15 MiB of memory the collector touched for the first time in its first
/// passes, which ran ~5× slower per record than later ones (page faults, costly in a VM),
/// while the producers' lanes filled and dropped; later passes went through memory, not the
/// cache. A small batch and its scratch are reused from the first pass on and stay in the
/// cache (bench/burst_ab.py, 30 rounds: 1–4 Ki events alike, 8 Ki a little slower, 64 Ki
/// dropping again; BENCHMARKS.md).
const BATCH_EVENTS: usize = 2 * 1024;

#[derive(Default, Debug, Clone)]
pub struct Totals {
    pub events: u64,
    pub aggregated_calls: u64,
    pub dropped: u64,
    pub processes: u64,
    pub threads: u64,
    pub refused_records: u64,
    pub corrupt_lanes: u64,
    /// GPU activity records written (CUPTI's, through the preload).
    pub gpu_activities: u64,
    /// Records that named a call site their process never defined (`--sites`; written
    /// without one).
    pub sites_undefined: u64,
}

/// The consumer of a ring (the collector's segment by default) and the run file it writes.
pub struct Drainer<R = Segment> {
    segment: R,
    timebase: Timebase,
    writer: RunWriter<BackgroundFile>,
    /// The ring's consumer step (and its copy buffer, reused between passes).
    consumer: LaneConsumer,
    /// The lanes in use: which lanes a pass reads.
    lanes: LanesInUse,
    /// What passes keep between them: the pass's lanes, the busiest lane, the periodic jobs.
    pass: Pass,
    /// One stream per claimed lane: who writes into it, its counters as last written.
    streams: Streams,
    /// The events gathered for the next frame, and those waiting for their path or site.
    batch: Batch,
    /// The strings, processes and exits the run file is told about.
    metadata: Metadata,
    /// Which owners are gone: the checks' memory, the launched command, the process images.
    liveness: Liveness,
    /// Whether passes back spare lanes for new threads (not once the job has ended).
    offer_lanes: bool,
    quiet: bool,
    pub totals: Totals,
}

impl<R: DrainedRing> Drainer<R> {
    pub fn new(segment: R, timebase: Timebase, writer: RunWriter<BackgroundFile>, quiet: bool) -> Drainer<R> {
        let now = Instant::now();
        Drainer {
            segment,
            timebase,
            writer,
            consumer: LaneConsumer::new(),
            lanes: LanesInUse::default(),
            pass: Pass::new(now),
            streams: Streams::new(),
            batch: Batch::new(),
            metadata: Metadata::default(),
            liveness: Liveness::new(now),
            offer_lanes: true,
            quiet,
            totals: Totals::default(),
        }
    }

    fn lane(&self, index: u32) -> &mlprof_format::ring::Lane {
        // Callers iterate 0..lane_count.
        self.segment.view().lane(index).expect("lane index within the ring")
    }

    pub fn segment_mut(&mut self) -> &mut R {
        &mut self.segment
    }

    pub fn segment(&self) -> &R {
        &self.segment
    }

    /// How long the collector may sleep after a pass that took `busiest` records from its
    /// fullest lane over `elapsed`: until that lane, at that rate, would be an eighth full, but
    /// 1 ms at least and 100 ms at most (liveness checks and aggregate snapshots need no more).
    /// A lane that fills faster than foreseen wakes the collector at a quarter full anyway.
    /// An eighth, not a quarter: the pass that follows may be late (the collector preempted,
    /// its writer queue full behind a throttled disk), and what is left of the lane is the time
    /// it has; at a million records a second this costs ~125 passes a second, ~0.3 % of a core.
    pub fn next_sleep(&self, elapsed: Duration) -> Duration {
        let eighth = self.segment.geometry().lane_capacity as f64 / 8.0;
        let rate = self.pass.busiest as f64 / elapsed.as_secs_f64().max(1e-6);
        let seconds = if rate > 0.0 { eighth / rate } else { f64::INFINITY };
        Duration::from_secs_f64(seconds.clamp(0.001, 0.1))
    }

    /// Whether the last pass took a quarter of a lane or more from one lane: a producer
    /// outran the planned sleep (a burst; a steady rate takes about an eighth a pass).
    fn is_busy(&self) -> bool {
        self.pass.busiest as u64 >= self.segment.geometry().lane_capacity as u64 / 4
    }

    /// The run file, for the frames of the energy sampler.
    pub fn writer_mut(&mut self) -> &mut RunWriter<BackgroundFile> {
        &mut self.writer
    }

    /// Stops backing spare lanes: the launched command has ended (or recording is ending),
    /// and backing a lane only to free it at exit costs ~3 ms of CPU per 4 MiB lane (zeroing
    /// and freeing its pages). That was a third of a short run's fixed cost: the pass after
    /// the command's exit backed two spares for the thread it had just lost. Lanes already
    /// backed stay on offer to whatever the command left behind.
    /// Notes the processes that join from now on, for [`Drainer::take_joined`].
    pub fn note_joined(&mut self) {
        self.metadata.joined.get_or_insert_with(Vec::new);
    }

    /// The processes that joined since the last call (none unless [`Drainer::note_joined`]).
    pub fn take_joined(&mut self) -> Vec<u32> {
        self.metadata.joined.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub fn stop_offering_lanes(&mut self) {
        self.offer_lanes = false;
    }

    /// The launcher waits for process `pid` itself (see `Liveness::launched`).
    pub fn watch_launched(&mut self, pid: u32) {
        self.liveness.launched = Some(pid);
    }

    /// The launcher reaped the launched command: its pid is free for reuse, so liveness checks
    /// ask the kernel about it again.
    pub fn launched_reaped(&mut self) {
        self.liveness.launched = None;
    }

    /// Whether some lane still belongs to a live thread.
    pub fn has_live_lanes(&self) -> bool {
        (0..self.segment.geometry().lane_count).any(|i| {
            let lane = self.lane(i);
            lane_state(lane.state.load(Ordering::Acquire)) == LANE_ACTIVE
                && thread_alive(lane.pid.load(Ordering::Relaxed), lane.tid.load(Ordering::Relaxed), true)
        })
    }

    /// Records how a process ended, as the launcher's waitpid (its child) or the zombie's
    /// /proc entry (a descendant killed by a signal) says.
    pub fn record_exit(&mut self, pid: u32, exit_code: Option<i32>, signal: Option<i32>) -> io::Result<()> {
        self.metadata.exits.insert(pid);
        self.writer.write_process_exit(&ProcessExit {
            pid,
            time_ns: crate::timebase::monotonic_ns(),
            exit_code,
            signal,
        })
    }

    /// Final drain: every lane, live or not, then the end frame.
    pub fn finish(mut self) -> io::Result<Totals> {
        self.stop_offering_lanes();
        self.drain_once()?;
        for index in 0..self.segment.geometry().lane_count {
            let state = lane_state(self.lane(index).state.load(Ordering::Acquire));
            if state == LANE_ACTIVE || state == LANE_RETIRED {
                self.open_stream(index)?;
                self.drain_lane(index)?;
                self.close_stream_counters(index)?;
            }
        }
        self.metadata.write_processes(&mut self.writer, true)?;
        self.batch.release_all(&mut self.metadata);
        self.write_batch()?;
        self.totals.sites_undefined = self.metadata.sites.undefined;
        self.snapshot_all()?;
        self.totals.aggregated_calls = self.streams.final_aggregates;
        self.totals.dropped += self.streams.no_lane_drops();
        self.writer
            .finish(&RunEnd {
                end_ns: crate::timebase::monotonic_ns(),
                events: self.totals.events,
                dropped: self.totals.dropped,
            })?
            .close()?;
        Ok(self.totals)
    }
}

#[cfg(test)]
mod tests;
