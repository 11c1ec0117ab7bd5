//! The shared-memory segment: a file in the shm directory (`$MLPROF_SHM_DIR`, else `/dev/shm`,
//! where `shm_open` puts its objects), private to the user (0600), created under a temporary
//! name, initialized and renamed into place (so no producer ever maps half a header), and
//! unlinked when the collector finishes.
//!
//! Memory is backed before anyone may write it: the header and lane blocks when the segment is
//! made, a lane's first slots (`fallocate`) before the lane is offered to producers, and more of
//! them, doubling, as its owner's head gets there (by the owner itself, `MADV_POPULATE_WRITE`,
//! or, for an owner that could not, by the collector's pass half-way before). A producer
//! writing into a sparse tmpfs page that the filesystem cannot back would be killed by SIGBUS
//! (Docker gives /dev/shm 64 MiB); here a lane that cannot be backed is simply never offered,
//! and the records of threads that find no lane are counted as dropped.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use mlprof_format::ring::{
    LANE_FREE, LANE_OPEN, LANE_UNBACKED, RING_CLOSED, RingGeometry, RingHeader, RingView, grown_backing,
    lane_state,
};

use crate::shared_map::SharedMapping;

mod leftovers;
mod taken;

pub use leftovers::{check_existing, sweep_leftover_segments};
pub use taken::{create_error, foreign_owner, taken_message};

/// Where segments live: `$MLPROF_SHM_DIR`, else `/dev/shm`.
pub fn shm_dir() -> PathBuf {
    std::env::var_os("MLPROF_SHM_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| "/dev/shm".into())
}

/// Lanes kept backed and free beyond those in use, so that new threads find one at once (a
/// thread that finds none backs an open lane itself, or, when memory is short, waits for the
/// collector, its records counted as dropped meanwhile).
const SPARE_LANES: u32 = 4;

/// Spare lanes wanted while `in_use` lanes are taken: one more than in use, up to
/// `SPARE_LANES`. A 4 MiB lane that a thread fills costs ~3 ms of kernel time (its pages
/// zeroed when first touched, and freed), so a job that records from one thread should not
/// pay for four: the spares grow as threads arrive (measured with bench/rate_cost.py;
/// BENCHMARKS.md).
///
/// While the collector is `busy` (its last pass took much from a lane), one spare only: a
/// pass that backs lanes drains nothing meanwhile, and in a burst on two busy CPUs the first
/// passes backed three spares for the threads that had just started (~10 ms of wall time)
/// while their lanes filled and dropped. The rest are backed once the burst is over.
///
/// (Three spares before the first thread, instead of one, helped while a burst's first
/// passes were slow; since a pass writes small frames they no longer do, and they cost every
/// run 1.6 ms of CPU: BENCHMARKS.md, "The burst, third time".)
fn spare_lanes_wanted(in_use: u32, busy: bool) -> u32 {
    if busy { 1 } else { in_use.saturating_add(1).min(SPARE_LANES) }
}

/// How the ring is sized for the memory the shm filesystem has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The geometry to create.
    pub geometry: RingGeometry,
    /// At most this many lanes are backed (and so in use) at once.
    pub max_backed_lanes: u32,
    /// What was cut and how to avoid it, when the requested ring did not fit.
    pub note: Option<String>,
}

/// Smallest lane the plan shrinks to (4096 records, 256 KiB): below it a busy thread fills its
/// lane between two collector passes.
const MIN_LANE_RECORDS: u32 = 4096;
/// Lanes the plan tries to keep when it has to shrink them.
const WANTED_LANES: u32 = 64;

/// Sizes the ring for `free` bytes of shm filesystem: it may take a quarter of them (the job
/// itself needs shared memory, e.g. for DataLoader tensors). Keeps the requested geometry when
/// every lane fits; else makes lanes smaller (not below 4096 records) so that up to 64 fit,
/// and limits how many are backed at once. `Err` when not even the header and one lane fit.
pub fn plan(requested: RingGeometry, free: u64, dir: &Path) -> Result<Plan, String> {
    let budget = free / 4;
    let control = requested.slots_offset();
    let lane_bytes = |capacity: u32| capacity as u64 * mlprof_format::record::RECORD_BYTES as u64;
    let fits = |capacity: u32| budget.saturating_sub(control) / lane_bytes(capacity);
    if fits(requested.lane_capacity) >= requested.lane_count as u64 {
        return Ok(Plan { geometry: requested, max_backed_lanes: requested.lane_count, note: None });
    }
    let wanted = requested.lane_count.min(WANTED_LANES) as u64;
    let mut capacity = requested.lane_capacity;
    while capacity > MIN_LANE_RECORDS && fits(capacity) < wanted {
        capacity /= 2;
    }
    let lanes = fits(capacity).min(requested.lane_count as u64) as u32;
    let advice = "give the job more shared memory (docker run --shm-size=1g or --ipc=host; Kubernetes: \
                  an emptyDir with medium: Memory mounted on /dev/shm) or point MLPROF_SHM_DIR at a \
                  larger tmpfs";
    if lanes == 0 {
        return Err(format!(
            "{} has {} free, too little for even one lane of the ring; {advice}",
            dir.display(),
            human_bytes(free)
        ));
    }
    let geometry = RingGeometry { lane_count: requested.lane_count, lane_capacity: capacity };
    let note = format!(
        "{} has {} free: mlprof uses at most a quarter, so the ring holds {} record(s) per thread \
         ({} each) and at most {lanes} thread(s) record at once; records of threads beyond that are \
         counted as dropped. To avoid this, {advice}",
        dir.display(),
        human_bytes(free),
        capacity,
        human_bytes(lane_bytes(capacity)),
    );
    Ok(Plan { geometry, max_backed_lanes: lanes, note: Some(note) })
}

fn human_bytes(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// Free bytes of the filesystem holding `dir` (what an unprivileged user may still allocate).
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    let c_dir =
        CString::new(dir.as_os_str().as_bytes()).map_err(|_| io::Error::other("path contains NUL"))?;
    // Safety: statvfs writes into a zeroed struct; the path is a valid C string.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // Safety: as above.
    if unsafe { libc::statvfs(c_dir.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.f_bavail as u64 * stat.f_frsize as u64)
}

pub struct Segment {
    path: PathBuf,
    file: File,
    /// The whole file; the view points into it (dropped after `Drop for Segment` has run).
    mapping: SharedMapping,
    pub geometry: RingGeometry,
    view: RingView,
    unlinked: bool,
    /// At most this many lanes are backed at once (the plan's limit).
    max_backed: u32,
    /// The filesystem has room for the whole ring: lanes not backed yet are open to producers
    /// that back them themselves.
    open_lanes: bool,
    /// Backing a lane failed (the filesystem is full): said once, not retried until a lane is
    /// freed.
    backing_failed: bool,
    /// Records of a lane backed before it is offered: the first part
    /// ([`RingGeometry::first_backed`]) where producers can back more themselves
    /// (`MADV_POPULATE_WRITE`), else the whole lane.
    first_backed: u64,
    /// The busy flag when `replenish` last looked at the lanes; `None` once a lane was freed
    /// since (or before the first look). While it holds and no lane was claimed (the drain
    /// says), nothing `replenish` counts has changed but what it did itself.
    replenished_busy: Option<bool>,
}

impl Segment {
    /// Creates the segment `name` (e.g. `mlprof-1000-default`) in `dir`, failing if it exists,
    /// with the header and lane blocks backed and a few lanes offered.
    pub fn create(
        dir: &Path,
        name: &str,
        plan: &Plan,
        clock_source: u32,
        check_period: u64,
        capture: mlprof_format::ring::CapturePlan,
    ) -> io::Result<Segment> {
        let geometry = plan.geometry;
        let path = dir.join(name);
        let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&temporary);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&temporary)?;
        let unlink_temporary = |err: io::Error| {
            let _ = std::fs::remove_file(&temporary);
            err
        };
        let len = geometry.total_bytes() as usize;
        file.set_len(len as u64).map_err(unlink_temporary)?;
        allocate(&file, 0, geometry.slots_offset()).map_err(unlink_temporary)?;
        // The whole file we just sized.
        let mapping = SharedMapping::new(file.as_fd(), len).map_err(unlink_temporary)?;
        let base = mapping.base();
        // Safety: the mapping is fresh, zero-filled, page aligned and sized for the geometry;
        // nobody else can see it before the rename below.
        let view = unsafe {
            RingView::initialize(
                base,
                geometry,
                clock_source,
                libc::geteuid(),
                std::process::id(),
                check_period,
            );
            RingView::new(base, geometry)
        };
        // Producers grow their lanes with the advice the collector tries here, on the header's
        // first page (backed above): a kernel without it (before 5.14) gets whole lanes.
        // Safety: the page lies in our mapping and is backed; populating it changes nothing.
        let can_grow =
            unsafe { libc::madvise(base as *mut libc::c_void, 4096, libc::MADV_POPULATE_WRITE) } == 0;
        let first_backed = if can_grow { geometry.first_backed() } else { geometry.lane_capacity as u64 };
        let mut segment = Segment {
            path,
            file,
            mapping,
            geometry,
            view,
            unlinked: true,
            max_backed: plan.max_backed_lanes,
            open_lanes: plan.note.is_none(),
            backing_failed: false,
            first_backed,
            replenished_busy: None,
        };
        segment.replenish(false, true);
        // Before anyone can see the ring: a process that joins finds the gate as planned.
        segment.header().set_capture(capture);
        if let Err(err) = rename_no_replace(&temporary, &segment.path) {
            let _ = std::fs::remove_file(&temporary);
            return Err(err);
        }
        segment.unlinked = false;
        Ok(segment)
    }

    pub fn view(&self) -> &RingView {
        &self.view
    }

    /// Keeps `SPARE_LANES` lanes backed and free for new threads (one while `busy`: see
    /// `spare_lanes_wanted`), backing more (up to the plan's limit) as threads take them; with
    /// memory for the whole ring, every other lane is left open for a thread that finds none
    /// free to back itself. Returns a message the first time the filesystem refuses.
    ///
    /// Looks at the lanes only when `look_at_all` (the drain's pass read every lane's state:
    /// a producer claimed a lane since its last such look, or a second went by, which finds
    /// what changed uncounted, such as a lane a producer failed to back and gave back
    /// `UNBACKED`; those pages are warm then), a lane was freed, or `busy` changed.
    pub fn replenish(&mut self, busy: bool, look_at_all: bool) -> Option<String> {
        if self.replenished_busy == Some(busy) && !look_at_all {
            return None;
        }
        self.replenished_busy = Some(busy);
        let (mut free, mut backed) = (0u32, 0u32);
        for index in 0..self.geometry.lane_count {
            let Some(lane) = self.view.lane(index) else { break };
            match lane_state(lane.state.load(Ordering::Relaxed)) {
                LANE_FREE => {
                    free += 1;
                    backed += 1;
                }
                LANE_UNBACKED | LANE_OPEN => {}
                _ => backed += 1,
            }
        }
        let mut message = None;
        let spares = spare_lanes_wanted(backed - free, busy);
        for index in 0..self.geometry.lane_count {
            if free >= spares || backed >= self.max_backed || self.backing_failed {
                break;
            }
            let Some(lane) = self.view.lane(index) else { break };
            let state = lane_state(lane.state.load(Ordering::Relaxed));
            // An open lane is taken back first (a producer may win it meanwhile: then skip it).
            if !(state == LANE_UNBACKED || (state == LANE_OPEN && self.view.withdraw_open(index))) {
                continue;
            }
            let Some((start, len)) = self.view.lane_part(index, 0, self.first_backed) else { break };
            if let Err(err) = allocate(&self.file, start as u64 - self.mapping.base() as u64, len as u64) {
                self.backing_failed = true;
                message = Some(format!(
                    "cannot back another lane in {} ({err}); {backed} thread(s) record at once, the records \
                     of any more are counted as dropped",
                    self.path.parent().unwrap_or(Path::new("/")).display(),
                ));
                break;
            }
            if self.view.offer_backed(index, self.first_backed) {
                free += 1;
                backed += 1;
            }
        }
        if self.open_lanes {
            for index in 0..self.geometry.lane_count {
                let unbacked = self
                    .view
                    .lane(index)
                    .is_some_and(|l| lane_state(l.state.load(Ordering::Relaxed)) == LANE_UNBACKED);
                if unbacked && !self.backing_failed {
                    self.view.open(index);
                }
            }
        }
        message
    }

    /// Backs more of lane `index`, doubling it, once its owner's head (`head`, as a pass read
    /// it) is half-way through what is backed, if the owner could not back it itself (a
    /// seccomp filter, memory that ran out: `Lane::grow_failed_at`); from then on the owner
    /// rarely reaches the end. Owners that can grow their own lanes: the owner's
    /// `MADV_POPULATE_WRITE` maps the pages as it backs them, where pages the collector backed
    /// cost the owner a page fault each (1,076 more faults in an 8 s run at 10,000 calls/s when
    /// the collector grew every lane). Nothing when the lane is backed whole or the filesystem
    /// is full (the owner drops and counts meanwhile, and tries again itself).
    pub fn grow_lane(&self, index: u32, head: u64) {
        let capacity = self.geometry.lane_capacity as u64;
        let Some(lane) = self.view.lane(index) else { return };
        let backed = lane.backed.load(Ordering::Acquire);
        if backed >= capacity || head < backed / 2 || lane.grow_failed_at.load(Ordering::Relaxed) == 0 {
            return;
        }
        let target = grown_backing(capacity, backed, 0);
        let Some((start, len)) = self.view.lane_part(index, backed, target) else { return };
        if allocate(&self.file, start as u64 - self.mapping.base() as u64, len as u64).is_ok() {
            lane.backed.fetch_max(target, Ordering::Release);
        }
    }

    /// A lane was freed: backing may be retried if it had failed (memory came back).
    pub fn lane_freed(&mut self) {
        self.backing_failed = false;
        self.replenished_busy = None;
    }

    /// Records the collector's clock in the header (producers use it to tell a dead collector).
    pub fn heartbeat(&self, now: u64) {
        self.header().heartbeat.store(now, Ordering::Relaxed);
    }

    /// The producers' wake counter (read it before a drain pass, pass it to [`Segment::sleep`]).
    pub fn wake_count(&self) -> u32 {
        self.header().wake.load(Ordering::SeqCst)
    }

    /// Sleeps up to `timeout`, or until a producer wakes the collector (a thread found no
    /// lane), unless one did since `seen` was read.
    pub fn sleep(&self, seen: u32, timeout: std::time::Duration) {
        let header = self.header();
        header.sleeping.store(1, Ordering::SeqCst);
        // A producer bumps `wake`, then wakes us if `sleeping` is set: either it saw `sleeping`
        // and wakes the futex (which then does not match `seen` or is woken), or its bump is
        // visible here and we do not sleep.
        if header.wake.load(Ordering::SeqCst) == seen {
            let timeout = libc::timespec {
                tv_sec: timeout.as_secs() as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            // Safety: a futex wait on an aligned u32 of our shared mapping (not private: the
            // wakers are other processes), with a relative timeout.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    header.wake.as_ptr(),
                    libc::FUTEX_WAIT,
                    seen,
                    &timeout as *const libc::timespec,
                );
            }
        }
        header.sleeping.store(0, Ordering::SeqCst);
    }

    fn header(&self) -> &RingHeader {
        self.view.header()
    }

    /// Stops accepting processes: new joiners see no segment, writers see the closed state.
    pub fn close(&mut self) {
        self.header().state.store(RING_CLOSED, Ordering::Release);
        self.unlink();
    }

    fn unlink(&mut self) {
        if !self.unlinked {
            let _ = std::fs::remove_file(&self.path);
            self.unlinked = true;
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.unlink();
        // After the last drain: a paused process passes every call through without looking at
        // the ring's state, so it would never see it closed (nor join the session's next
        // collector). Open, its next call records into the closed ring, unread, and its next
        // look at the ring (~100 ms) lets it go.
        self.header().capture.store(0, Ordering::Release);
    }
}

/// Allocates `len` bytes of `file` at `offset`, so later writes there cannot fail for lack of
/// space (`ENOSPC` now instead of SIGBUS later).
fn allocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    // Safety: fallocate on our own descriptor; mode 0 allocates without changing the size.
    let ret = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset as libc::off_t, len as libc::off_t) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Renames `from` to `to` unless `to` exists (then `AlreadyExists`).
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    let from =
        CString::new(from.as_os_str().as_bytes()).map_err(|_| io::Error::other("path contains NUL"))?;
    let to = CString::new(to.as_os_str().as_bytes()).map_err(|_| io::Error::other("path contains NUL"))?;
    // Safety: renameat2 with valid C strings; RENAME_NOREPLACE makes it fail on an existing name.
    let ret = unsafe {
        libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE)
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlprof_format::ring::CapturePlan;

    const WHOLE_RUN: CapturePlan = CapturePlan::WHOLE_RUN;

    const MIB: u64 = 1 << 20;

    #[test]
    fn spare_lanes_grow_with_the_threads_up_to_four() {
        let wanted: Vec<u32> = (0..7).map(|in_use| spare_lanes_wanted(in_use, false)).collect();
        assert_eq!(wanted, [1, 2, 3, 4, 4, 4, 4]);
        assert_eq!(spare_lanes_wanted(u32::MAX, false), SPARE_LANES);
        // A busy collector keeps one, whatever the threads.
        assert!((0..7).all(|in_use| spare_lanes_wanted(in_use, true) == 1));
    }

    #[test]
    fn plenty_of_memory_keeps_the_requested_ring() {
        let plan = plan(RingGeometry::DEFAULT, 16 << 30, Path::new("/dev/shm")).unwrap();
        assert_eq!(plan.geometry, RingGeometry::DEFAULT);
        assert_eq!(plan.max_backed_lanes, 256);
        assert!(plan.note.is_none());
    }

    #[test]
    fn a_docker_sized_shm_gets_smaller_lanes_and_a_note() {
        // 64 MiB free: a quarter is 16 MiB, room for 63 lanes of 4096 records (256 KiB).
        let plan = plan(RingGeometry::DEFAULT, 64 * MIB, Path::new("/dev/shm")).unwrap();
        assert_eq!(plan.geometry.lane_capacity, 4096);
        assert_eq!(plan.max_backed_lanes, 63);
        let note = plan.note.unwrap();
        assert!(note.contains("--shm-size") && note.contains("MLPROF_SHM_DIR"), "{note}");
        // 8 MiB free: 2 MiB for us.
        let plan = super::plan(RingGeometry::DEFAULT, 8 * MIB, Path::new("/dev/shm")).unwrap();
        assert_eq!((plan.geometry.lane_capacity, plan.max_backed_lanes), (4096, 7));
    }

    #[test]
    fn lanes_are_offered_with_their_first_slots_backed_and_grown_for_owners_that_cannot() {
        use std::os::unix::fs::MetadataExt;
        let geometry = RingGeometry { lane_count: 4, lane_capacity: 4 * 4096 };
        let plan = Plan { geometry, max_backed_lanes: 4, note: None };
        let dir = std::env::temp_dir();
        let name = format!("mlprof-segment-test-{}", std::process::id());
        let segment =
            Segment::create(&dir, &name, &plan, mlprof_format::ring::CLOCK_MONOTONIC, 1, WHOLE_RUN).unwrap();
        let first = segment.first_backed;
        assert!(first == 4096 || first == geometry.lane_capacity as u64, "a first part, or whole lanes");
        let offered: Vec<u32> = (0..4)
            .filter(|&i| {
                lane_state(segment.view().lane(i).unwrap().state.load(Ordering::Relaxed)) == LANE_FREE
            })
            .collect();
        assert_eq!(offered.len(), 1, "one spare before the first thread");
        let lane = segment.view().lane(offered[0]).unwrap();
        assert_eq!(lane.backed.load(Ordering::Relaxed), first);
        let blocks = || std::fs::metadata(dir.join(&name)).unwrap().blocks() * 512;
        let before = blocks();
        // An owner that grows its own lane is left to it, however far its head is.
        segment.grow_lane(offered[0], first);
        assert_eq!(lane.backed.load(Ordering::Relaxed), first);
        if first < geometry.lane_capacity as u64 {
            // One that could not: the collector doubles the lane once the head is half-way.
            lane.grow_failed_at.store(1, Ordering::Relaxed);
            segment.grow_lane(offered[0], first / 2 - 1);
            assert_eq!(lane.backed.load(Ordering::Relaxed), first, "not half-way yet");
            segment.grow_lane(offered[0], first / 2);
            assert_eq!(lane.backed.load(Ordering::Relaxed), 2 * first);
            assert!(blocks() >= before + first * 64, "the next part is allocated in the file");
            segment.grow_lane(offered[0], 4 * first);
            assert_eq!(lane.backed.load(Ordering::Relaxed), 4 * first, "up to the capacity");
            segment.grow_lane(offered[0], 4 * first);
            assert_eq!(lane.backed.load(Ordering::Relaxed), 4 * first);
        }
    }

    #[test]
    fn replenish_looks_at_the_lanes_only_with_the_drain_or_after_a_freed_lane() {
        use mlprof_format::ring::lane_word;
        let geometry = RingGeometry { lane_count: 4, lane_capacity: 4 * 4096 };
        let plan = Plan { geometry, max_backed_lanes: 4, note: None };
        let name = format!("mlprof-replenish-test-{}", std::process::id());
        let mut segment = Segment::create(
            &std::env::temp_dir(),
            &name,
            &plan,
            mlprof_format::ring::CLOCK_MONOTONIC,
            1,
            WHOLE_RUN,
        )
        .unwrap();
        let states = |segment: &Segment| -> Vec<u32> {
            (0..4)
                .map(|i| lane_state(segment.view().lane(i).unwrap().state.load(Ordering::Relaxed)))
                .collect()
        };
        let count = |states: &[u32], wanted: u32| states.iter().filter(|&&s| s == wanted).count();
        assert_eq!(count(&states(&segment), LANE_FREE), 1, "one spare before the first thread");
        // A thread takes it: the drain's next pass sees the claim counted and looks at every
        // lane, and this call offers two spares.
        let claim = segment.view().claim(1, 7, 0, 0, false).unwrap();
        segment.replenish(false, false);
        assert_eq!(count(&states(&segment), LANE_FREE), 0, "nothing looks before the drain did");
        assert_eq!(segment.replenish(false, true), None);
        let after_claim = states(&segment);
        assert_eq!(count(&after_claim, LANE_FREE), 2, "{after_claim:?}");
        // A producer that failed to back an open lane gives it back unbacked, uncounted: it is
        // opened again at the drain's next look at every lane, not before.
        let open = after_claim.iter().position(|&s| s == LANE_OPEN).unwrap() as u32;
        let unback = |segment: &Segment| {
            let lane = segment.view().lane(open).unwrap();
            let generation = mlprof_format::ring::lane_generation(lane.state.load(Ordering::Relaxed));
            lane.state.store(lane_word(generation, LANE_UNBACKED), Ordering::Relaxed);
        };
        let state_of_open =
            |segment: &Segment| lane_state(segment.view().lane(open).unwrap().state.load(Ordering::Relaxed));
        unback(&segment);
        for _ in 0..3 {
            segment.replenish(false, false);
            assert_eq!(state_of_open(&segment), LANE_UNBACKED, "nothing counted changed");
        }
        segment.replenish(false, true);
        assert_eq!(state_of_open(&segment), LANE_OPEN);
        // A freed lane makes the next call look.
        unback(&segment);
        segment.view().retire(claim);
        segment.view().free(claim.index);
        segment.lane_freed();
        segment.replenish(false, false);
        assert_eq!(state_of_open(&segment), LANE_OPEN);
    }

    #[test]
    fn no_room_for_one_lane_is_an_error_that_says_what_to_do() {
        let err = plan(RingGeometry::DEFAULT, MIB, Path::new("/dev/shm")).unwrap_err();
        assert!(err.contains("--shm-size"), "{err}");
    }
}
