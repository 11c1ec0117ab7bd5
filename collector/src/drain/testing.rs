//! Test support for the drain: a ring in heap memory standing in for the segment, a drainer
//! writing a run file of its own in the temporary directory, lanes claimed for chosen owners,
//! and what the run file holds, read back.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use mlprof_filewrite::BackgroundFile;
use mlprof_format::func::Func;
use mlprof_format::gpu::GpuActivity;
use mlprof_format::record::{Event, KIND_PROCESS_START, PROC_FORKED};
use mlprof_format::ring::{Claim, RingGeometry, RingView, lane_state};
use mlprof_format::runfile::{
    AggregateSample, DropSample, Frame, ProcessExit, ProcessInfo, RunEnd, RunInfo, RunReader, RunWriter,
};
use mlprof_format::testing::{HeapRing, string_def};

use super::{DrainedRing, Drainer};
use crate::timebase::Timebase;

/// A heap ring as the drain's segment: every lane backed and offered from the start, so there
/// is nothing to back or grow; it counts the lanes the drain freed.
pub struct TestRing {
    // Declared before the ring: the view is dropped first.
    view: RingView,
    _ring: HeapRing,
    /// Lanes the drain said it freed (`lane_freed`).
    pub freed: u32,
}

impl DrainedRing for TestRing {
    fn view(&self) -> &RingView {
        &self.view
    }

    fn geometry(&self) -> RingGeometry {
        self.view.geometry()
    }

    fn heartbeat(&self, now: u64) {
        self.view.header().heartbeat.store(now, Ordering::Relaxed);
    }

    fn grow_lane(&self, _index: u32, _head: u64) {}

    fn replenish(&mut self, _busy: bool, _look_at_all: bool) -> Option<String> {
        None
    }

    fn lane_freed(&mut self) {
        self.freed += 1;
    }
}

/// The run file of a test drainer, removed when dropped.
pub struct RunFile(PathBuf);

impl Drop for RunFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A drainer on a heap ring of `geometry` (times in CLOCK_MONOTONIC ns, so a record's times are
/// written as they were pushed), quiet, writing a run file named after `tag`.
pub fn drainer(tag: &str, geometry: RingGeometry) -> (Drainer<TestRing>, RunFile) {
    let ring = HeapRing::new(geometry);
    let segment = TestRing { view: ring.view(), _ring: ring, freed: 0 };
    let path = std::env::temp_dir().join(format!("mlprof-drain-{tag}-{}.bin", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let writer = RunWriter::new(BackgroundFile::new(file).unwrap(), &RunInfo::default()).unwrap();
    (Drainer::new(segment, Timebase::new(false), writer, true), RunFile(path))
}

/// Our effective uid: the drain refuses the records of lanes claimed with another.
pub fn uid() -> u32 {
    // Safety: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// The calling thread's id.
pub fn gettid() -> u32 {
    // Safety: gettid takes no arguments and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// A lane claimed for thread `tid` of process image `image` of `pid`, as our uid.
pub fn claim(view: &RingView, pid: u32, tid: u32, image: u64) -> Claim {
    view.claim(pid, tid, uid(), image, false).expect("a free lane")
}

/// Lanes claimed for `owners` (pid, tid, image), the first owner's lane first in the ring's
/// order (the order in which a pass takes them), whatever lanes the claims found.
pub fn claim_in_order(view: &RingView, owners: &[(u32, u32, u64)]) -> Vec<Claim> {
    let mut claims: Vec<Claim> =
        owners.iter().map(|&(pid, tid, image)| claim(view, pid, tid, image)).collect();
    claims.sort_by_key(|claim| claim.index);
    for (claim, &(pid, tid, image)) in claims.iter().zip(owners) {
        let lane = view.lane(claim.index).unwrap();
        lane.pid.store(pid, Ordering::Relaxed);
        lane.tid.store(tid, Ordering::Relaxed);
        lane.image.store(image, Ordering::Relaxed);
    }
    claims
}

/// The state of lane `index` (`LANE_*`).
pub fn state(view: &RingView, index: u32) -> u32 {
    lane_state(view.lane(index).unwrap().state.load(Ordering::Acquire))
}

/// A call of `func` from `start` to `end` (ns).
pub fn call(func: Func, start: u64, end: u64) -> Event {
    Event { kind: func as u16, start, dur: end - start, fd: 3, ..Event::default() }
}

/// `open` of the path whose string id is `path`, ending at `end`.
pub fn open_path(path: u64, end: u64) -> Event {
    Event { arg2: path, ..call(Func::Open, end - 1, end) }
}

/// `call` made at its process's site `number` (`--sites`: flagged, the number in `pid`).
pub fn at_site(number: u32, event: Event) -> Event {
    Event { pid: number, flags: event.flags | mlprof_format::site::FLAG_SITE, ..event }
}

/// Its process's definition of site `number`: line `line` of file string `file`.
pub fn site_def(number: u32, file: u64, line: u32) -> Event {
    Event {
        kind: mlprof_format::site::KIND_SITE_DEF,
        fd: number as i32,
        arg: file,
        extra: line,
        ..Event::default()
    }
}

/// Pushes `events` into lane `index`.
pub fn push_all(view: &RingView, index: u32, events: &[Event]) {
    for event in events {
        assert!(view.push(index, event), "room in the lane");
    }
}

/// Defines string `id` as `bytes` in lane `index`.
pub fn push_string(view: &RingView, index: u32, id: u64, bytes: &[u8]) {
    assert!(view.push_string(index, &string_def(id, bytes.len()), bytes), "room in the lane");
}

/// A process image's start record: child of `ppid`, its command line string `argv`, at
/// `start` ns; `forked` for a fork child (which names its parent's command line).
pub fn process_start(ppid: u32, argv: u64, start: u64, forked: bool) -> Event {
    let extra = if forked { PROC_FORKED } else { 0 };
    Event { kind: KIND_PROCESS_START, arg: ppid as u64, arg2: argv, start, extra, ..Event::default() }
}

/// The id of a thread of this process that has exited (and that the kernel let go of).
pub fn exited_tid() -> u32 {
    let tid = std::thread::spawn(gettid).join().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while super::procfs::thread_alive(std::process::id(), tid, true) {
        assert!(std::time::Instant::now() < deadline, "an exited thread still counts as alive");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    tid
}

/// One frame of the run file, owned.
#[derive(Debug)]
pub enum Written {
    /// A string's definition, by its id.
    String(u64),
    Process(ProcessInfo),
    Exit(ProcessExit),
    /// A thread's name (who records in a lane).
    Thread,
    Events(Vec<Event>),
    /// The run-wide site of each event of the events frame before it.
    Sites(Vec<u32>),
    /// A site's definition: its id and line.
    Site(u32, u32),
    Gpu(Vec<GpuActivity>),
    Aggregates(Vec<AggregateSample>),
    Drops(Vec<DropSample>),
    End(RunEnd),
    Other,
}

impl RunFile {
    /// Every frame the file holds, in order (after the drainer finished).
    pub fn frames(&self) -> Vec<Written> {
        let mut reader = RunReader::open(&self.0).unwrap();
        let mut frames = Vec::new();
        while let Some(frame) = reader.next_frame().unwrap() {
            frames.push(match frame {
                Frame::String { id, .. } => Written::String(id),
                Frame::Process(process) => Written::Process(process),
                Frame::ProcessExit(exit) => Written::Exit(exit),
                Frame::Thread(_) => Written::Thread,
                Frame::Events(events) => Written::Events(events.to_vec()),
                Frame::EventSites(sites) => Written::Sites(sites.to_vec()),
                Frame::Site(site) => Written::Site(site.id, site.line),
                Frame::GpuActivity(records) => Written::Gpu(records),
                Frame::Aggregates(samples) => Written::Aggregates(samples),
                Frame::Drops(drops) => Written::Drops(drops),
                Frame::End(end) => Written::End(end),
                _ => Written::Other,
            });
        }
        frames
    }
}

/// The event frames among `frames`.
pub fn event_frames(frames: &[Written]) -> Vec<&[Event]> {
    frames
        .iter()
        .filter_map(|frame| match frame {
            Written::Events(events) => Some(events.as_slice()),
            _ => None,
        })
        .collect()
}

/// Every event of `frames`, in file order.
pub fn events(frames: &[Written]) -> Vec<Event> {
    event_frames(frames).concat()
}

/// Every event of `frames` with its run-wide site (0: none), in file order.
pub fn events_and_sites(frames: &[Written]) -> Vec<(Event, u32)> {
    let (mut out, mut frame_start): (Vec<(Event, u32)>, usize) = (Vec::new(), 0);
    for frame in frames {
        match frame {
            Written::Events(events) => {
                frame_start = out.len();
                out.extend(events.iter().map(|&event| (event, 0)));
            }
            Written::Sites(sites) => {
                assert_eq!(sites.len(), out.len() - frame_start, "one site per event of its frame");
                out[frame_start..].iter_mut().zip(sites).for_each(|(event, &site)| event.1 = site);
            }
            _ => {}
        }
    }
    out
}

/// Every GPU activity record of `frames`, in file order.
pub fn gpu_records(frames: &[Written]) -> Vec<GpuActivity> {
    frames
        .iter()
        .filter_map(|frame| match frame {
            Written::Gpu(records) => Some(records.as_slice()),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}

/// The processes of `frames`.
pub fn processes(frames: &[Written]) -> Vec<&ProcessInfo> {
    frames
        .iter()
        .filter_map(|frame| match frame {
            Written::Process(process) => Some(process),
            _ => None,
        })
        .collect()
}

/// The process exits of `frames`.
pub fn exits(frames: &[Written]) -> Vec<&ProcessExit> {
    frames
        .iter()
        .filter_map(|frame| match frame {
            Written::Exit(exit) => Some(exit),
            _ => None,
        })
        .collect()
}

/// An event's end time (what frames are sorted by).
pub fn end(event: &Event) -> u64 {
    event.start + event.dur
}

/// Keeps `drainer`'s passes from making liveness checks of their own (the tests make them
/// when they mean to): the last check is dated an hour ahead.
pub fn hold_liveness<R: DrainedRing>(drainer: &mut Drainer<R>) {
    drainer.liveness.last = std::time::Instant::now() + std::time::Duration::from_secs(3600);
}
