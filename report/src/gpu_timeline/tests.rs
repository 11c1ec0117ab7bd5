use mlprof_format::gpu::{ACTIVITY_COUNTS, ACTIVITY_MEMSET, KIND_GPU_ACTIVITY};

use super::*;

fn record(what: u8, pid: u32, correlation: u32, start: u64, dur: u64) -> GpuActivity {
    GpuActivity { kind: KIND_GPU_ACTIVITY, what, pid, correlation, start, dur, ..GpuActivity::default() }
}

fn state(pid: u32, state: GpuTimelineState, code: u64) -> GpuActivity {
    GpuActivity { detail: state as u8, value: code, ..record(ACTIVITY_STATE, pid, 0, 0, 0) }
}

#[test]
fn busy_time_is_the_union_of_a_devices_work() {
    // Kernels at 0–10 and 5–20 overlap (concurrent streams): busy 20, not 25. A copy at 30–40
    // adds 10; the gap 20–30 is idle. Over a 100 ns job: busy 30, idle 70, all of it "other"
    // (no host calls of process 1 were seen).
    let mut tally = TimelineTally::default();
    tally.add(&[
        state(1, GpuTimelineState::Started, 0),
        record(ACTIVITY_KERNEL, 1, 1, 0, 10),
        record(ACTIVITY_KERNEL, 1, 2, 5, 15),
        GpuActivity { detail: 1, value: 4096, ..record(ACTIVITY_MEMCPY, 1, 3, 30, 10) },
    ]);
    let timeline = tally.finish(&RunMeta::default(), (0, 100), true);
    assert_eq!(timeline.source, Some("cupti"));
    let idle_by = IdleBy { other: 70, ..IdleBy::default() };
    let busy_regions = vec![(0, 20), (30, 40)];
    assert_eq!(
        timeline.devices,
        [DeviceTime {
            index: 0,
            busy_ns: 30,
            busy_fraction: 0.3,
            idle_ns: 70,
            main_pid: 1,
            idle_by,
            busy_regions
        }]
    );
    // Over 4 slices of 25 ns: busy 20 of the first, 10 of the second (30–40), none after.
    assert_eq!(timeline.devices[0].busy_by_bin(0, 25, 4), [0.8, 0.4, 0.0, 0.0]);
    assert_eq!(timeline.copies["H2D"], CopyTime { count: 1, bytes: 4096, gpu_ns: 10 });
    assert_eq!(timeline.kernels, [KernelTime { name: "(unnamed kernel)".into(), count: 2, gpu_ns: 25 }]);
}

#[test]
fn work_is_matched_to_links_of_its_own_process_and_drops_add_up() {
    let mut tally = TimelineTally::default();
    let mut counts = record(ACTIVITY_COUNTS, 1, 0, 0, 0);
    counts.grid = 3; // CUPTI dropped 3
    counts.set_ring_dropped(2);
    // Process 1's link 7 comes after its kernel (CUPTI is late); process 2's kernel 7 has no
    // link of its own.
    tally.add(&[
        state(1, GpuTimelineState::Started, 0),
        record(ACTIVITY_KERNEL, 1, 7, 0, 1),
        record(ACTIVITY_KERNEL, 2, 7, 0, 1),
        record(ACTIVITY_MEMSET, 1, 8, 0, 1),
    ]);
    tally.add(&[record(ACTIVITY_LINK, 1, 7, 0, 0), counts]);
    let timeline = tally.finish(&RunMeta::default(), (0, 10), true);
    assert_eq!((timeline.unmatched, timeline.dropped), (2, 5));
}

#[test]
fn without_a_timeline_the_reason_is_the_first_process_s() {
    let mut tally = TimelineTally::default();
    tally.add(&[state(9, GpuTimelineState::Failed, 15), state(12, GpuTimelineState::Off, 0)]);
    let timeline = tally.finish(&RunMeta::default(), (0, 10), true);
    assert_eq!(timeline.source, None);
    let why = timeline.unavailable.unwrap();
    assert!(why.starts_with("pid 9: CUPTI refused to collect (CUPTI_ERROR_NOT_INITIALIZED"), "{why}");
    assert!(timeline.notes.is_empty(), "notes are for runs that have a timeline");
    let none = TimelineTally::default().finish(&RunMeta::default(), (0, 10), false);
    assert_eq!(none.unavailable.as_deref(), Some("no process used CUDA"));
}

#[test]
fn a_process_that_stood_down_is_noted_beside_those_that_collected() {
    let mut tally = TimelineTally::default();
    tally.add(&[state(1, GpuTimelineState::Started, 0), state(2, GpuTimelineState::StoodDown, 39)]);
    let timeline = tally.finish(&RunMeta::default(), (0, 10), true);
    assert_eq!(timeline.unavailable, None);
    assert_eq!(timeline.notes.len(), 1);
    assert!(timeline.notes[0].starts_with("pid 2: another tool holds CUPTI"), "{:?}", timeline.notes);
}

#[test]
fn idle_time_is_split_by_what_the_main_process_did_first_thing_first() {
    use mlprof_format::func::Func;
    use mlprof_format::record::{Event, IttSpan};
    let meta = RunMeta::default();
    let mut tally = TimelineTally::default();
    tally.candidates.insert(1);
    // The GPU works 0–10 (a kernel) and 30–40 (a copy) of a 0–100 ns job: 80 ns idle.
    tally.add(&[record(ACTIVITY_KERNEL, 1, 1, 0, 10), record(ACTIVITY_MEMCPY, 1, 2, 30, 10)]);
    let call =
        |func: Func, start, dur| Event { kind: func as u16, pid: 1, tid: 1, start, dur, ..Event::default() };
    // Process 1 synchronizes 5–25 (15 ns of it while idle: 5–10 the kernel ran), launches 25–28
    // (an op: 3 ns), waits for a batch 35–60 (the copy runs until 40: 20 ns) and makes a launch
    // inside that wait (data wait comes first: nothing more). The rest, 80 − 38 = 42 ns, is other.
    let wait = IttSpan {
        kind: Func::IttTask as u16,
        pid: 1,
        tid: 1,
        start: 35,
        dur: 25,
        domain: crate::pipeline::DATA,
        name: crate::pipeline::WAIT,
        ..IttSpan::default()
    };
    for (func, event) in [
        (Func::CudaStreamSynchronize, call(Func::CudaStreamSynchronize, 5, 20)),
        (Func::CuLaunchKernel, call(Func::CuLaunchKernel, 25, 3)),
        (Func::IttTask, wait.into_event()),
        (Func::CuLaunchKernel, call(Func::CuLaunchKernel, 45, 5)),
    ] {
        tally.add_host(func, &event, false);
    }
    // Another process's calls do not count: it is not the device's main.
    tally.add_host(
        Func::CudaStreamSynchronize,
        &Event { pid: 2, ..call(Func::CudaStreamSynchronize, 60, 30) },
        false,
    );
    let timeline = tally.finish(&meta, (0, 100), true);
    let device = &timeline.devices[0];
    assert_eq!((device.busy_ns, device.idle_ns, device.main_pid), (20, 80, 1));
    assert_eq!(device.idle_by, IdleBy { data_wait: 20, sync: 15, io: 0, ops: 3, other: 42 });
}

#[test]
fn busy_and_idle_time_count_within_the_capture_ranges_only() {
    use mlprof_format::range::{CaptureInfo, RangeEdge};
    let edge = |opened, time_ns| RangeEdge { range: 1, opened, time_ns, ..RangeEdge::default() };
    // One range, 20–60 of a 0–100 ns job; the GPU works 0–10, 30–40 and 50–70.
    let meta = RunMeta {
        capture: Some(CaptureInfo::default()),
        range_edges: vec![edge(true, 20), edge(false, 60)],
        ..RunMeta::default()
    };
    let mut tally = TimelineTally::default();
    tally.candidates.insert(1);
    tally.add(&[
        record(ACTIVITY_KERNEL, 1, 1, 0, 10),
        record(ACTIVITY_KERNEL, 1, 2, 30, 10),
        record(ACTIVITY_KERNEL, 1, 3, 50, 20),
    ]);
    let device = &tally.finish(&meta, (0, 100), true).devices[0];
    // Busy 30–40 and 50–60 of the 40 ns range: 20 busy, 20 idle.
    assert_eq!((device.busy_ns, device.idle_ns), (20, 20));
    assert_eq!(device.busy_fraction, 0.5);
}
