//! Liveness: frees the lanes whose owners are gone without retiring them (a process killed by a
//! signal, a thread that left with a raw `exit`), the lanes of process images that exec
//! replaced, and claims abandoned half-way; records how a killed process ended, from its
//! zombie.

use rustc_hash::FxHashMap as HashMap;
use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mlprof_format::ring::{LANE_ACTIVE, LANE_CLAIMING, lane_state};

use super::procfs::{process_exists, thread_alive, zombie_exit};
use super::{DrainedRing, Drainer};

/// How often a pass checks whether the lanes' owners still exist.
pub(super) const LIVENESS_EVERY: Duration = Duration::from_millis(100);
/// Every how many liveness checks each recording thread is asked whether it still exists, and
/// a leader whether it is a zombie; the checks between ask each process once (see
/// `free_dead_lanes`).
const THREAD_CHECK_EVERY: u32 = 10;

/// What the liveness checks keep between them.
pub(super) struct Liveness {
    /// When the last check was made.
    pub(super) last: Instant,
    /// Liveness checks made (see `free_dead_lanes`).
    checks: u32,
    /// Processes known in the current liveness check (asked about, or the launched command),
    /// and whether they exist (kept: a check allocates nothing).
    processes_seen: Vec<(u32, bool)>,
    /// Lanes seen `CLAIMING` at the last liveness check, with their state word: a lane still
    /// holding the same word a period later was abandoned by a killed claimer.
    claiming: HashMap<u32, u32>,
    /// The launched command's pid until the launcher reaps it: `waitpid` tells its end, so its
    /// leader needs no zombie check through /proc, and it exists meanwhile.
    pub(super) launched: Option<u32>,
    /// The process images announced, to tell which lanes belong to images exec replaced.
    pub(super) images: Images,
}

/// The process images that announced themselves.
#[derive(Default)]
pub(super) struct Images {
    /// Process images that announced themselves without a fork (a program started or exec'd)
    /// during this pass: pid → (start time, image), the latest per pid (a pass can see several
    /// images of one pid: an exec chain). Lanes of any other image of that pid are freed.
    new: HashMap<u32, (u64, u64)>,
    /// The latest image announced by each pid.
    current: HashMap<u32, u64>,
}

impl Images {
    /// Image `image` of process `pid` started at `start_ns` (not a fork: a program started or
    /// exec'd).
    #[inline]
    pub(super) fn announce(&mut self, pid: u32, start_ns: u64, image: u64) {
        let latest = self.new.entry(pid).or_insert((start_ns, image));
        if start_ns >= latest.0 {
            *latest = (start_ns, image);
        }
    }
}

impl Liveness {
    pub(super) fn new(now: Instant) -> Liveness {
        Liveness {
            last: now,
            checks: 0,
            processes_seen: Vec::new(),
            claiming: HashMap::default(),
            launched: None,
            images: Images::default(),
        }
    }

    /// Whether the owner of an `ACTIVE` lane, thread `tid` of `pid`, still exists: with
    /// `threads`, the thread itself (and whether a leader is a zombie); else its process, asked
    /// once per check (`processes` holds the answers so far).
    fn owner_alive(&self, pid: u32, tid: u32, threads: bool, processes: &mut Vec<(u32, bool)>) -> bool {
        if threads {
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
        }
    }
}

impl<R: DrainedRing> Drainer<R> {
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
    pub(super) fn free_dead_lanes(&mut self) -> io::Result<()> {
        self.liveness.checks = self.liveness.checks.wrapping_add(1);
        let threads = self.liveness.checks.is_multiple_of(THREAD_CHECK_EVERY);
        let mut processes = std::mem::take(&mut self.liveness.processes_seen);
        processes.clear();
        // Our child exists until the launcher reaps it (its pid cannot be reused before): known
        // without a `kill` to ask, ~10 µs under this kernel's BPF LSM hooks.
        processes.extend(self.liveness.launched.map(|pid| (pid, true)));
        let mut claiming = HashMap::default();
        // The pass's look at the lanes: a claim abandoned half-way (never counted) is among
        // them after the next look at every lane, and taken back a check later.
        for at in 0..self.lanes.indexes.len() {
            let index = self.lanes.indexes[at];
            let lane = self.lane(index);
            let word = lane.state.load(Ordering::Acquire);
            match lane_state(word) {
                LANE_CLAIMING => {
                    self.take_back_stale_claim(index, word, &mut claiming);
                    continue;
                }
                LANE_ACTIVE => {}
                _ => continue,
            }
            let (pid, tid) = (lane.pid.load(Ordering::Relaxed), lane.tid.load(Ordering::Relaxed));
            if !self.liveness.owner_alive(pid, tid, threads, &mut processes) {
                self.free_dead_lane(index, pid)?;
            }
        }
        self.liveness.claiming = claiming;
        self.liveness.processes_seen = processes;
        self.free_stale_images()?;
        self.write_batch()
    }

    /// Takes back lane `index`, seen `CLAIMING` with state word `word`, if it held the same
    /// word at the last check; else notes it in `claiming` for the next.
    fn take_back_stale_claim(&mut self, index: u32, word: u32, claiming: &mut HashMap<u32, u32>) {
        if self.liveness.claiming.get(&index) == Some(&word) {
            self.segment.view().reclaim_stale_claim(index, word);
            self.segment.lane_freed();
        } else {
            claiming.insert(index, word);
        }
    }

    /// Frees lane `index`, whose owner (of process `pid`) is gone: drained first; the process's
    /// exit recorded from its zombie, if no hook recorded it.
    fn free_dead_lane(&mut self, index: u32, pid: u32) -> io::Result<()> {
        self.open_stream(index)?;
        self.drain_lane(index)?;
        self.close_stream(index)?;
        if !self.metadata.exits.contains(&pid)
            && let Some((exit_code, signal)) = zombie_exit(pid)
        {
            self.record_exit(pid, exit_code, signal)?;
        }
        Ok(())
    }

    /// Frees a lane of an older image that the collector first saw after the newer image
    /// announced itself: after a liveness period it cannot be a newer image's lane whose
    /// announcement is still on its way, so it is the replaced image's.
    fn free_stale_images(&mut self) -> io::Result<()> {
        let current = &self.liveness.images.current;
        let stale: Vec<u32> = self
            .streams
            .by_lane
            .iter()
            .filter(|(_, s)| {
                current.get(&s.pid).is_some_and(|&image| image != s.image)
                    && s.opened.elapsed() >= LIVENESS_EVERY
            })
            .map(|(&index, _)| index)
            .collect();
        for index in stale {
            self.drain_lane(index)?;
            self.close_stream(index)?;
        }
        Ok(())
    }

    /// Frees the lanes of process images that exec replaced: a thread of the old image can no
    /// longer write (exec ends every thread but the caller, and the caller's new image has a
    /// new thread state), but its lane stays `ACTIVE` with a live pid and tid.
    pub(super) fn free_replaced_images(&mut self) -> io::Result<()> {
        let images = &mut self.liveness.images;
        if images.new.is_empty() {
            return Ok(());
        }
        let new_images = std::mem::take(&mut images.new);
        images.current.extend(new_images.iter().map(|(&pid, &(_, image))| (pid, image)));
        let replaced: Vec<u32> = self
            .streams
            .by_lane
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
}

#[cfg(test)]
mod tests;
