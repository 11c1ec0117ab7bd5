//! Two synthetic runs with known counts, and a run against itself.

use super::*;
use crate::testing;
use mlprof_format::record::{Event, IttSpan};
use mlprof_format::runfile::{ProcessInfo, RunEnd, RunInfo, RunWriter};
use mlprof_format::string_id;

/// A run of one process (pid 20) with `reads` reads of 10 bytes (100 ns each) on
/// /data/b.bin, `writes` writes and `ops` aten::mm op spans (1 µs each).
fn run(tag: &str, reads: u64, writes: u64, ops: u64) -> testing::TempRun {
    let path = std::env::temp_dir().join(format!("mlprof-diff-{tag}-{}.bin", std::process::id()));
    let info = RunInfo { command: vec!["job".into()], start_mono_ns: 0, ..Default::default() };
    let mut w = RunWriter::create(&path, &info).unwrap();
    w.write_process(&ProcessInfo {
        pid: 20,
        ppid: 1,
        argv: vec!["job".into()],
        start_ns: 0,
        forked: false,
        ..Default::default()
    })
    .unwrap();
    let file = string_id(b"/data/b.bin");
    let (domain, mm) = (string_id(b"PyTorch"), string_id(b"aten::mm"));
    for (id, text) in [(file, "/data/b.bin"), (domain, "PyTorch"), (mm, "aten::mm")] {
        w.write_string(id, text.as_bytes()).unwrap();
    }
    let call = |func: Func, start: u64, dur: u64| Event {
        kind: func as u16,
        pid: 20,
        tid: 20,
        fd: 3,
        start,
        dur,
        ..Default::default()
    };
    let mut open = call(Func::Openat, 10, 50);
    (open.ret, open.arg2) = (3, file);
    let mut events = vec![open];
    for i in 0..reads {
        let mut read = call(Func::Read, 1_000 + i * 1_000, 100);
        (read.arg, read.arg2, read.ret) = (10, 10, 10);
        events.push(read);
    }
    for i in 0..writes {
        let mut write = call(Func::Write, 1_500 + i * 1_000, 200);
        (write.arg, write.arg2, write.ret) = (5, 5, 5);
        events.push(write);
    }
    for i in 0..ops {
        let span = IttSpan {
            kind: Func::IttTask as u16,
            pid: 20,
            tid: 20,
            start: 100_000 + i * 2_000,
            dur: 1_000,
            name: mm,
            domain,
            ..Default::default()
        };
        events.push(span.into_event());
    }
    events.sort_by_key(|e| e.start + e.dur);
    w.write_events(&events).unwrap();
    w.finish(&RunEnd { end_ns: 1_000_000, events: events.len() as u64, dropped: 0 }).unwrap();
    testing::TempRun::new(path)
}

fn figures(run: &testing::TempRun) -> RunFigures {
    RunFigures::load(run.path()).unwrap()
}

#[test]
fn known_counts_come_out_exactly() {
    let (a, b) = (run("a", 3, 2, 4), run("b", 7, 0, 5));
    let diff = Diff::compute(&figures(&a), &figures(&b));
    let row = |rows: &[Row], name: &str| rows.iter().find(|r| r.name == name).unwrap().clone();
    let read = row(&diff.calls, "read");
    assert_eq!(read.a, Side { count: 3, total_ns: 300, bytes: 30 });
    assert_eq!(read.b, Side { count: 7, total_ns: 700, bytes: 70 });
    assert_eq!((read.delta_count(), read.delta_ns(), read.ratio()), (4, 400, Some(700.0 / 300.0)));
    // A function missing from B has zeros there.
    let write = row(&diff.calls, "write");
    assert_eq!((write.a, write.b), (Side { count: 2, total_ns: 400, bytes: 10 }, Side::default()));
    // ITT tasks are spans, not calls.
    assert!(diff.calls.iter().all(|r| r.name != "itt_task"));
    let mm = row(&diff.spans, "aten::mm");
    assert_eq!((mm.a.count, mm.a.total_ns, mm.b.count, mm.b.total_ns), (4, 4_000, 5, 5_000));
    let file = row(&diff.files, "/data/b.bin");
    assert_eq!(file.a, Side { count: 6, total_ns: 750, bytes: 40 });
    assert_eq!(file.b, Side { count: 8, total_ns: 750, bytes: 70 });
    // Biggest absolute time change first: aten::mm +1 µs, read +400 ns, write -400 ns, openat 0.
    let order: Vec<&str> = diff.calls.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(order, ["read", "write", "openat"]);
    assert_eq!(diff.ranks.len(), 1);
    let rank = &diff.ranks[0];
    assert_eq!(rank.row.name, "0");
    assert_eq!(rank.row.a, Side { count: 6, total_ns: 750, bytes: 40 });

    let json = json::render(&diff);
    assert_eq!(json["calls"]["read"]["b"], serde_json::json!({"count": 7, "total_ns": 700, "bytes": 70}));
    assert_eq!(json["calls"]["write"]["b"], serde_json::json!({"count": 0, "total_ns": 0, "bytes": 0}));
    assert_eq!(json["spans"]["aten::mm"]["a"], serde_json::json!({"count": 4, "total_ns": 4000}));
    assert_eq!(json["files"]["/data/b.bin"]["a"]["bytes"], 40);
    assert_eq!(json["ranks"]["0"]["a"]["ops_phases_ns"], 4_000);
    assert!(json["data_pipeline"]["a"].is_null() && json["energy"]["b"].is_null());

    let mut out = Vec::new();
    text::write(&diff, 10, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("Calls: 3 in A or B, 2 changed; top 10 by |Δ time|:\n"), "{text}");
    assert!(
        text.contains("           3          7        +4     300 ns     700 ns     +400 ns   2.33×       30 B       70 B  read\n"),
        "{text}"
    );
}

#[test]
fn a_run_against_itself_changes_nothing() {
    let a = run("self", 3, 2, 4);
    let (x, y) = (figures(&a), figures(&a));
    let diff = Diff::compute(&x, &y);
    for rows in [&diff.calls, &diff.spans, &diff.files] {
        assert!(!rows.is_empty());
        assert!(rows.iter().all(|r| !r.changed() && r.delta_ns() == 0), "{rows:?}");
    }
    assert!(diff.ranks.iter().all(|r| !r.row.changed() && r.a == r.b));
    let mut out = Vec::new();
    text::write(&diff, 10, &mut out).unwrap();
    assert!(String::from_utf8(out).unwrap().contains("Calls: 3 in A or B, 0 changed"));
}
