//! The consumer: drains every lane of the ring into `run.bin`, turns control records into
//! metadata frames, snapshots the per-thread aggregates and drop counters, and frees the lanes of
//! threads that exited or died. Everything read from the segment is validated: a producer can
//! lose its own records, never crash the collector.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mlprof_filewrite::BackgroundFile;
use mlprof_format::func::{AGG_SLOTS, Func, agg_slot_meaning};
use mlprof_format::rank::{RankInfo, RankRecord};
use mlprof_format::record::{
    CONTROL_KIND_BASE, Event, KIND_PROCESS_EXIT, KIND_PROCESS_RANK, KIND_PROCESS_START, KIND_SYMBOL_DEF,
    PROC_FORKED,
};
use mlprof_format::ring::{
    Drained, LANE_ACTIVE, LANE_CLAIMING, LANE_RETIRED, LaneConsumer, LaneItem, lane_generation, lane_state,
};
use mlprof_format::runfile::{
    AggregateSample, DropSample, ProcessExit, ProcessInfo, RunEnd, RunWriter, SymbolInfo, ThreadInfo,
};

use crate::segment::Segment;
use crate::timebase::Timebase;

mod procfs;
mod ring;
mod strings;
#[cfg(test)]
mod testing;

use procfs::{owner_uid, process_exists, thread_alive, zombie_exit};
pub use ring::DrainedRing;
use strings::{Strings, split_argv};

/// Every this many passes, a pass looks at every lane's state although no claim was counted
/// since (see `look_at_lanes`): a claim abandoned half-way, a lane a producer failed to back
/// and gave back, a state scribbled over are found within about a second.
const LOOK_AT_ALL_EVERY: u32 = 10;
const SNAPSHOT_EVERY: Duration = Duration::from_millis(100);
const LIVENESS_EVERY: Duration = Duration::from_millis(100);
/// Every how many liveness checks each recording thread is asked whether it still exists, and
/// a leader whether it is a zombie; the checks between ask each process once (see
/// `free_dead_lanes`).
const THREAD_CHECK_EVERY: u32 = 10;
/// How long records may wait in the collector's partial chunk before they are written (by
/// this thread where the chunk is small, else by the writer thread). A chunk fills and goes at
/// once at high rates; at a job's everyday rates (a thousand calls a second is 64 KB) waking
/// the writer thread every pass cost two context switches and a lock hand-off per pass, a
/// sixth of the idle collector's CPU. Between flushes a pass that gathered enough writes them
/// itself (`BackgroundFile::write_small_now` says how much).
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Events a pass gathers before it writes them out as a frame and goes on (128 KiB). A pass in
/// a burst takes a lane or two (~120 K records); gathered whole, its batch and the sort's
/// scratch were ~15 MiB of memory the collector touched for the first time in its first
/// passes, which ran ~5× slower per record than later ones (page faults, costly in a VM),
/// while the producers' lanes filled and dropped; later passes went through memory, not the
/// cache. A small batch and its scratch are reused from the first pass on and stay in the
/// cache (bench/burst_ab.py, 30 rounds: 1–4 Ki events alike, 8 Ki a little slower, 64 Ki
/// dropping again; BENCHMARKS.md).
const BATCH_EVENTS: usize = 2 * 1024;
/// String bytes kept in memory to name processes (ids are kept for every string).
const STRING_MEMORY_LIMIT: usize = 64 << 20;

/// A lane in a drain pass.
struct PassLane {
    index: u32,
    /// Its owner had exited when the pass began: the lane is freed after it.
    retired: bool,
    /// Its records wait for paths other lanes deliver, unless no lane got further in a whole
    /// round (the string was lost: then they are held aside, as between passes).
    hold: bool,
    /// Its last step stopped before a record whose path was not defined yet.
    waiting: bool,
    /// Events it added to the batch in this round.
    in_round: usize,
    /// The lane's `head` when the pass began: the pass takes the records up to there.
    until: u64,
    /// Records taken in this pass.
    taken: usize,
    done: bool,
}

/// How far one consumer step on a lane may go.
struct StepLimits {
    /// Events it may add to the batch.
    room: usize,
    /// Whether it stops before a record whose path no lane has defined yet.
    hold: bool,
    /// It stops before an event that ends later than this (ring clock), if given.
    cut: Option<u64>,
}

/// What one consumer step on a lane did.
struct LaneStep {
    /// Records taken (slots, string payloads included).
    taken: usize,
    /// Events it added to the batch.
    events: usize,
    /// Why it ended.
    end: StepEnd,
}

/// How a consumer step on a lane ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StepEnd {
    /// It took everything the lane had published.
    Drained,
    /// It stopped before a record the step's room or the round's time left out.
    Full,
    /// It stopped before a record whose path another lane has not delivered yet.
    NeedsString,
}

/// Why a lane's consumer step stopped early.
enum Stop {
    /// The step's room is used up, or the record ends past the round's time: write the batch
    /// out, then go on with the lane.
    BatchFull,
    /// A record names a path not defined yet (another thread of the process sent it, in a
    /// lane this pass has not reached that far): take the other lanes first.
    NeedsString,
    /// Writing the run file failed.
    Io(io::Error),
}

impl From<io::Error> for Stop {
    fn from(err: io::Error) -> Stop {
        Stop::Io(err)
    }
}

/// One claim of one lane by one thread.
struct Stream {
    id: u64,
    generation: u32,
    pid: u32,
    tid: u32,
    /// The process image the thread belongs to (see `Lane::image`).
    image: u64,
    /// When the collector first saw the claim.
    opened: Instant,
    refused: bool,
    aggregates: [(u64, u64, u64); AGG_SLOTS],
    /// (dropped, interrupted) as last written.
    dropped: (u64, u64),
}

impl Stream {
    /// Writes the counters of its lane (`index` of `view`) that changed since its last
    /// snapshot. `samples` is scratch, kept by the caller: this runs for every stream every
    /// pass, and an allocation a pass was 2 % of an idle collector's CPU.
    fn snapshot(
        &mut self,
        view: &mlprof_format::ring::RingView,
        index: u32,
        timebase: &Timebase,
        writer: &mut RunWriter<BackgroundFile>,
        samples: &mut Vec<AggregateSample>,
    ) -> io::Result<()> {
        if self.refused {
            return Ok(());
        }
        let Some(lane) = view.lane(index) else {
            return Ok(());
        };
        let time_ns = crate::timebase::monotonic_ns();
        samples.clear();
        for (slot, counters) in lane.aggregates.iter().enumerate() {
            let now = (
                counters.count.load(Ordering::Relaxed),
                counters.timed.load(Ordering::Relaxed),
                counters.ticks.load(Ordering::Relaxed),
            );
            if now == self.aggregates[slot] {
                continue;
            }
            self.aggregates[slot] = now;
            let Some((func, clock_id)) = agg_slot_meaning(slot) else {
                continue;
            };
            samples.push(AggregateSample {
                stream: self.id,
                pid: self.pid,
                tid: self.tid,
                func: func as u16,
                clock_id,
                time_ns,
                count: now.0,
                timed: now.1,
                timed_ns: timebase.duration_ns(now.2),
            });
        }
        if !samples.is_empty() {
            writer.write_aggregates(samples)?;
        }
        let interrupted = lane.interrupted.load(Ordering::Relaxed);
        let dropped = lane.dropped.load(Ordering::Relaxed).wrapping_add(interrupted);
        if (dropped, interrupted) != self.dropped {
            self.dropped = (dropped, interrupted);
            let sample =
                DropSample { stream: self.id, pid: self.pid, tid: self.tid, time_ns, dropped, interrupted };
            writer.write_drops(&[sample])?;
        }
        Ok(())
    }
}

#[derive(Default, Debug, Clone)]
pub struct Totals {
    pub events: u64,
    pub aggregated_calls: u64,
    pub dropped: u64,
    pub processes: u64,
    pub threads: u64,
    pub refused_records: u64,
    pub corrupt_lanes: u64,
}

pub struct Drainer<R = Segment> {
    segment: R,
    timebase: Timebase,
    writer: RunWriter<BackgroundFile>,
    streams: HashMap<u32, Stream>,
    next_stream: u64,
    strings: Strings,
    batch: Vec<Event>,
    waiting_for_path: Vec<Event>,
    waiting_for_argv: Vec<(u64, ProcessInfo)>,
    /// The ring's consumer step (and its copy buffer, reused between passes).
    consumer: LaneConsumer,
    last_snapshot: Instant,
    last_liveness: Instant,
    /// Liveness checks made (see `free_dead_lanes`).
    liveness_checks: u32,
    /// Processes known in the current liveness check (asked about, or the launched command),
    /// and whether they exist (kept: a check allocates nothing).
    processes_seen: Vec<(u32, bool)>,
    /// Whether passes back spare lanes for new threads (not once the job has ended).
    offer_lanes: bool,
    last_flush: Instant,
    no_lane_drops: u64,
    final_aggregates: u64,
    uid: u32,
    /// Process images that announced themselves without a fork (a program started or exec'd)
    /// during this pass: pid → (start time, image), the latest per pid (a pass can see several
    /// images of one pid: an exec chain). Lanes of any other image of that pid are freed.
    new_images: HashMap<u32, (u64, u64)>,
    /// The latest image announced by each pid.
    current_images: HashMap<u32, u64>,
    /// Lanes seen `CLAIMING` at the last liveness check, with their state word: a lane still
    /// holding the same word a period later was abandoned by a killed claimer.
    claiming: HashMap<u32, u32>,
    /// Pids whose exit is recorded.
    exits: HashSet<u32>,
    /// The launched command's pid until the launcher reaps it: `waitpid` tells its end, so its
    /// leader needs no zombie check through /proc, and it exists meanwhile.
    launched: Option<u32>,
    /// Rank records waiting for the process start that follows them on the same lane (a
    /// pass can end between the two).
    pending_ranks: HashMap<u32, RankInfo>,
    quiet: bool,
    /// The lanes of the current pass (kept: a pass allocates nothing).
    pass_lanes: Vec<PassLane>,
    /// The aggregate samples of one stream's snapshot (kept, like `pass_lanes`).
    aggregate_samples: Vec<AggregateSample>,
    /// Records taken from the fullest lane in the last pass (what the next sleep is sized by).
    busiest_lane: usize,
    /// Lanes `CLAIMING`, `ACTIVE` or `RETIRED` when the pass last looked (see `look_at_lanes`).
    lanes_in_use: Vec<u32>,
    /// The header's claim count when the pass last looked at every lane.
    claims_seen: Option<u32>,
    /// Passes made.
    passes: u32,
    pub totals: Totals,
}

/// Whether a lane in state word `word` belongs to a thread (or did, and holds its last records).
fn in_use(word: u32) -> bool {
    matches!(lane_state(word), LANE_CLAIMING | LANE_ACTIVE | LANE_RETIRED)
}

impl<R: DrainedRing> Drainer<R> {
    pub fn new(segment: R, timebase: Timebase, writer: RunWriter<BackgroundFile>, quiet: bool) -> Drainer<R> {
        let now = Instant::now();
        Drainer {
            segment,
            timebase,
            writer,
            streams: HashMap::default(),
            next_stream: 1,
            strings: Strings::default(),
            batch: Vec::with_capacity(1 << 16),
            waiting_for_path: Vec::new(),
            waiting_for_argv: Vec::new(),
            consumer: LaneConsumer::new(),
            last_snapshot: now,
            last_liveness: now,
            liveness_checks: 0,
            processes_seen: Vec::new(),
            offer_lanes: true,
            last_flush: now,
            no_lane_drops: 0,
            final_aggregates: 0,
            // Safety: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            new_images: HashMap::default(),
            current_images: HashMap::default(),
            claiming: HashMap::default(),
            exits: HashSet::default(),
            launched: None,
            pending_ranks: HashMap::default(),
            quiet,
            pass_lanes: Vec::new(),
            aggregate_samples: Vec::new(),
            busiest_lane: 0,
            lanes_in_use: Vec::new(),
            claims_seen: None,
            passes: 0,
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
        let rate = self.busiest_lane as f64 / elapsed.as_secs_f64().max(1e-6);
        let seconds = if rate > 0.0 { eighth / rate } else { f64::INFINITY };
        Duration::from_secs_f64(seconds.clamp(0.001, 0.1))
    }

    /// Whether the last pass took a quarter of a lane or more from one lane: a producer
    /// outran the planned sleep (a burst; a steady rate takes about an eighth a pass).
    fn is_busy(&self) -> bool {
        self.busiest_lane as u64 >= self.segment.geometry().lane_capacity as u64 / 4
    }

    /// The run file, for the frames of the energy sampler.
    pub fn writer_mut(&mut self) -> &mut RunWriter<BackgroundFile> {
        &mut self.writer
    }

    /// One pass over all lanes; returns the number of records taken.
    pub fn drain_once(&mut self) -> io::Result<usize> {
        self.segment.heartbeat(self.timebase.now());
        let mut lanes = std::mem::take(&mut self.pass_lanes);
        lanes.clear();
        let looked_at_all = self.look_at_lanes();
        for at in 0..self.lanes_in_use.len() {
            let index = self.lanes_in_use[at];
            let word = self.lane(index).state.load(Ordering::Acquire);
            let state = lane_state(word);
            if state != LANE_ACTIVE && state != LANE_RETIRED {
                continue;
            }
            self.open_stream(index)?;
            let until = self.lane(index).head.load(Ordering::Acquire);
            let retired = state == LANE_RETIRED;
            if !retired {
                self.segment.grow_lane(index, until);
            }
            lanes.push(PassLane {
                index,
                retired,
                hold: true,
                waiting: false,
                in_round: 0,
                until,
                taken: 0,
                done: false,
            });
        }
        // In rounds: each lane adds its share of a batch, then the batch is written, until
        // every lane gave what it had published when the pass began. So a frame holds every
        // busy thread's records over the same stretch of time, in end-time order, as when a
        // pass was one frame; and a lane that keeps filling cannot hold the pass forever.
        // A round takes the records that end by a common time (the earliest, among the lanes,
        // of the end of the record their share reaches), so frames also follow each other in
        // time across threads (readers stream fd histories in file order). A thread's records
        // reach the file in its lane's order: one naming a path that another lane defines
        // stops its lane until that lane got there (readers build a thread's slices in arrival
        // order); such lanes get a second sweep in the same round.
        let capacity = self.segment.geometry().lane_capacity as usize;
        let mut timed = true;
        loop {
            let pending = lanes.iter().filter(|lane| !lane.done).count();
            if pending == 0 {
                break;
            }
            let share = (BATCH_EVENTS / pending).max(1);
            let cut = if timed {
                lanes
                    .iter()
                    .filter(|lane| !lane.done)
                    .filter_map(|lane| self.segment.view().record_end_ahead(lane.index, share))
                    .min()
            } else {
                None
            };
            timed = true;
            let mut progress = false;
            for sweep in 0..2 {
                // Lanes that gave what they had at the pass's start take part too: what they
                // published since and ends by the round's time belongs in this frame.
                for lane in lanes.iter_mut().filter(|lane| sweep == 0 || lane.waiting) {
                    let was_done = lane.done;
                    let room = if sweep == 0 { share } else { share.saturating_sub(lane.in_round) };
                    let limits = StepLimits { room, hold: lane.hold, cut };
                    let step = self.drain_lane_step(lane.index, limits)?;
                    progress |= !was_done && (step.taken > 0 || step.end == StepEnd::Drained);
                    lane.waiting = step.end == StepEnd::NeedsString;
                    lane.taken += step.taken;
                    lane.in_round = if sweep == 0 { step.events } else { lane.in_round + step.events };
                    let tail = self.lane(lane.index).tail.load(Ordering::Relaxed);
                    // Wrapping: positions count up from a claim and never wrap in practice; a
                    // hostile producer's cannot hold the pass beyond two lanes' worth.
                    let reached = (tail.wrapping_sub(lane.until) as i64) >= 0;
                    lane.done |= step.end == StepEnd::Drained || reached || lane.taken >= 2 * capacity;
                }
                if !lanes.iter().any(|lane| lane.waiting) {
                    break;
                }
            }
            if !progress {
                if lanes.iter().any(|lane| lane.waiting) {
                    // The paths they wait for come after records past the round's time, or
                    // were lost: those records wait aside, as between passes.
                    lanes.iter_mut().filter(|lane| lane.waiting).for_each(|lane| lane.hold = false);
                } else {
                    // Records out of end order at the lanes' heads: one round by count alone.
                    timed = false;
                }
            }
            self.release_waiting();
            self.write_events()?;
        }
        let (mut taken, mut busiest) = (0, 0);
        for lane in &lanes {
            taken += lane.taken;
            busiest = busiest.max(lane.taken);
            if lane.retired {
                // What the owner left after the pass began (nothing: it had exited).
                self.drain_lane(lane.index)?;
                self.close_stream(lane.index)?;
            }
        }
        self.pass_lanes = lanes;
        self.busiest_lane = busiest;
        self.free_replaced_images()?;
        self.write_batch()?;
        if self.offer_lanes
            && let Some(message) = self.segment.replenish(self.is_busy(), looked_at_all)
            && !self.quiet
        {
            eprintln!("mlprof-collect: warning: {message}");
        }
        let now = Instant::now();
        if now.duration_since(self.last_liveness) >= LIVENESS_EVERY {
            self.last_liveness = now;
            self.free_dead_lanes()?;
        }
        if now.duration_since(self.last_snapshot) >= SNAPSHOT_EVERY {
            self.last_snapshot = now;
            self.timebase.refresh();
            self.snapshot_all()?;
        }
        if now.duration_since(self.last_flush) >= FLUSH_EVERY {
            self.last_flush = now;
            self.writer.flush()?;
        } else {
            // A pass's records at everyday rates go out now, from this thread, through a chunk
            // whose pages stay hot (see `BackgroundFile::write_small_now`).
            self.writer.get_mut().write_small_now()?;
        }
        Ok(taken)
    }

    /// Brings `lanes_in_use` up to date: from every lane's state when a producer claimed a
    /// lane since the last such look (the header's `lanes_claimed` moved; a producer bumps it
    /// after its lane is `ACTIVE`, so a count read before the look covers every claim it
    /// counts) and every [`LOOK_AT_ALL_EVERY`]th pass, else from the lanes already known. A
    /// lane claimed while the count was read is seen a pass later. The 256 state words lie on
    /// 48 pages that a pass after a 100 ms sleep read cold: up to ~80 µs a pass on these VMs.
    /// True when it looked at every lane (the spare-lane bookkeeping looks then too).
    fn look_at_lanes(&mut self) -> bool {
        let claimed = self.segment.view().header().lanes_claimed.load(Ordering::Acquire);
        self.passes = self.passes.wrapping_add(1);
        let view = self.segment.view();
        if self.claims_seen == Some(claimed) && !self.passes.is_multiple_of(LOOK_AT_ALL_EVERY) {
            self.lanes_in_use.retain(|&index| {
                view.lane(index).is_some_and(|lane| in_use(lane.state.load(Ordering::Acquire)))
            });
            return false;
        }
        self.claims_seen = Some(claimed);
        self.lanes_in_use.clear();
        for index in 0..self.segment.geometry().lane_count {
            if view.lane(index).is_some_and(|lane| in_use(lane.state.load(Ordering::Acquire))) {
                self.lanes_in_use.push(index);
            }
        }
        true
    }

    /// Stops backing spare lanes: the launched command has ended (or recording is ending),
    /// and backing a lane only to free it at exit costs ~3 ms of CPU per 4 MiB lane (zeroing
    /// and freeing its pages). That was a third of a short run's fixed cost: the pass after
    /// the command's exit backed two spares for the thread it had just lost. Lanes already
    /// backed stay on offer to whatever the command left behind.
    pub fn stop_offering_lanes(&mut self) {
        self.offer_lanes = false;
    }

    /// The launcher waits for process `pid` itself (see `launched`).
    pub fn watch_launched(&mut self, pid: u32) {
        self.launched = Some(pid);
    }

    /// The launcher reaped the launched command: its pid is free for reuse, so liveness checks
    /// ask the kernel about it again.
    pub fn launched_reaped(&mut self) {
        self.launched = None;
    }

    /// Whether some lane still belongs to a live thread.
    pub fn has_live_lanes(&self) -> bool {
        (0..self.segment.geometry().lane_count).any(|i| {
            let lane = self.lane(i);
            lane_state(lane.state.load(Ordering::Acquire)) == LANE_ACTIVE
                && thread_alive(lane.pid.load(Ordering::Relaxed), lane.tid.load(Ordering::Relaxed), true)
        })
    }

    fn open_stream(&mut self, index: u32) -> io::Result<()> {
        let lane = self.lane(index);
        let generation = lane_generation(lane.state.load(Ordering::Acquire));
        if self.streams.get(&index).is_some_and(|s| s.generation == generation) {
            return Ok(());
        }
        if self.streams.contains_key(&index) {
            // The lane changed hands without us seeing it free (cannot happen with a well-behaved
            // producer); end the old stream.
            self.close_stream_counters(index)?;
        }
        let lane = self.lane(index);
        let pid = lane.pid.load(Ordering::Relaxed);
        let tid = lane.tid.load(Ordering::Relaxed);
        let image = lane.image.load(Ordering::Relaxed);
        // The uid the process claimed the lane with, and /proc's while the process lives.
        let claimed_uid = lane.uid.load(Ordering::Relaxed);
        let refused = claimed_uid != self.uid || owner_uid(pid).is_some_and(|uid| uid != self.uid);
        if refused {
            eprintln!("mlprof-collect: refusing records of pid {pid}: it belongs to another user");
        }
        let stream = Stream {
            id: self.next_stream,
            generation,
            pid,
            tid,
            image,
            opened: Instant::now(),
            refused,
            aggregates: [(0, 0, 0); AGG_SLOTS],
            dropped: (0, 0),
        };
        self.next_stream += 1;
        self.totals.threads += 1;
        if !refused {
            let name = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_default();
            self.writer.write_thread(&ThreadInfo { pid, tid, name })?;
        }
        self.streams.insert(index, stream);
        Ok(())
    }

    /// Drains lane `index` (see [`LaneConsumer::drain`]): the records become events of the
    /// pass's batch, strings and metadata frames; a refused stream's are only counted. The
    /// batch is written out whenever it holds [`BATCH_EVENTS`] events, and the lane's step goes
    /// on. Returns the number of records taken.
    fn drain_lane(&mut self, index: u32) -> io::Result<usize> {
        let mut taken = 0;
        loop {
            let room = BATCH_EVENTS.saturating_sub(self.batch.len());
            let step = self.drain_lane_step(index, StepLimits { room, hold: false, cut: None })?;
            taken += step.taken;
            if step.end == StepEnd::Drained {
                return Ok(taken);
            }
            self.write_events()?;
        }
    }

    /// Moves the events held aside for their path into the batch, those whose path is known,
    /// in place (this runs every round of a pass; a partition into two new vectors allocated
    /// each time while anything waited).
    fn release_waiting(&mut self) {
        let strings = &self.strings;
        self.batch.extend(self.waiting_for_path.extract_if(.., |e| strings.is_known(e.arg2)));
    }

    /// One consumer step on lane `index` within `limits` (see [`StepLimits`]); the record it
    /// stops before is handed out again by the next step. Without `hold`, a record whose path
    /// is not defined yet waits aside until its path comes (in a later pass, at the latest at
    /// the end).
    fn drain_lane_step(&mut self, index: u32, limits: StepLimits) -> io::Result<LaneStep> {
        let StepLimits { room, hold, cut } = limits;
        let Some(stream) = self.streams.get(&index) else {
            return Ok(LaneStep { taken: 0, events: 0, end: StepEnd::Drained });
        };
        let tail = self.lane(index).tail.load(Ordering::Relaxed);
        let batch_before = self.batch.len();
        let (pid, tid, image, refused) = (stream.pid, stream.tid, stream.image, stream.refused);
        let Drainer {
            segment,
            consumer,
            timebase,
            writer,
            strings,
            batch,
            waiting_for_path,
            waiting_for_argv,
            new_images,
            exits,
            pending_ranks,
            totals,
            ..
        } = self;
        // Blocks no larger than the room: a lane's share of a round may be a few records.
        let step = consumer.drain_in_blocks(segment.view(), index, room, |item| {
            if refused {
                totals.refused_records += 1;
                return Ok(());
            }
            let mut event = match item {
                LaneItem::String { id, bytes } => return Ok(strings.define(writer, id, bytes)?),
                LaneItem::Record(event) => event,
            };
            match event.kind {
                KIND_PROCESS_RANK => {
                    if let Some(rank) = RankRecord::from_event(&event) {
                        pending_ranks.insert(pid, rank.info());
                    }
                }
                KIND_PROCESS_START => {
                    totals.processes += 1;
                    let process = ProcessInfo {
                        pid,
                        ppid: event.arg as u32,
                        argv: Vec::new(),
                        start_ns: timebase.to_ns(event.start),
                        forked: event.extra & PROC_FORKED != 0,
                        rank: pending_ranks.remove(&pid),
                        node: 0,
                    };
                    if !process.forked {
                        let latest = new_images.entry(pid).or_insert((process.start_ns, image));
                        if process.start_ns >= latest.0 {
                            *latest = (process.start_ns, image);
                        }
                    }
                    // A fork child refers to its parent's command line, which the parent's lane
                    // may deliver later in this pass: wait for it.
                    waiting_for_argv.push((event.arg2, process));
                }
                KIND_SYMBOL_DEF => {
                    writer.write_symbol(&SymbolInfo { pid, handle: event.arg, name: event.arg2 })?;
                }
                KIND_PROCESS_EXIT => {
                    exits.insert(pid);
                    writer.write_process_exit(&ProcessExit {
                        pid,
                        time_ns: timebase.to_ns(event.start),
                        exit_code: Some(event.ret as i32),
                        signal: None,
                    })?;
                }
                kind if kind >= CONTROL_KIND_BASE => {}
                _ if batch.len() - batch_before >= room => return Err(Stop::BatchFull),
                _ if cut.is_some_and(|cut| event.start.saturating_add(event.dur) > cut) => {
                    return Err(Stop::BatchFull);
                }
                _ => {
                    event.pid = pid;
                    event.tid = tid;
                    event.start = timebase.to_ns(event.start);
                    event.dur = timebase.duration_ns(event.dur);
                    let needs_path = event.arg2 != 0 && Func::kind_has_path(event.kind);
                    if needs_path && !strings.is_known(event.arg2) {
                        if hold {
                            return Err(Stop::NeedsString);
                        }
                        waiting_for_path.push(event);
                    } else {
                        batch.push(event);
                    }
                }
            }
            Ok(())
        });
        let drained = match step {
            Ok(drained) => drained,
            Err(Stop::Io(err)) => return Err(err),
            Err(stop) => {
                // The step released what it handled (the tail is ours alone to move).
                let taken = self.lane(index).tail.load(Ordering::Relaxed).wrapping_sub(tail) as usize;
                let events = self.batch.len() - batch_before;
                let end =
                    if matches!(stop, Stop::NeedsString) { StepEnd::NeedsString } else { StepEnd::Full };
                return Ok(LaneStep { taken, events, end });
            }
        };
        if let Drained::CorruptPositions { tail, head } = drained {
            self.totals.corrupt_lanes += 1;
            eprintln!(
                "mlprof-collect: lane {index} has inconsistent positions ({tail}..{head}); skipping its records"
            );
        }
        let events = self.batch.len() - batch_before;
        Ok(LaneStep { taken: drained.taken(), events, end: StepEnd::Drained })
    }

    /// Writes the process records whose command line is known (all of them when `all`; those
    /// whose string never came get the best the system still knows).
    fn write_processes(&mut self, all: bool) -> io::Result<()> {
        let waiting = std::mem::take(&mut self.waiting_for_argv);
        for (id, mut process) in waiting {
            let bytes = match self.strings.bytes(id) {
                Some(bytes) => bytes.to_vec(),
                None if all || self.strings.is_known(id) => {
                    std::fs::read(format!("/proc/{}/cmdline", process.pid)).unwrap_or_default()
                }
                None => {
                    self.waiting_for_argv.push((id, process));
                    continue;
                }
            };
            process.argv = split_argv(&bytes);
            self.writer.write_process(&process)?;
        }
        Ok(())
    }
}

impl<R: DrainedRing> Drainer<R> {
    /// Writes the process records whose command line is known, then the pass's events in
    /// end-time order and any held events whose path is now known.
    fn write_batch(&mut self) -> io::Result<()> {
        self.write_processes(false)?;
        self.release_waiting();
        self.write_events()
    }

    /// Writes the batch's events in end-time order, as one frame, and empties it.
    fn write_events(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.batch.sort_by_key(|e| e.start.saturating_add(e.dur));
        self.writer.write_events(&self.batch)?;
        self.totals.events += self.batch.len() as u64;
        self.batch.clear();
        Ok(())
    }

    /// Frees the lanes of threads that are gone (drained first), and lanes whose claimer died
    /// half-way through claiming them; records the exit of processes found as zombies whose
    /// exit no hook saw (killed by a signal).
    ///
    /// A thread that ends retires its lane itself; what this finds is threads that could not:
    /// a process killed by a signal (all its threads at once) or a thread that left with a raw
    /// `exit` system call. So each check asks every process once whether it still exists
    /// (`kill` with no signal: the lanes of a process that was reaped are freed), and every
    /// tenth (once a second) asks every thread, and /proc whether a leader is a zombie (a
    /// killed process stays one until its parent reaps it). One `tgkill` per thread ten times a
    /// second was 7–10 µs each on these VMs: for a job with forty recording threads, 0.4 % of
    /// a core.
    fn free_dead_lanes(&mut self) -> io::Result<()> {
        self.liveness_checks = self.liveness_checks.wrapping_add(1);
        let threads = self.liveness_checks.is_multiple_of(THREAD_CHECK_EVERY);
        let mut processes = std::mem::take(&mut self.processes_seen);
        processes.clear();
        // Our child exists until the launcher reaps it (its pid cannot be reused before): known
        // without a `kill` to ask, ~10 µs under this kernel's BPF LSM hooks.
        processes.extend(self.launched.map(|pid| (pid, true)));
        let mut claiming = HashMap::default();
        // The pass's look at the lanes: a claim abandoned half-way (never counted) is among
        // them after the next look at every lane, and taken back a check later.
        for at in 0..self.lanes_in_use.len() {
            let index = self.lanes_in_use[at];
            let lane = self.lane(index);
            let word = lane.state.load(Ordering::Acquire);
            match lane_state(word) {
                LANE_CLAIMING => {
                    if self.claiming.get(&index) == Some(&word) {
                        self.segment.view().reclaim_stale_claim(index, word);
                        self.segment.lane_freed();
                    } else {
                        claiming.insert(index, word);
                    }
                    continue;
                }
                LANE_ACTIVE => {}
                _ => continue,
            }
            let (pid, tid) = (lane.pid.load(Ordering::Relaxed), lane.tid.load(Ordering::Relaxed));
            let alive = if threads {
                // The launched command ends as a zombie that the launcher reaps in its next pass.
                thread_alive(pid, tid, self.launched != Some(pid))
            } else {
                match processes.iter().find(|(seen, _)| *seen == pid) {
                    Some(&(_, exists)) => exists,
                    None => {
                        let exists = process_exists(pid);
                        processes.push((pid, exists));
                        exists
                    }
                }
            };
            if alive {
                continue;
            }
            self.open_stream(index)?;
            self.drain_lane(index)?;
            self.close_stream(index)?;
            if !self.exits.contains(&pid)
                && let Some((exit_code, signal)) = zombie_exit(pid)
            {
                self.record_exit(pid, exit_code, signal)?;
            }
        }
        self.claiming = claiming;
        self.processes_seen = processes;
        // A lane of an older image that the collector first saw after the newer image announced
        // itself: after a liveness period it cannot be a newer image's lane whose announcement
        // is still on its way, so it is the replaced image's.
        let stale: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| {
                self.current_images.get(&s.pid).is_some_and(|&image| image != s.image)
                    && s.opened.elapsed() >= LIVENESS_EVERY
            })
            .map(|(&index, _)| index)
            .collect();
        for index in stale {
            self.drain_lane(index)?;
            self.close_stream(index)?;
        }
        self.write_batch()
    }

    /// Frees the lanes of process images that exec replaced: a thread of the old image can no
    /// longer write (exec ends every thread but the caller, and the caller's new image has a
    /// new thread state), but its lane stays `ACTIVE` with a live pid and tid.
    fn free_replaced_images(&mut self) -> io::Result<()> {
        if self.new_images.is_empty() {
            return Ok(());
        }
        let new_images = std::mem::take(&mut self.new_images);
        self.current_images.extend(new_images.iter().map(|(&pid, &(_, image))| (pid, image)));
        let replaced: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| new_images.get(&s.pid).is_some_and(|&(_, image)| s.image != image))
            .map(|(&index, _)| index)
            .collect();
        for index in replaced {
            self.drain_lane(index)?;
            self.close_stream(index)?;
        }
        Ok(())
    }

    /// Final counters of a lane's stream, then the lane is zeroed and freed for reuse.
    fn close_stream(&mut self, index: u32) -> io::Result<()> {
        self.close_stream_counters(index)?;
        self.segment.view().free(index);
        self.segment.lane_freed();
        Ok(())
    }

    fn close_stream_counters(&mut self, index: u32) -> io::Result<()> {
        self.snapshot_stream(index)?;
        if let Some(stream) = self.streams.remove(&index) {
            self.final_aggregates += stream.aggregates.iter().map(|a| a.0).sum::<u64>();
            self.totals.dropped += stream.dropped.0;
        }
        Ok(())
    }

    fn snapshot_all(&mut self) -> io::Result<()> {
        let Drainer { streams, segment, timebase, writer, aggregate_samples, .. } = self;
        for (&index, stream) in streams.iter_mut() {
            stream.snapshot(segment.view(), index, timebase, writer, aggregate_samples)?;
        }
        let no_lane = self.segment.view().header().no_lane_drops_total();
        if no_lane != self.no_lane_drops {
            self.no_lane_drops = no_lane;
            let time_ns = crate::timebase::monotonic_ns();
            self.writer.write_drops(&[DropSample {
                stream: 0,
                pid: 0,
                tid: 0,
                time_ns,
                dropped: no_lane,
                interrupted: 0,
            }])?;
        }
        Ok(())
    }

    /// Writes the counters of lane `index`'s stream that changed since its last snapshot.
    fn snapshot_stream(&mut self, index: u32) -> io::Result<()> {
        let Drainer { streams, segment, timebase, writer, aggregate_samples, .. } = self;
        match streams.get_mut(&index) {
            Some(stream) => stream.snapshot(segment.view(), index, timebase, writer, aggregate_samples),
            None => Ok(()),
        }
    }

    /// Records how a process ended, as the launcher's waitpid (its child) or the zombie's
    /// /proc entry (a descendant killed by a signal) says.
    pub fn record_exit(&mut self, pid: u32, exit_code: Option<i32>, signal: Option<i32>) -> io::Result<()> {
        self.exits.insert(pid);
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
        self.write_processes(true)?;
        let held = std::mem::take(&mut self.waiting_for_path);
        self.batch.extend(held);
        self.write_batch()?;
        self.snapshot_all()?;
        self.totals.aggregated_calls = self.final_aggregates;
        self.totals.dropped += self.no_lane_drops;
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
