//! The streaming reader against small runs written with the format crate: what it hands out
//! and in which order, what it notes for the client, when a pass is not exact, and what
//! corrupt data does in a strict and in a tolerant pass; each by both ways of reading.

use std::path::Path;

use mlprof_format::func::Func;
use mlprof_format::record::{Event, IttSpan};
use mlprof_format::runfile::{ProcessInfo, RunEnd, RunInfo, RunWriter};
use mlprof_format::string_id;

use super::*;
use crate::testing::{self, DATASET, START, TempRun};

const BOTH: [ReadBy; 2] = [ReadBy::Mapping, ReadBy::Thread];

fn spec(read_by: ReadBy, lookahead: usize) -> StreamSpec {
    StreamSpec {
        read_by,
        wants: Wants { aggregates: true, drops: true, energy: true, gpu: true, sites: true, samples: true },
        strict: true,
        lookahead,
    }
}

/// What a pass saw: per item, a letter (E events, A aggregates, D drops) and for events the
/// record count, the path indexes noted (as names) and the span threads newly found.
fn pass_log(stream: &mut EventStream<'_>) -> Result<Vec<String>, PassError<String>> {
    let mut log = Vec::new();
    while let Some(item) = stream.next()? {
        let found = stream.new_span_threads().to_vec();
        match item {
            Item::Events(batch) => {
                let fds = &stream.learned().fds;
                let mut paths = batch.paths();
                let named: Vec<String> = batch
                    .records()
                    .iter()
                    .filter_map(|e| kind_of(e.kind).and_then(|k| paths.next(k, e)))
                    .map(|index| format!("{:x}", fds.path_id(index)))
                    .collect();
                log.push(format!("E{} paths {named:?} spans {found:?}", batch.records().len()));
                stream.recycle(batch);
            }
            Item::Aggregates(_) => log.push("A".into()),
            Item::Drops(_) => log.push("D".into()),
            Item::EnergyDevice(_) | Item::EnergySamples(_) => log.push("energy".into()),
            Item::Gpu(records) => log.push(format!("G{}", records.len())),
            // Attached to their batch by the stream, never handed out.
            Item::EventSites(_) => log.push("S".into()),
            Item::Samples(samples) => log.push(format!("C{}", samples.len())),
        }
    }
    Ok(log)
}

/// The sites frame after an events frame is the sites of that batch's records, by either
/// way of reading; a batch without one has none.
#[test]
fn sites_come_with_their_batch() {
    use mlprof_format::site::SiteInfo;
    let path = std::env::temp_dir().join(format!("mlprof-report-stream-sites-{}.bin", std::process::id()));
    let run = TempRun::new(path.clone());
    let mut w = RunWriter::create(&path, &RunInfo { start_mono_ns: START, ..Default::default() }).unwrap();
    w.write_process(&ProcessInfo { pid: 7, start_ns: START, ..Default::default() }).unwrap();
    w.write_site(&SiteInfo { id: 4, line: 12, ..Default::default() }).unwrap();
    let event = |at| Event {
        kind: Func::Write as u16,
        pid: 7,
        tid: 7,
        fd: -1,
        start: START + at,
        ..Default::default()
    };
    w.write_events_with_sites(&[event(1), event(2), event(3)], &[4, 0, 4]).unwrap();
    w.write_events(&[event(4)]).unwrap();
    w.finish(&RunEnd::default()).unwrap();
    // Read far ahead, and not at all (a second pass reads none ahead).
    for (read_by, lookahead) in BOTH.into_iter().flat_map(|r| [(r, LOOKAHEAD_EVENTS), (r, 0)]) {
        let meta = RunMeta::load_metadata(run.path()).unwrap();
        assert_eq!(meta.sites[&4].line, 12);
        let sites = read_exactly(run.path(), &meta, &spec(read_by, lookahead), |stream| {
            let mut sites = Vec::new();
            while let Some(item) = stream.next()? {
                if let Item::Events(batch) = item {
                    sites.push((0..batch.records().len()).map(|at| batch.site(at)).collect::<Vec<_>>());
                    stream.recycle(batch);
                }
            }
            Ok::<_, PassError<String>>(sites)
        })
        .unwrap();
        assert_eq!(sites.value, [vec![4, 0, 4], vec![0]], "{read_by:?} {lookahead}");
    }
}

fn read(path: &Path, spec: &StreamSpec) -> Result<Exact<Vec<String>>, String> {
    let meta = RunMeta::load_metadata(path)?;
    read_exactly(path, &meta, spec, pass_log)
}

#[test]
fn frames_come_in_file_order_with_the_paths_their_calls_name() {
    let run = testing::write("stream-order");
    let dataset = format!("{:x}", string_id(DATASET.as_bytes()));
    for read_by in BOTH {
        let exact = read(run.path(), &spec(read_by, LOOKAHEAD_EVENTS)).unwrap();
        // One events frame: its successful open and its failed one name the dataset (an fd
        // named it, so it has an index); then the aggregates and drops frames, in file order.
        let events = format!("E5 paths [{dataset:?}, {dataset:?}] spans []");
        assert_eq!(exact.value, [events.as_str(), "A", "D"], "{read_by:?}");
        assert_eq!(exact.second_pass, None);
    }
}

#[test]
fn only_the_frames_asked_for_are_handed_out() {
    let run = testing::write("stream-wants");
    for read_by in BOTH {
        let spec = StreamSpec { wants: Wants::default(), ..spec(read_by, LOOKAHEAD_EVENTS) };
        let exact = read(run.path(), &spec).unwrap();
        assert_eq!(exact.value.len(), 1, "{read_by:?}: {:?}", exact.value);
        assert!(exact.value[0].starts_with("E5"));
    }
}

#[test]
fn a_change_of_an_fd_recorded_too_late_makes_the_pass_run_again() {
    let run = testing::write_late_open("stream-late-open");
    for read_by in BOTH {
        // Read ahead, the open is noted before its read is handed out: one exact pass.
        let ahead = read(run.path(), &spec(read_by, LOOKAHEAD_EVENTS)).unwrap();
        assert_eq!(ahead.second_pass, None, "{read_by:?}");
        // Not read ahead, the read is looked up first: the pass is not exact, and runs again
        // with the complete history, which notes nothing (its answers are known).
        let mut passes = 0;
        let meta = RunMeta::load_metadata(run.path()).unwrap();
        let late = read_exactly(run.path(), &meta, &spec(read_by, 0), |stream| {
            passes += 1;
            while let Some(item) = stream.next()? {
                if let Item::Events(batch) = item {
                    let learned = stream.learned();
                    for e in batch.records().iter().filter(|e| e.kind == Func::Read as u16) {
                        learned.fds.lookup_cached(&meta, e.pid, e.fd, e.start, &mut learned.fd_cache);
                    }
                    stream.recycle(batch);
                }
            }
            Ok::<_, PassError<String>>(())
        })
        .unwrap();
        assert_eq!(passes, 2, "{read_by:?}");
        assert!(late.second_pass.unwrap().contains("fd 3 of pid 10 changed"));
    }
}

#[test]
fn threads_with_spans_are_told_once_when_first_read_ahead() {
    let path = std::env::temp_dir().join(format!("mlprof-stream-spans-{}.bin", std::process::id()));
    let run = TempRun::new(path);
    let mut w =
        RunWriter::create(run.path(), &RunInfo { start_mono_ns: START, ..RunInfo::default() }).unwrap();
    w.write_process(&ProcessInfo { pid: 10, ppid: 1, start_ns: START, ..Default::default() }).unwrap();
    let task = |tid, start| {
        IttSpan { kind: Func::IttTask as u16, pid: 10, tid, start, dur: 10, ..IttSpan::default() }
            .into_event()
    };
    let call =
        Event { kind: Func::Read as u16, pid: 10, tid: 11, fd: -1, start: START + 1, ..Event::default() };
    w.write_events(&[call, task(10, START + 2), task(10, START + 3)]).unwrap();
    w.write_events(&[task(11, START + 4), task(10, START + 5)]).unwrap();
    w.finish(&RunEnd::default()).unwrap();
    for read_by in BOTH {
        let exact = read(run.path(), &spec(read_by, LOOKAHEAD_EVENTS)).unwrap();
        // Both frames are read ahead before the first is handed out: both threads are told
        // then, in the order found, and never again.
        assert_eq!(
            exact.value,
            ["E3 paths [] spans [(10, 10), (10, 11)]", "E2 paths [] spans []"],
            "{read_by:?}"
        );
        // Not read ahead: each thread is told with the frame that shows it.
        let exact = read(run.path(), &spec(read_by, 0)).unwrap();
        assert_eq!(
            exact.value,
            ["E3 paths [] spans [(10, 10)]", "E2 paths [] spans [(10, 11)]"],
            "{read_by:?}"
        );
    }
}

#[test]
fn corrupt_data_fails_a_strict_pass_and_ends_a_tolerant_one() {
    let run = testing::write("stream-corrupt");
    let mut bytes = std::fs::read(run.path()).unwrap();
    // The last frame's header scribbled over: a frame kind and length no writer makes.
    let at = bytes.len() - 24;
    bytes[at..at + 8].fill(0xff);
    let corrupt = TempRun::new(run.path().with_extension("corrupt.bin"));
    std::fs::write(corrupt.path(), &bytes).unwrap();
    let meta = RunMeta::load_metadata(corrupt.path()).unwrap();
    for read_by in BOTH {
        let strict = read_exactly(corrupt.path(), &meta, &spec(read_by, LOOKAHEAD_EVENTS), pass_log);
        let message = strict.err().expect("a strict pass fails");
        assert!(message.starts_with(&corrupt.path().display().to_string()), "{message}");
        // Tolerant: what precedes the corruption is handed out, and the stream says why it
        // stopped.
        let tolerant = StreamSpec { strict: false, ..spec(read_by, LOOKAHEAD_EVENTS) };
        let mut why = None;
        let exact = read_exactly(corrupt.path(), &meta, &tolerant, |stream| {
            let log = pass_log(stream)?;
            why = stream.read_error().map(str::to_string);
            Ok::<_, PassError<String>>(log)
        })
        .unwrap();
        assert!(exact.value[0].starts_with("E5"), "{read_by:?}: {:?}", exact.value);
        assert!(why.is_some_and(|w| w.starts_with(&corrupt.path().display().to_string())), "{read_by:?}");
    }
}
