//! The summary of a tiny synthetic run (`crate::test_run`), computed and rendered.

use super::*;
use crate::test_run::{self, DATASET};

#[test]
fn counts_calls_files_and_processes() {
    let run = test_run::write("summary");
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
    let run = test_run::write("summary-render");
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
