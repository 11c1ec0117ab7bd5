//! The consumer step on one lane, the collector's hot path: each record the ring's consumer
//! hands out becomes an event of the batch (in the run file's units, named by the lane's
//! owner), a string, or metadata (a process's rank, start, symbol, exit), within the step's
//! room and the round's time.

use std::io;
use std::sync::atomic::Ordering;

use mlprof_filewrite::BackgroundFile;
use mlprof_format::gpu::{ACTIVITY_FLAG_MONOTONIC, ACTIVITY_LINK, GpuActivity, KIND_GPU_ACTIVITY};
use mlprof_format::range::RangeEdge;
use mlprof_format::rank::RankRecord;
use mlprof_format::record::{
    CONTROL_KIND_BASE, Event, FLAG_CORRELATED, KIND_PROCESS_EXIT, KIND_PROCESS_RANK, KIND_PROCESS_START,
    KIND_SYMBOL_DEF, PROC_FORKED,
};
use mlprof_format::ring::{Drained, KIND_CAPTURE_EDGE, LaneItem};
use mlprof_format::runfile::{ProcessExit, ProcessInfo, RunWriter, SymbolInfo};
use mlprof_format::site::{FLAG_SITE, KIND_SITE_DEF};

use super::batch::{Batch, Site, defined};
use super::liveness::Images;
use super::metadata::Metadata;
use super::{BATCH_EVENTS, DrainedRing, Drainer, Totals};
use crate::timebase::Timebase;

/// How far one consumer step on a lane may go.
#[derive(Clone, Copy)]
pub(super) struct StepLimits {
    /// Events it may add to the batch.
    pub(super) room: usize,
    /// Whether it stops before a record whose path or call site no lane has defined yet.
    pub(super) hold: bool,
    /// It stops before an event that ends later than this (ring clock), if given.
    pub(super) cut: Option<u64>,
}

/// What one consumer step on a lane did.
pub(super) struct LaneStep {
    /// Records taken (slots, string payloads included).
    pub(super) taken: usize,
    /// Events it added to the batch.
    pub(super) events: usize,
    /// Why it ended.
    pub(super) end: StepEnd,
}

/// How a consumer step on a lane ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum StepEnd {
    /// It took everything the lane had published.
    Drained,
    /// It stopped before a record the step's room or the round's time left out.
    Full,
    /// It stopped before a record whose path or call site another lane has not delivered yet.
    NeedsDefinition,
}

/// Why a lane's consumer step stopped early.
enum Stop {
    /// The step's room is used up, or the record ends past the round's time: write the batch
    /// out, then go on with the lane.
    BatchFull,
    /// A record names a path or a call site not defined yet (another thread of the process
    /// sent it, in a lane this pass has not reached that far): take the other lanes first.
    NeedsDefinition,
    /// Writing the run file failed.
    Io(io::Error),
}

impl From<io::Error> for Stop {
    fn from(err: io::Error) -> Stop {
        Stop::Io(err)
    }
}

/// One consumer step's handler of the items it is handed (the parts of the drainer it needs,
/// borrowed): an event goes to the batch, a string to the run file, a control record to the
/// metadata; a refused stream's records are only counted.
struct RecordHandler<'a> {
    /// The lane's owner: the events' pid and tid, and its process image.
    pid: u32,
    tid: u32,
    image: u64,
    refused: bool,
    limits: StepLimits,
    /// The batch's length when the step began.
    batch_before: usize,
    timebase: &'a Timebase,
    writer: &'a mut RunWriter<BackgroundFile>,
    batch: &'a mut Batch,
    metadata: &'a mut Metadata,
    images: &'a mut Images,
    totals: &'a mut Totals,
}

impl RecordHandler<'_> {
    /// One item of the lane; `Err` stops the step before it (it is handed out again).
    #[inline]
    fn handle(&mut self, item: LaneItem<'_>) -> Result<(), Stop> {
        if self.refused {
            self.totals.refused_records += 1;
            return Ok(());
        }
        let event = match item {
            LaneItem::String { id, bytes } => {
                return Ok(self.metadata.strings.define(self.writer, id, bytes)?);
            }
            LaneItem::Record(event) => event,
        };
        if event.kind >= CONTROL_KIND_BASE {
            return Ok(self.control_record(&event)?);
        }
        self.event(event)
    }

    /// A control record: a process's rank, start, symbol, site or exit, a GPU activity, a
    /// capture range's edge; other
    /// kinds are skipped.
    #[inline]
    fn control_record(&mut self, event: &Event) -> io::Result<()> {
        let (pid, timebase) = (self.pid, self.timebase);
        match event.kind {
            KIND_PROCESS_RANK => {
                if let Some(rank) = RankRecord::from_event(event) {
                    self.metadata.pending_ranks.insert(pid, rank.info());
                }
            }
            KIND_PROCESS_START => {
                self.totals.processes += 1;
                if let Some(joined) = &mut self.metadata.joined {
                    joined.push(pid);
                }
                let process = ProcessInfo {
                    pid,
                    ppid: event.arg as u32,
                    argv: Vec::new(),
                    start_ns: timebase.to_ns(event.start),
                    forked: event.extra & PROC_FORKED != 0,
                    rank: self.metadata.pending_ranks.remove(&pid),
                    node: 0,
                };
                if !process.forked {
                    self.images.announce(pid, process.start_ns, self.image);
                }
                // A fork child refers to its parent's command line, which the parent's lane
                // may deliver later in this pass: wait for it.
                self.metadata.waiting_for_argv.push((event.arg2, process));
            }
            KIND_GPU_ACTIVITY => {
                let mut activity = GpuActivity::from_event(event);
                activity.pid = pid;
                if activity.flags & ACTIVITY_FLAG_MONOTONIC == 0 {
                    activity.start = timebase.to_ns(activity.start);
                    activity.dur = timebase.duration_ns(activity.dur);
                }
                activity.flags &= !ACTIVITY_FLAG_MONOTONIC;
                self.batch.gpu.push(activity);
            }
            KIND_SYMBOL_DEF => {
                self.writer.write_symbol(&SymbolInfo { pid, handle: event.arg, name: event.arg2 })?;
            }
            KIND_SITE_DEF => self.metadata.sites.define(self.writer, (pid, self.image), event)?,
            KIND_CAPTURE_EDGE => {
                self.writer.write_range_edge(&RangeEdge {
                    range: event.arg as u32,
                    opened: event.fd != 0,
                    time_ns: timebase.to_ns(event.start),
                    pid,
                    tid: event.tid,
                    trigger: event.extra,
                })?;
            }
            KIND_PROCESS_EXIT => {
                self.metadata.exits.insert(pid);
                self.writer.write_process_exit(&ProcessExit {
                    pid,
                    time_ns: timebase.to_ns(event.start),
                    exit_code: Some(event.ret as i32),
                    signal: None,
                })?;
            }
            _ => {}
        }
        Ok(())
    }

    /// An event: into the batch, in CLOCK_MONOTONIC ns and named by the lane's owner, unless the
    /// step's room is used up or it ends past the round's time. One that names a path or a
    /// call site not defined yet (another thread of the process defined it on its own lane)
    /// stops the step (with `hold`) or waits aside.
    #[inline]
    fn event(&mut self, mut event: Event) -> Result<(), Stop> {
        let StepLimits { room, hold, cut } = self.limits;
        if self.batch.events.len() - self.batch_before >= room {
            return Err(Stop::BatchFull);
        }
        if cut.is_some_and(|cut| event.start.saturating_add(event.dur) > cut) {
            return Err(Stop::BatchFull);
        }
        // The site's number rides in the pid slot (`--sites`); the run file keeps the run-wide id
        // beside the event.
        let site = if event.flags & FLAG_SITE != 0 {
            event.flags &= !FLAG_SITE;
            Site::Number { number: event.pid, image: self.image }
        } else {
            Site::Id(0)
        };
        event.pid = self.pid;
        // Decided before anything is kept of the event: a stopped step hands it out again.
        let defined = defined(self.metadata, &event, site);
        if defined.is_none() && hold {
            return Err(Stop::NeedsDefinition);
        }
        let timebase = self.timebase;
        event.start = timebase.to_ns(event.start);
        event.dur = timebase.duration_ns(event.dur);
        if event.flags & FLAG_CORRELATED != 0 {
            self.link(&event);
        }
        event.tid = self.tid;
        match defined {
            Some(site) => self.batch.push(event, site),
            None => self.batch.waiting.push((event, site)),
        }
        Ok(())
    }
}

impl RecordHandler<'_> {
    /// A GPU call that carries its CUPTI correlation id in `tid` (in the ring only): the link
    /// from that id to the call goes beside the GPU activities.
    #[cold]
    fn link(&mut self, event: &Event) {
        self.batch.gpu.push(GpuActivity {
            kind: KIND_GPU_ACTIVITY,
            what: ACTIVITY_LINK,
            pid: self.pid,
            correlation: event.tid,
            aux: event.kind,
            start: event.start,
            dur: event.dur,
            value: self.tid as u64,
            ..GpuActivity::default()
        });
    }
}

impl<R: DrainedRing> Drainer<R> {
    /// Drains lane `index` (see [`LaneConsumer::drain`]): the records become events of the
    /// pass's batch, strings and metadata frames; a refused stream's are only counted. The
    /// batch is written out whenever it holds [`BATCH_EVENTS`] events, and the lane's step goes
    /// on. Returns the number of records taken.
    ///
    /// [`LaneConsumer::drain`]: mlprof_format::ring::LaneConsumer::drain
    pub(super) fn drain_lane(&mut self, index: u32) -> io::Result<usize> {
        let mut taken = 0;
        loop {
            let room = BATCH_EVENTS.saturating_sub(self.batch.events.len());
            let step = self.drain_lane_step(index, StepLimits { room, hold: false, cut: None })?;
            taken += step.taken;
            if step.end == StepEnd::Drained {
                return Ok(taken);
            }
            self.write_events()?;
        }
    }

    /// One consumer step on lane `index` within `limits` (see [`StepLimits`]); the record it
    /// stops before is handed out again by the next step. Without `hold`, a record whose path
    /// or call site is not defined yet waits aside until the definition comes (in a later pass,
    /// at the latest at the end).
    pub(super) fn drain_lane_step(&mut self, index: u32, limits: StepLimits) -> io::Result<LaneStep> {
        let Some(stream) = self.streams.by_lane.get(&index) else {
            return Ok(LaneStep { taken: 0, events: 0, end: StepEnd::Drained });
        };
        let tail = self.lane(index).tail.load(Ordering::Relaxed);
        let batch_before = self.batch.events.len();
        let (pid, tid, image, refused) = (stream.pid, stream.tid, stream.image, stream.refused);
        let Drainer { segment, consumer, timebase, writer, batch, metadata, liveness, totals, .. } = self;
        let mut handler = RecordHandler {
            pid,
            tid,
            image,
            refused,
            limits,
            batch_before,
            timebase,
            writer,
            batch,
            metadata,
            images: &mut liveness.images,
            totals,
        };
        // Blocks no larger than the room: a lane's share of a round may be a few records.
        let step = consumer.drain_in_blocks(segment.view(), index, limits.room, |item| handler.handle(item));
        let drained = match step {
            Ok(drained) => drained,
            Err(Stop::Io(err)) => return Err(err),
            Err(stop) => {
                // The step released what it handled (the tail is ours alone to move).
                let taken = self.lane(index).tail.load(Ordering::Relaxed).wrapping_sub(tail) as usize;
                let events = self.batch.events.len() - batch_before;
                let end = if matches!(stop, Stop::NeedsDefinition) {
                    StepEnd::NeedsDefinition
                } else {
                    StepEnd::Full
                };
                return Ok(LaneStep { taken, events, end });
            }
        };
        if let Drained::CorruptPositions { tail, head } = drained {
            self.totals.corrupt_lanes += 1;
            eprintln!(
                "mlprof-collect: lane {index} has inconsistent positions ({tail}..{head}); skipping its records"
            );
        }
        let events = self.batch.events.len() - batch_before;
        Ok(LaneStep { taken: drained.taken(), events, end: StepEnd::Drained })
    }
}
