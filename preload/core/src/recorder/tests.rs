//! The record API against a ring in ordinary memory: what a hook's `Span` writes, the errno it
//! leaves, strings sent once, calls that must pass through, and exact aggregate counts.

use mlprof_format::func::{AGG_SLOT_GETTIMEOFDAY, Func};
use mlprof_format::record::{Event, FLAG_ERROR, FLAG_NESTED, GpuCall, IttSpan};

use super::{AggregateCall, Span};
use crate::guard;
use crate::testing::{joined_ring, take_this_threads_items, this_threads_drops, this_threads_interrupted};

fn read_event(fd: i32, asked: u64, done: i64) -> Event {
    Event { fd, ret: done, arg: asked, arg2: done.max(0) as u64, ..Event::default() }
}

#[test]
fn a_finished_span_is_one_record_with_identity_and_times() {
    joined_ring();
    let span = Span::begin(Func::Read).expect("a joined process records");
    span.finish(read_event(3, 8, 5), Func::Read, false);
    let (records, _) = take_this_threads_items();
    assert_eq!(records.len(), 1);
    let record = records[0];
    assert_eq!(record.kind, Func::Read as u16);
    assert_eq!(record.pid, std::process::id());
    assert_eq!(record.tid, crate::sys::gettid());
    assert_eq!((record.fd, record.ret, record.arg, record.arg2), (3, 5, 8, 5));
    assert_eq!((record.errno, record.flags), (0, 0));
    assert!(record.start > 0 && record.dur < 1_000_000_000, "times in monotonic ns: {record:?}");
}

#[test]
fn a_failed_call_is_flagged_and_the_application_keeps_its_errno() {
    joined_ring();
    let span = Span::begin(Func::Open).unwrap();
    guard::set_errno(libc::ENOENT);
    span.finish(Event { fd: -1, ret: -1, ..Event::default() }, Func::Open, true);
    assert_eq!(guard::errno(), libc::ENOENT);
    let (records, _) = take_this_threads_items();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].errno, libc::ENOENT);
    assert_eq!(records[0].flags & FLAG_ERROR, FLAG_ERROR);
}

#[test]
fn a_path_is_sent_once_per_process_then_referenced_by_id() {
    joined_ring();
    let path = c"/tmp/mlprof-unit-test/a path sent once";
    let id = mlprof_format::string_id(path.to_bytes());
    for _ in 0..3 {
        let span = Span::begin(Func::Open64).unwrap();
        // Safety: a NUL-terminated literal.
        unsafe {
            span.finish_with_path(
                Event { fd: 7, ret: 7, ..Event::default() },
                Func::Open64,
                false,
                path.as_ptr(),
            )
        };
    }
    let (records, strings) = take_this_threads_items();
    assert_eq!(strings, vec![(id, path.to_bytes().to_vec())]);
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| r.arg2 == id && r.kind == Func::Open64 as u16));
}

#[test]
fn our_own_calls_pass_through_unrecorded_and_uncounted() {
    joined_ring();
    let state = guard::current().unwrap();
    let inside = state.internal(|| Span::begin(Func::Write).is_none());
    assert!(inside, "a call made by our own bookkeeping is not recorded");
    Span::begin(Func::Write).unwrap().finish(read_event(1, 1, 1), Func::Write, false);
    let (records, _) = take_this_threads_items();
    assert_eq!(records.len(), 1);
    assert_eq!(this_threads_drops(), 0, "our own calls are not drops");
}

#[test]
fn a_call_that_interrupts_a_record_is_counted_as_dropped() {
    joined_ring();
    Span::begin(Func::Write).unwrap().finish(read_event(1, 1, 1), Func::Write, false);
    let before = this_threads_interrupted();
    // A signal handler's call arriving while this thread holds the guard for a record.
    let state = guard::current().unwrap();
    state.in_hook.set(true);
    assert!(Span::begin(Func::Write).is_none());
    assert!(Span::begin(Func::Read).is_none());
    state.in_hook.set(false);
    // The next record of the thread adds them to its lane's count of interrupted calls.
    Span::begin(Func::Write).unwrap().finish(read_event(1, 1, 1), Func::Write, false);
    assert_eq!(this_threads_interrupted(), before + 2);
    assert_eq!(this_threads_drops(), 0, "not a full lane");
    assert_eq!(take_this_threads_items().0.len(), 2);
}

#[test]
fn aggregated_calls_are_counted_exactly_and_one_in_64_is_timed() {
    let ring = joined_ring();
    for _ in 0..1000 {
        AggregateCall::begin(AGG_SLOT_GETTIMEOFDAY).unwrap().finish();
    }
    let lane = guard::current().unwrap().lane.get() - 1;
    let counters = ring.aggregate_slot(lane, AGG_SLOT_GETTIMEOFDAY).unwrap();
    let load = |c: &core::sync::atomic::AtomicU64| c.load(core::sync::atomic::Ordering::Relaxed);
    assert_eq!(load(&counters.count), 1000);
    assert_eq!(load(&counters.timed), 1000 / 64);
    assert!(take_this_threads_items().0.is_empty(), "aggregated calls write no records");
}

#[test]
fn driver_calls_inside_a_runtime_call_are_marked_nested() {
    joined_ring();
    let status = crate::gpu::outer_call(
        Func::CudaMemcpy,
        || crate::gpu::driver_call(Func::CuMemcpy, || 0, |_| GpuCall::default()),
        |_| GpuCall::default(),
    );
    assert_eq!(status, 0);
    crate::gpu::driver_call(Func::CuMemcpy, || 1, |_| GpuCall::default());
    let (records, _) = take_this_threads_items();
    let flags: Vec<(u16, u16)> = records.iter().map(|r| (r.kind, r.flags)).collect();
    assert_eq!(
        flags,
        vec![
            (Func::CuMemcpy as u16, FLAG_NESTED),
            (Func::CudaMemcpy as u16, 0),
            (Func::CuMemcpy as u16, FLAG_ERROR),
        ]
    );
}

#[test]
fn itt_tasks_nest_by_depth_and_name_themselves_once() {
    joined_ring();
    // Safety: NUL-terminated literals, as a static part would pass.
    let (domain, outer, inner) = unsafe {
        (
            crate::itt::domain(c"unit.domain".as_ptr()),
            crate::itt::string_handle(c"outer".as_ptr()),
            crate::itt::string_handle(c"inner".as_ptr()),
        )
    };
    let null = crate::itt::IttId::default();
    // Safety: objects made by the interning functions above.
    unsafe {
        crate::itt::task_begin(domain, crate::itt::IttId { d1: 7, ..null }, null, outer);
        crate::itt::task_begin(domain, null, null, inner);
    }
    crate::itt::task_end();
    crate::itt::task_end();
    crate::itt::task_end(); // unbalanced: ignored
    let (records, strings) = take_this_threads_items();
    let spans: Vec<IttSpan> = records.iter().map(IttSpan::from_event).collect();
    assert_eq!(spans.len(), 2, "{spans:?}");
    let name = |bytes: &[u8]| mlprof_format::string_id(bytes);
    assert_eq!((spans[0].name, spans[0].depth), (name(b"inner"), 1));
    assert_eq!((spans[1].name, spans[1].depth, spans[1].id), (name(b"outer"), 0, 7));
    assert!(spans.iter().all(|s| s.kind == Func::IttTask as u16 && s.domain == name(b"unit.domain")));
    assert!(
        spans[1].start <= spans[0].start && spans[0].start + spans[0].dur <= spans[1].start + spans[1].dur
    );
    let mut names: Vec<&[u8]> = strings.iter().map(|(_, bytes)| bytes.as_slice()).collect();
    names.sort();
    assert_eq!(names, vec![&b"inner"[..], b"outer", b"unit.domain"]);
}

#[test]
fn a_signal_handlers_clock_read_during_a_record_is_counted_exactly() {
    let ring = joined_ring();
    AggregateCall::begin(AGG_SLOT_GETTIMEOFDAY).unwrap().finish();
    let state = guard::current().unwrap();
    // While the thread holds the guard (writing a record), a handler's clock reads.
    state.in_hook.set(true);
    for _ in 0..3 {
        assert!(AggregateCall::begin(AGG_SLOT_GETTIMEOFDAY).is_none());
    }
    state.in_hook.set(false);
    let lane = state.lane.get() - 1;
    let count = ring
        .aggregate_slot(lane, AGG_SLOT_GETTIMEOFDAY)
        .unwrap()
        .count
        .load(core::sync::atomic::Ordering::Relaxed);
    assert_eq!(count, 4, "counted, not lost");
    assert_eq!(this_threads_interrupted(), 0);
}
