//! A tiny run file for unit tests, written with the format crate's `RunWriter` (no collector,
//! no preload): a trainer (pid 10) that opens, reads and closes a dataset file, fails one
//! open, reads the clock, and forks a worker (pid 11) that reads the inherited fd.

use std::path::{Path, PathBuf};

use mlprof_format::func::Func;
use mlprof_format::record::{Event, FLAG_ERROR};
use mlprof_format::runfile::{
    AggregateSample, DropSample, ProcessExit, ProcessInfo, RunEnd, RunInfo, RunWriter, ThreadInfo,
};
use mlprof_format::string_id;

/// The run start; event times below are offsets from it.
pub(crate) const START: u64 = 1_000_000;
pub(crate) const DATASET: &str = "/data/train.bin";

/// A run file that removes itself when dropped.
pub(crate) struct TempRun(PathBuf);

impl TempRun {
    /// Takes over `path` (removed on drop).
    pub(crate) fn new(path: PathBuf) -> TempRun {
        TempRun(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempRun {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn event(func: Func, pid: u32, fd: i32, start: u64, dur: u64) -> Event {
    Event { kind: func as u16, pid, tid: pid, fd, start: START + start, dur, ..Default::default() }
}

/// Writes the run to a file of the temp directory named after `tag` (one per test).
pub(crate) fn write(tag: &str) -> TempRun {
    let path = std::env::temp_dir().join(format!("mlprof-report-{tag}-{}.bin", std::process::id()));
    let info = RunInfo {
        host: "testhost".into(),
        command: vec!["train".into(), "--epochs=1".into()],
        start_mono_ns: START,
        clock_source: "clock_monotonic".into(),
        ..Default::default()
    };
    let mut w = RunWriter::create(&path, &info).unwrap();
    let dataset = string_id(DATASET.as_bytes());
    w.write_string(dataset, DATASET.as_bytes()).unwrap();
    w.write_process(&ProcessInfo {
        pid: 10,
        ppid: 1,
        argv: info.command.clone(),
        start_ns: START,
        forked: false,
        ..Default::default()
    })
    .unwrap();
    w.write_thread(&ThreadInfo { pid: 10, tid: 10, name: "python".into() }).unwrap();
    w.write_process(&ProcessInfo {
        pid: 11,
        ppid: 10,
        argv: info.command.clone(),
        start_ns: START + 5_000,
        forked: true,
        ..Default::default()
    })
    .unwrap();
    let mut open = event(Func::Open64, 10, 3, 1_000, 2_000);
    (open.ret, open.arg2) = (3, dataset);
    let mut read = event(Func::Read, 10, 3, 4_000, 1_500);
    (read.arg, read.arg2, read.ret) = (4096, 4096, 4096);
    let mut failed = event(Func::Open64, 10, -1, 4_500, 500);
    (failed.ret, failed.errno, failed.flags, failed.arg2) = (-1, 2, FLAG_ERROR, dataset);
    // The worker reads the fd it inherited at fork (time 5 µs), after the parent closed it.
    let mut child_read = event(Func::Read, 11, 3, 9_000, 1_000);
    (child_read.arg, child_read.arg2, child_read.ret) = (100, 100, 100);
    let close = event(Func::Close, 10, 3, 8_000, 200);
    w.write_events(&[open, read, failed, close, child_read]).unwrap();
    w.write_aggregates(&[AggregateSample {
        stream: 1,
        pid: 10,
        tid: 10,
        func: Func::ClockGettime as u16,
        clock_id: Some(1),
        time_ns: START + 9_500,
        count: 8,
        timed: 2,
        timed_ns: 100,
    }])
    .unwrap();
    w.write_drops(&[DropSample {
        stream: 1,
        pid: 11,
        tid: 11,
        time_ns: START + 9_600,
        dropped: 3,
        interrupted: 0,
    }])
    .unwrap();
    w.write_process_exit(&ProcessExit { pid: 11, time_ns: START + 11_000, exit_code: Some(0), signal: None })
        .unwrap();
    w.write_process_exit(&ProcessExit { pid: 10, time_ns: START + 12_000, exit_code: None, signal: Some(9) })
        .unwrap();
    w.finish(&RunEnd { end_ns: START + 20_000, events: 5, dropped: 3 }).unwrap();
    TempRun(path)
}

/// A run in which a read of the dataset (fd 3, 7 bytes) comes a frame before the open that
/// named its fd, as the collector writes it when it holds an open back until its path is
/// defined: the case streaming fd histories must notice (written to the temp directory,
/// named after `tag`).
pub(crate) fn write_late_open(tag: &str) -> TempRun {
    let run =
        TempRun::new(std::env::temp_dir().join(format!("mlprof-report-{tag}-{}.bin", std::process::id())));
    let info = RunInfo { host: "h".into(), start_mono_ns: START, ..RunInfo::default() };
    let mut w = RunWriter::create(run.path(), &info).unwrap();
    w.write_string(string_id(DATASET.as_bytes()), DATASET.as_bytes()).unwrap();
    w.write_process(&ProcessInfo { pid: 10, ppid: 1, start_ns: START, ..Default::default() }).unwrap();
    let read = Event { ret: 7, arg2: 7, ..event(Func::Read, 10, 3, 5_000, 100) };
    let open =
        Event { ret: 3, arg2: string_id(DATASET.as_bytes()), ..event(Func::Open, 10, 3, 1_000, 1_000) };
    w.write_events(&[read]).unwrap();
    w.write_events(&[open]).unwrap();
    w.finish(&RunEnd { end_ns: START + 10_000, events: 2, dropped: 0 }).unwrap();
    run
}
