//! One drain pass: the lanes in use taken in rounds, each round's events written as one frame
//! in end-time order; then what follows a pass (retired lanes freed, the lanes of replaced
//! images freed, spare lanes backed) and the periodic jobs (liveness, counter snapshots,
//! flushes).

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mlprof_format::ring::{LANE_ACTIVE, LANE_RETIRED, lane_state};

use super::liveness::LIVENESS_EVERY;
use super::step::{StepEnd, StepLimits};
use super::{BATCH_EVENTS, DrainedRing, Drainer};

/// How often a pass snapshots the counters (and takes a new anchor of the TSC timebase).
const SNAPSHOT_EVERY: Duration = Duration::from_millis(100);
/// How long records may wait in the collector's partial chunk before they are written (by
/// this thread where the chunk is small, else by the writer thread). A chunk fills and goes at
/// once at high rates; at a job's everyday rates (a thousand calls a second is 64 KB) waking
/// the writer thread every pass cost two context switches and a lock hand-off per pass, a
/// sixth of the idle collector's CPU. Between flushes a pass that gathered enough writes them
/// itself (`BackgroundFile::write_small_now` says how much).
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// A lane in a drain pass.
struct PassLane {
    index: u32,
    /// Its owner had exited when the pass began: the lane is freed after it.
    retired: bool,
    /// Its records wait for the paths and call sites other lanes deliver, unless no lane got
    /// further in a whole round (the definition was lost: then they are held aside, as between
    /// passes).
    hold: bool,
    /// Its last step stopped before a record whose path or call site was not defined yet.
    waiting: bool,
    /// Events it added to the batch in this round.
    in_round: usize,
    /// The lane's `head` when the pass began: the pass takes the records up to there.
    until: u64,
    /// Records taken in this pass.
    taken: usize,
    done: bool,
}

/// What passes keep between them.
pub(super) struct Pass {
    /// The lanes of the current pass (kept: a pass allocates nothing).
    lanes: Vec<PassLane>,
    /// Records taken from the fullest lane in the last pass (what the next sleep is sized by).
    pub(super) busiest: usize,
    last_snapshot: Instant,
    last_flush: Instant,
}

impl Pass {
    pub(super) fn new(now: Instant) -> Pass {
        Pass { lanes: Vec::new(), busiest: 0, last_snapshot: now, last_flush: now }
    }
}

impl<R: DrainedRing> Drainer<R> {
    /// One pass over all lanes; returns the number of records taken.
    pub fn drain_once(&mut self) -> io::Result<usize> {
        self.segment.heartbeat(self.timebase.now());
        let mut lanes = std::mem::take(&mut self.pass.lanes);
        lanes.clear();
        let looked_at_all = self.lanes.look(self.segment.view(), self.segment.geometry().lane_count);
        self.begin_pass(&mut lanes)?;
        self.drain_in_rounds(&mut lanes)?;
        let taken = self.end_pass(&lanes)?;
        self.pass.lanes = lanes;
        self.after_pass(looked_at_all)?;
        Ok(taken)
    }

    /// The lanes the pass takes: those `ACTIVE` or `RETIRED` among the lanes in use, each up to
    /// its head now, their streams open (a lane whose owner could not grow it, grown).
    fn begin_pass(&mut self, lanes: &mut Vec<PassLane>) -> io::Result<()> {
        for at in 0..self.lanes.indexes.len() {
            let index = self.lanes.indexes[at];
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
        Ok(())
    }

    /// Takes the pass's lanes in rounds until each gave what it had published when the pass
    /// began, writing each round's events as a frame.
    fn drain_in_rounds(&mut self, lanes: &mut [PassLane]) -> io::Result<()> {
        // In rounds: each lane adds its share of a batch, then the batch is written, until
        // every lane gave what it had published when the pass began. So a frame holds every
        // busy thread's records over the same stretch of time, in end-time order, as when a
        // pass was one frame; and a lane that keeps filling cannot hold the pass forever.
        // A round takes the records that end by a common time (the earliest, among the lanes,
        // of the end of the record their share reaches), so frames also follow each other in
        // time across threads (readers stream fd histories in file order). A thread's records
        // reach the file in its lane's order: one naming a path or call site that another lane
        // defines stops its lane until that lane got there (readers build a thread's slices in
        // arrival order); such lanes get a second sweep in the same round.
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
            let progress = self.round(lanes, share, cut, capacity)?;
            if !progress {
                if lanes.iter().any(|lane| lane.waiting) {
                    // The paths or sites they wait for come after records past the round's
                    // time, or were lost: those records wait aside, as between passes.
                    lanes.iter_mut().filter(|lane| lane.waiting).for_each(|lane| lane.hold = false);
                } else {
                    // Records out of end order at the lanes' heads: one round by count alone.
                    timed = false;
                }
            }
            self.release_waiting();
            self.write_events()?;
        }
        Ok(())
    }

    /// One round: every lane adds up to `share` events that end by `cut` (lanes of `capacity`
    /// records), and the lanes that stopped for a path another lane delivers get a second
    /// sweep. Whether any lane not done got further.
    fn round(
        &mut self,
        lanes: &mut [PassLane],
        share: usize,
        cut: Option<u64>,
        capacity: usize,
    ) -> io::Result<bool> {
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
                lane.waiting = step.end == StepEnd::NeedsDefinition;
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
        Ok(progress)
    }

    /// Frees the lanes retired when the pass began (drained of what came since), and notes the
    /// busiest lane; returns the records the pass took.
    fn end_pass(&mut self, lanes: &[PassLane]) -> io::Result<usize> {
        let (mut taken, mut busiest) = (0, 0);
        for lane in lanes {
            taken += lane.taken;
            busiest = busiest.max(lane.taken);
            if lane.retired {
                // What the owner left after the pass began (nothing: it had exited).
                self.drain_lane(lane.index)?;
                self.close_stream(lane.index)?;
            }
        }
        self.pass.busiest = busiest;
        Ok(taken)
    }

    /// What follows a pass: the lanes of images exec replaced freed, the rest of the batch
    /// written, spare lanes backed (`looked_at_all`: the pass read every lane's state), and the
    /// periodic jobs that are due.
    fn after_pass(&mut self, looked_at_all: bool) -> io::Result<()> {
        self.free_replaced_images()?;
        self.write_batch()?;
        if self.offer_lanes
            && let Some(message) = self.segment.replenish(self.is_busy(), looked_at_all)
            && !self.quiet
        {
            eprintln!("mlprof-collect: warning: {message}");
        }
        let now = Instant::now();
        if now.duration_since(self.liveness.last) >= LIVENESS_EVERY {
            self.liveness.last = now;
            self.free_dead_lanes()?;
        }
        if now.duration_since(self.pass.last_snapshot) >= SNAPSHOT_EVERY {
            self.pass.last_snapshot = now;
            self.timebase.refresh();
            self.snapshot_all()?;
        }
        if now.duration_since(self.pass.last_flush) >= FLUSH_EVERY {
            self.pass.last_flush = now;
            self.writer.flush()?;
        } else {
            // A pass's records at everyday rates go out now, from this thread, through a chunk
            // whose pages stay hot (see `BackgroundFile::write_small_now`).
            self.writer.get_mut().write_small_now()?;
        }
        Ok(())
    }
}
