//! The summary of a tiny synthetic run (`crate::testing`), computed and rendered.

use super::*;
use crate::testing::{self, DATASET};

#[test]
fn counts_calls_files_and_processes() {
    let run = testing::write("summary");
    let s = Summary::compute(run.path()).unwrap();
    // 5 recorded events and 8 aggregated clock reads.
    assert_eq!((s.events, s.unknown_events, s.dropped, s.truncated), (13, 0, 3, false));
    assert_eq!(s.duration_ns, 20_000);
    assert_eq!(s.calls["open64"], CallStats { count: 2, errors: 1, total_ns: 2_500, bytes: 0 });
    assert_eq!(s.calls["read"], CallStats { count: 2, errors: 0, total_ns: 2_500, bytes: 4_196 });
    // Two of eight clock reads were timed (100 ns): the total is scaled up.
    assert_eq!(s.calls["clock_gettime"].total_ns, 400);

    // The worker's read goes to the file its parent had open on fd 3 when it forked.
    assert_eq!(s.files.len(), 1);
    let file = &s.files[0];
    assert_eq!((file.path.as_str(), file.opens, file.calls, file.bytes_read), (DATASET, 1, 5, 4_196));

    let rows: Vec<_> = s.processes.iter().map(|p| (p.pid, p.forked, p.start_ns)).collect();
    assert_eq!(rows, [(10, false, 0), (11, true, 5_000)]);
    assert_eq!(s.processes[0].exit.as_ref().and_then(|e| e.signal), Some(9));
    assert_eq!(s.processes[1].calls["read"].count, 1);
    assert!(s.gpu.is_none() && s.spans.is_empty() && s.data_pipeline.is_none());
}

#[test]
fn renders_json_and_text() {
    let run = testing::write("summary-render");
    let s = Summary::compute(run.path()).unwrap();
    let value = json::render(&s);
    assert_eq!(value["events"], 13);
    assert_eq!(value["processes"][1]["exit_code"], 0);
    assert_eq!(value["files"][0]["by_call"]["read"], 2);
    assert!(value["gpu"].is_null() && value["data_pipeline"].is_null());

    let mut out = Vec::new();
    text::write(&s, 10, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("mlprof summary: train --epochs=1 on testhost — 0.000 s, 2 process(es)"));
    assert!(text.contains("  pid 10 (ppid 1) train --epochs=1 — 12 calls, killed by signal 9\n"));
    assert!(text.contains("  pid 11 (ppid 10) [fork] train --epochs=1 — 1 calls, exit 0\n"));
    assert!(text.contains(&format!("     4.1 KiB          0 B        5     5.2 µs  {DATASET}\n")));
    assert!(text.ends_with(
        "Dropped records: 3 — the counts above are missing these calls (3 lane full, 0 no free lane, \
         0 interrupted by a signal handler or a cancellation)\n"
    ));
    assert_eq!(value["drops"], serde_json::json!({"lane_full": 3, "no_lane": 0, "interrupted": 0}));
}

/// ITT spans nest (a phase holds its ops): the call tables leave them to the span table, where
/// they are not summed with calls; the JSON keeps their counts in `calls`.
#[test]
fn call_tables_count_calls_not_spans() {
    use mlprof_format::func::Func;
    use mlprof_format::record::{Event, IttSpan};
    use mlprof_format::runfile::{ProcessInfo, RunEnd, RunInfo, RunWriter};
    use mlprof_format::string_id;

    let path = std::env::temp_dir().join(format!("mlprof-report-spans-{}.bin", std::process::id()));
    let info = RunInfo { command: vec!["train".into()], start_mono_ns: 1_000, ..Default::default() };
    let mut w = RunWriter::create(&path, &info).unwrap();
    w.write_process(&ProcessInfo {
        pid: 7,
        ppid: 1,
        argv: vec!["train".into()],
        start_ns: 1_000,
        forked: false,
        ..Default::default()
    })
    .unwrap();
    let (domain, name) = (string_id(b"mlprof.phase"), string_id(b"forward"));
    w.write_string(domain, b"mlprof.phase").unwrap();
    w.write_string(name, b"forward").unwrap();
    let read = Event {
        kind: Func::Read as u16,
        pid: 7,
        tid: 7,
        fd: 0,
        start: 2_000,
        dur: 100,
        ..Default::default()
    };
    let task = IttSpan {
        kind: Func::IttTask as u16,
        pid: 7,
        tid: 7,
        start: 1_500,
        dur: 9_000,
        name,
        domain,
        ..Default::default()
    };
    w.write_events(&[read, task.into_event()]).unwrap();
    w.finish(&RunEnd { end_ns: 20_000, events: 2, dropped: 0 }).unwrap();
    let s = Summary::compute(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(s.calls["itt_task"].count, 1);
    let mut out = Vec::new();
    text::write(&s, 10, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let tree = &text[text.find("Whole process tree:").unwrap()..text.find("Per process:").unwrap()];
    assert!(!tree.contains("itt_task"), "{tree}");
    assert!(
        tree.contains("100.00    0.000000       0.100          1        0            0  read\n"),
        "{tree}"
    );
    assert!(
        text.contains("  pid 7 (ppid 1) train — 1 calls, exit not seen\n      read 1×/100 ns\n"),
        "{text}"
    );
    assert!(text.contains("           1       9.0 µs       9.0 µs  mlprof.phase   forward\n"), "{text}");
}
