//! The breakdown's priority rule, and the activity of small synthetic runs.

use super::*;
use mlprof_format::runfile::{ProcessExit, ProcessInfo, RunEnd, RunInfo, RunWriter};

#[test]
fn each_instant_counts_once_in_the_first_category() {
    use Category::*;
    // Ops 0–100 (two threads, overlapping), file I/O 20–40 inside them, data wait 30–50,
    // GPU sync 90–120 (cut at the wall's end, 110): ops 0–20 and 50–90, file I/O 20–30,
    // data wait 30–50, GPU sync 90–110, nothing else.
    let intervals =
        [(OpsPhases, 0, 60), (OpsPhases, 50, 100), (FileIo, 20, 40), (DataWait, 30, 50), (GpuSync, 90, 120)];
    assert_eq!(exclusive_times(&intervals, 0, 110), [20, 20, 10, 60]);
    assert_eq!(exclusive_times(&[], 0, 10), [0; 4]);
    assert_eq!(exclusive_times(&[(FileIo, 5, 5)], 0, 10), [0; 4]);
}

fn span(pid: u32, start: u64, dur: u64, domain: u64, name: u64, id: u64) -> Event {
    IttSpan {
        kind: Func::IttTask as u16,
        pid,
        tid: pid,
        start,
        dur,
        domain,
        name,
        id,
        parent: 10,
        ..Default::default()
    }
    .into_event()
}

/// A trainer (10) with a DataLoader worker (11) below a launcher shell (5): the trainer is the
/// main; the worker's reads count for it; waits, steps and I/O land in their slices.
#[test]
fn a_trainer_with_a_worker() {
    let path = std::env::temp_dir().join(format!("mlprof-activity-{}.bin", std::process::id()));
    let info = RunInfo { command: vec!["sh".into()], start_mono_ns: 0, ..Default::default() };
    let mut w = RunWriter::create(&path, &info).unwrap();
    let process = |pid, ppid, start_ns, forked| ProcessInfo {
        pid,
        ppid,
        argv: vec![format!("p{pid}")],
        start_ns,
        forked,
        ..Default::default()
    };
    w.write_process(&process(5, 1, 0, false)).unwrap();
    w.write_process(&process(10, 5, 1_000, false)).unwrap();
    w.write_process(&process(11, 10, 2_000, true)).unwrap();
    let path_id = string_id(b"/data/x");
    w.write_string(path_id, b"/data/x").unwrap();
    for (id, text) in [
        (DATA, "mlprof.data"),
        (WAIT, "batch.wait"),
        (FETCH, "batch.fetch"),
        (PHASE, "mlprof.phase"),
        (OPTIMIZER_STEP, "optimizer.step"),
    ] {
        w.write_string(id, text.as_bytes()).unwrap();
    }
    let mut open = Event {
        kind: Func::Openat as u16,
        pid: 11,
        tid: 11,
        fd: 3,
        start: 3_000,
        dur: 100,
        ret: 3,
        ..Default::default()
    };
    open.arg2 = path_id;
    let mut read = Event {
        kind: Func::Read as u16,
        pid: 11,
        tid: 11,
        fd: 3,
        start: 4_000,
        dur: 500,
        ret: 64,
        ..Default::default()
    };
    (read.arg, read.arg2) = (64, 64);
    let events = [
        open,
        read,
        span(11, 3_000, 2_000, DATA, FETCH, 1),
        span(10, 2_500, 3_000, DATA, WAIT, 1),
        span(10, 6_000, 1_000, PHASE, OPTIMIZER_STEP, 0),
        span(10, 8_000, 1_000, PHASE, OPTIMIZER_STEP, 0),
    ];
    w.write_events(&events).unwrap();
    w.write_process_exit(&ProcessExit { pid: 10, time_ns: 9_500, exit_code: Some(0), signal: None }).unwrap();
    w.finish(&RunEnd { end_ns: 12_000, events: 6, dropped: 0 }).unwrap();
    let a = Activity::compute(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(a.duration_ns, 12_000);
    assert_eq!(a.mains.len(), 1);
    let m = &a.mains[0];
    assert_eq!((m.pid, m.rank, m.cmdline.as_str(), m.start_ns, m.wall_ns), (10, None, "p10", 1_000, 8_500));
    // Data wait 2.5–5.5 µs, phases 6–7 and 8–9 µs; the worker's I/O is its own.
    assert_eq!(m.by_category, [3_000, 0, 0, 2_000]);
    assert_eq!(m.rest_ns(), 3_500);
    assert_eq!((m.calls, m.calls_ns, m.bytes), (2, 600, 64));
    let t = &a.timelines;
    assert_eq!(t.bin_ns, 50);
    assert_eq!(t.io.len(), 1);
    assert_eq!((t.io[0].0, t.io[0].1[90]), (11, 64));
    assert_eq!(t.waits, [(10, vec![(5_500, 3_000)])]);
    assert_eq!(t.steps, [(10, vec![(9_000, 2_000)])]);
}

/// A launcher (5, torchrun's place) with two trainers (20 started before 30), each with a
/// worker: two mains, one row each in start order, each with its own wait; the launcher and
/// the workers are not rows.
#[test]
fn two_ranks_under_a_launcher_are_two_rows() {
    let path = std::env::temp_dir().join(format!("mlprof-activity-ranks-{}.bin", std::process::id()));
    let info = RunInfo { command: vec!["torchrun".into()], start_mono_ns: 0, ..Default::default() };
    let mut w = RunWriter::create(&path, &info).unwrap();
    for (pid, ppid, start_ns) in [(5, 1, 0), (30, 5, 1_500), (20, 5, 1_000), (21, 20, 2_000), (31, 30, 2_000)]
    {
        let argv = vec![format!("p{pid}")];
        w.write_process(&ProcessInfo {
            pid,
            ppid,
            argv,
            start_ns,
            forked: pid % 10 == 1,
            ..Default::default()
        })
        .unwrap();
    }
    for (id, text) in [(DATA, "mlprof.data"), (WAIT, "batch.wait"), (FETCH, "batch.fetch")] {
        w.write_string(id, text.as_bytes()).unwrap();
    }
    let events = [
        span(21, 2_000, 1_000, DATA, FETCH, 1),
        span(31, 2_000, 1_000, DATA, FETCH, 1),
        span(20, 2_000, 1_500, DATA, WAIT, 1),
        span(30, 2_000, 2_500, DATA, WAIT, 1),
    ];
    w.write_events(&events).unwrap();
    w.finish(&RunEnd { end_ns: 10_000, events: 4, dropped: 0 }).unwrap();
    let a = Activity::compute(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let rows: Vec<(u32, u64, u64)> =
        a.mains.iter().map(|m| (m.pid, m.start_ns, m.by_category[Category::DataWait as usize])).collect();
    assert_eq!(rows, [(20, 1_000, 1_500), (30, 1_500, 2_500)]);
}

/// The same job with ranks recorded (run file 1.4): rows are ranks, in rank order, labelled by
/// rank; the workers inherit their rank's environment but are not rows.
#[test]
fn recorded_ranks_label_and_order_the_rows() {
    use mlprof_format::rank::RankInfo;
    let path = std::env::temp_dir().join(format!("mlprof-activity-ranked-{}.bin", std::process::id()));
    let info = RunInfo { command: vec!["torchrun".into()], start_mono_ns: 0, ..Default::default() };
    let mut w = RunWriter::create(&path, &info).unwrap();
    let rank =
        |r: u32| Some(RankInfo { rank: r, world_size: Some(2), source: "RANK".into(), ..Default::default() });
    for (pid, ppid, start_ns, r) in [
        (5, 1, 0, None),
        (20, 5, 1_000, rank(1)),
        (30, 5, 1_500, rank(0)),
        (21, 20, 2_000, rank(1)),
        (31, 30, 2_000, rank(0)),
    ] {
        let argv = vec![format!("p{pid}")];
        w.write_process(&ProcessInfo {
            pid,
            ppid,
            argv,
            start_ns,
            forked: pid % 10 == 1,
            rank: r,
            ..Default::default()
        })
        .unwrap();
    }
    for (id, text) in [(DATA, "mlprof.data"), (WAIT, "batch.wait"), (FETCH, "batch.fetch")] {
        w.write_string(id, text.as_bytes()).unwrap();
    }
    w.write_events(&[span(20, 2_000, 1_500, DATA, WAIT, 1), span(30, 2_000, 2_500, DATA, WAIT, 1)]).unwrap();
    w.finish(&RunEnd { end_ns: 10_000, events: 2, dropped: 0 }).unwrap();
    let a = Activity::compute(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let rows: Vec<(u32, Option<u32>, String, u64)> = a
        .mains
        .iter()
        .map(|m| (m.pid, m.rank, m.label(), m.by_category[Category::DataWait as usize]))
        .collect();
    assert_eq!(
        rows,
        [(30, Some(0), "rank 0".to_string(), 2_500), (20, Some(1), "rank 1".to_string(), 1_500)]
    );
}
