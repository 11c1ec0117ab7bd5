//! The consumer: drains every lane of the ring into `run.bin`, turns control records into
//! metadata frames, snapshots the per-thread aggregates and drop counters, and frees the lanes of
//! threads that exited or died. Everything read from the segment is validated: a producer can
//! lose its own records, never crash the collector.

use std::collections::{HashMap, HashSet};
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
mod strings;

use procfs::{owner_uid, thread_alive, zombie_exit};
use strings::{Strings, split_argv};

const SNAPSHOT_EVERY: Duration = Duration::from_millis(100);
const LIVENESS_EVERY: Duration = Duration::from_millis(100);
/// Every how many liveness checks a leader thread is asked whether it is a zombie.
const ZOMBIE_CHECK_EVERY: u32 = 10;
/// How long records may wait in the collector's partial chunk before the writer thread gets
/// it. A chunk fills and goes at once at high rates; at a job's everyday rates (a thousand
/// calls a second is 64 KB) waking the writer thread every pass cost two context switches and
/// a lock hand-off per pass, a sixth of the idle collector's CPU.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// String bytes kept in memory to name processes (ids are kept for every string).
const STRING_MEMORY_LIMIT: usize = 64 << 20;

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

pub struct Drainer {
    segment: Segment,
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
    /// Rank records waiting for the process start that follows them on the same lane (a
    /// pass can end between the two).
    pending_ranks: HashMap<u32, RankInfo>,
    quiet: bool,
    /// Records taken from the fullest lane in the last pass (what the next sleep is sized by).
    busiest_lane: usize,
    pub totals: Totals,
}

impl Drainer {
    pub fn new(
        segment: Segment,
        timebase: Timebase,
        writer: RunWriter<BackgroundFile>,
        quiet: bool,
    ) -> Drainer {
        let now = Instant::now();
        Drainer {
            segment,
            timebase,
            writer,
            streams: HashMap::new(),
            next_stream: 1,
            strings: Strings::default(),
            batch: Vec::with_capacity(1 << 16),
            waiting_for_path: Vec::new(),
            waiting_for_argv: Vec::new(),
            consumer: LaneConsumer::new(),
            last_snapshot: now,
            last_liveness: now,
            liveness_checks: 0,
            offer_lanes: true,
            last_flush: now,
            no_lane_drops: 0,
            final_aggregates: 0,
            // Safety: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            new_images: HashMap::new(),
            current_images: HashMap::new(),
            claiming: HashMap::new(),
            exits: HashSet::new(),
            pending_ranks: HashMap::new(),
            quiet,
            busiest_lane: 0,
            totals: Totals::default(),
        }
    }

    fn lane(&self, index: u32) -> &mlprof_format::ring::Lane {
        // Callers iterate 0..lane_count.
        self.segment.view().lane(index).expect("lane index within the ring")
    }

    pub fn segment_mut(&mut self) -> &mut Segment {
        &mut self.segment
    }

    pub fn segment(&self) -> &Segment {
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
        let eighth = self.segment.geometry.lane_capacity as f64 / 8.0;
        let rate = self.busiest_lane as f64 / elapsed.as_secs_f64().max(1e-6);
        let seconds = if rate > 0.0 { eighth / rate } else { f64::INFINITY };
        Duration::from_secs_f64(seconds.clamp(0.001, 0.1))
    }

    /// Whether the last pass took a quarter of a lane or more from one lane: a producer
    /// outran the planned sleep (a burst; a steady rate takes about an eighth a pass).
    fn is_busy(&self) -> bool {
        self.busiest_lane as u64 >= self.segment.geometry.lane_capacity as u64 / 4
    }

    /// The run file, for the frames of the energy sampler.
    pub fn writer_mut(&mut self) -> &mut RunWriter<BackgroundFile> {
        &mut self.writer
    }

    /// One pass over all lanes; returns the number of records taken.
    pub fn drain_once(&mut self) -> io::Result<usize> {
        self.segment.heartbeat(self.timebase.now());
        let mut taken = 0;
        let mut busiest = 0;
        for index in 0..self.segment.geometry.lane_count {
            let word = self.lane(index).state.load(Ordering::Acquire);
            let state = lane_state(word);
            if state != LANE_ACTIVE && state != LANE_RETIRED {
                continue;
            }
            self.open_stream(index)?;
            let from_lane = self.drain_lane(index)?;
            taken += from_lane;
            busiest = busiest.max(from_lane);
            if state == LANE_RETIRED {
                self.close_stream(index)?;
            }
        }
        self.busiest_lane = busiest;
        self.free_replaced_images()?;
        self.write_batch()?;
        if self.offer_lanes
            && let Some(message) = self.segment.replenish(self.is_busy())
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
        }
        Ok(taken)
    }

    /// Stops backing spare lanes: the launched command has ended (or recording is ending),
    /// and backing a lane only to free it at exit costs ~3 ms of CPU per 4 MiB lane (zeroing
    /// and freeing its pages). That was a third of a short run's fixed cost: the pass after
    /// the command's exit backed two spares for the thread it had just lost. Lanes already
    /// backed stay on offer to whatever the command left behind.
    pub fn stop_offering_lanes(&mut self) {
        self.offer_lanes = false;
    }

    /// Whether some lane still belongs to a live thread.
    pub fn has_live_lanes(&self) -> bool {
        (0..self.segment.geometry.lane_count).any(|i| {
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

    /// One consumer step on lane `index` (see [`LaneConsumer::drain`]): the records become
    /// events of the pass's batch, strings and metadata frames; a refused stream's are only
    /// counted. Returns the number of records taken.
    fn drain_lane(&mut self, index: u32) -> io::Result<usize> {
        let Some(stream) = self.streams.get(&index) else {
            return Ok(0);
        };
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
        let drained = consumer.drain(segment.view(), index, |item| {
            if refused {
                totals.refused_records += 1;
                return Ok(());
            }
            let mut event = match item {
                LaneItem::String { id, bytes } => return strings.define(writer, id, bytes),
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
                _ => {
                    event.pid = pid;
                    event.tid = tid;
                    event.start = timebase.to_ns(event.start);
                    event.dur = timebase.duration_ns(event.dur);
                    let needs_path = event.arg2 != 0 && Func::kind_has_path(event.kind);
                    if needs_path && !strings.is_known(event.arg2) {
                        waiting_for_path.push(event);
                    } else {
                        batch.push(event);
                    }
                }
            }
            Ok(())
        })?;
        if let Drained::CorruptPositions { tail, head } = drained {
            self.totals.corrupt_lanes += 1;
            eprintln!(
                "mlprof-collect: lane {index} has inconsistent positions ({tail}..{head}); skipping its records"
            );
        }
        Ok(drained.taken())
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

impl Drainer {
    /// Writes the pass's events in end-time order, and any held events whose path is now known.
    fn write_batch(&mut self) -> io::Result<()> {
        self.write_processes(false)?;
        if !self.waiting_for_path.is_empty() {
            let strings = &self.strings;
            let (ready, still): (Vec<Event>, Vec<Event>) =
                self.waiting_for_path.drain(..).partition(|e| strings.is_known(e.arg2));
            self.waiting_for_path = still;
            self.batch.extend(ready);
        }
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
    fn free_dead_lanes(&mut self) -> io::Result<()> {
        // A process leader that exists may be a zombie; /proc tells, at a cost: every tenth
        // check (once a second) is enough for a process that ended without retiring its lanes.
        self.liveness_checks = self.liveness_checks.wrapping_add(1);
        let zombies = self.liveness_checks.is_multiple_of(ZOMBIE_CHECK_EVERY);
        let mut claiming = HashMap::new();
        for index in 0..self.segment.geometry.lane_count {
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
            if thread_alive(pid, tid, zombies) {
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
        let indexes: Vec<u32> = self.streams.keys().copied().collect();
        for index in indexes {
            self.snapshot_stream(index)?;
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

    /// Writes the stream's counters that changed since its last snapshot.
    fn snapshot_stream(&mut self, index: u32) -> io::Result<()> {
        let Some(stream) = self.streams.get_mut(&index) else {
            return Ok(());
        };
        if stream.refused {
            return Ok(());
        }
        let Some(lane) = self.segment.view().lane(index) else {
            return Ok(());
        };
        let time_ns = crate::timebase::monotonic_ns();
        let mut samples = Vec::new();
        for (slot, counters) in lane.aggregates.iter().enumerate() {
            let now = (
                counters.count.load(Ordering::Relaxed),
                counters.timed.load(Ordering::Relaxed),
                counters.ticks.load(Ordering::Relaxed),
            );
            if now == stream.aggregates[slot] {
                continue;
            }
            stream.aggregates[slot] = now;
            let Some((func, clock_id)) = agg_slot_meaning(slot) else {
                continue;
            };
            samples.push(AggregateSample {
                stream: stream.id,
                pid: stream.pid,
                tid: stream.tid,
                func: func as u16,
                clock_id,
                time_ns,
                count: now.0,
                timed: now.1,
                timed_ns: self.timebase.duration_ns(now.2),
            });
        }
        if !samples.is_empty() {
            self.writer.write_aggregates(&samples)?;
        }
        let interrupted = lane.interrupted.load(Ordering::Relaxed);
        let dropped = lane.dropped.load(Ordering::Relaxed).wrapping_add(interrupted);
        if (dropped, interrupted) != stream.dropped {
            stream.dropped = (dropped, interrupted);
            let sample = DropSample {
                stream: stream.id,
                pid: stream.pid,
                tid: stream.tid,
                time_ns,
                dropped,
                interrupted,
            };
            self.writer.write_drops(&[sample])?;
        }
        Ok(())
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
        for index in 0..self.segment.geometry.lane_count {
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
