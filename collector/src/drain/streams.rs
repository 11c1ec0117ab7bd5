//! The streams: one per claim of a lane by a thread, opened when the drain first sees the
//! claim (the thread named in the run file, or its records refused: another user's) and closed
//! when the lane is freed, and the snapshots of their counters (aggregated calls, drops).

use rustc_hash::FxHashMap as HashMap;
use std::io;
use std::sync::atomic::Ordering;
use std::time::Instant;

use mlprof_filewrite::BackgroundFile;
use mlprof_format::func::{AGG_SLOTS, agg_slot_meaning};
use mlprof_format::ring::lane_generation;
use mlprof_format::runfile::{AggregateSample, DropSample, RunWriter, ThreadInfo};

use super::procfs::owner_uid;
use super::{DrainedRing, Drainer};
use crate::timebase::Timebase;

/// The streams of the lanes in use, by lane index, and what outlives them.
pub(super) struct Streams {
    pub(super) by_lane: HashMap<u32, Stream>,
    /// The id of the next stream (0 stands for the threads without a lane).
    next_id: u64,
    /// Our effective uid: the records of lanes claimed as another user are refused.
    uid: u32,
    /// The aggregate samples of one stream's snapshot (kept: a pass allocates nothing).
    aggregate_samples: Vec<AggregateSample>,
    /// The header's count of records of threads that found no lane, as last written.
    no_lane_drops: u64,
    /// Calls the closed streams aggregated.
    pub(super) final_aggregates: u64,
}

impl Streams {
    pub(super) fn new() -> Streams {
        Streams {
            by_lane: HashMap::default(),
            next_id: 1,
            // Safety: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            aggregate_samples: Vec::new(),
            no_lane_drops: 0,
            final_aggregates: 0,
        }
    }

    /// Records of threads that found no lane, as last written.
    pub(super) fn no_lane_drops(&self) -> u64 {
        self.no_lane_drops
    }
}

/// One claim of one lane by one thread.
pub(super) struct Stream {
    id: u64,
    generation: u32,
    pub(super) pid: u32,
    pub(super) tid: u32,
    /// The process image the thread belongs to (see `Lane::image`).
    pub(super) image: u64,
    /// When the collector first saw the claim.
    pub(super) opened: Instant,
    pub(super) refused: bool,
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

impl<R: DrainedRing> Drainer<R> {
    /// Opens the stream of lane `index`'s claim, unless open: names its thread in the run file,
    /// or refuses its records when another user claimed it.
    pub(super) fn open_stream(&mut self, index: u32) -> io::Result<()> {
        let lane = self.lane(index);
        let generation = lane_generation(lane.state.load(Ordering::Acquire));
        if self.streams.by_lane.get(&index).is_some_and(|s| s.generation == generation) {
            return Ok(());
        }
        if self.streams.by_lane.contains_key(&index) {
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
        let refused =
            claimed_uid != self.streams.uid || owner_uid(pid).is_some_and(|uid| uid != self.streams.uid);
        if refused {
            eprintln!("mlprof-collect: refusing records of pid {pid}: it belongs to another user");
        }
        let stream = Stream {
            id: self.streams.next_id,
            generation,
            pid,
            tid,
            image,
            opened: Instant::now(),
            refused,
            aggregates: [(0, 0, 0); AGG_SLOTS],
            dropped: (0, 0),
        };
        self.streams.next_id += 1;
        self.totals.threads += 1;
        if !refused {
            let name = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_default();
            self.writer.write_thread(&ThreadInfo { pid, tid, name })?;
        }
        self.streams.by_lane.insert(index, stream);
        Ok(())
    }

    /// Final counters of a lane's stream, then the lane is zeroed and freed for reuse.
    pub(super) fn close_stream(&mut self, index: u32) -> io::Result<()> {
        self.close_stream_counters(index)?;
        self.segment.view().free(index);
        self.segment.lane_freed();
        Ok(())
    }

    /// Final counters of a lane's stream, which ends (the lane stays as it is).
    pub(super) fn close_stream_counters(&mut self, index: u32) -> io::Result<()> {
        self.snapshot_stream(index)?;
        if let Some(stream) = self.streams.by_lane.remove(&index) {
            self.streams.final_aggregates += stream.aggregates.iter().map(|a| a.0).sum::<u64>();
            self.totals.dropped += stream.dropped.0;
        }
        Ok(())
    }

    /// Writes the counters that changed since their last snapshot: every stream's, and the
    /// drops of threads that found no lane.
    pub(super) fn snapshot_all(&mut self) -> io::Result<()> {
        let Drainer { streams, segment, timebase, writer, .. } = self;
        for (&index, stream) in streams.by_lane.iter_mut() {
            stream.snapshot(segment.view(), index, timebase, writer, &mut streams.aggregate_samples)?;
        }
        let no_lane = self.segment.view().header().no_lane_drops_total();
        if no_lane != self.streams.no_lane_drops {
            self.streams.no_lane_drops = no_lane;
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
        let Drainer { streams, segment, timebase, writer, .. } = self;
        match streams.by_lane.get_mut(&index) {
            Some(stream) => {
                stream.snapshot(segment.view(), index, timebase, writer, &mut streams.aggregate_samples)
            }
            None => Ok(()),
        }
    }
}
