use mlprof_format::gpu::{ACTIVITY_COUNTS, KIND_GPU_ACTIVITY};

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
    // adds 10; the gap 20–30 is idle. Over a 100 ns job: busy 30, idle 70.
    assert_eq!(union_ns(vec![(5, 20), (0, 10), (30, 40)]), 30);
    assert_eq!(union_ns(vec![(0, 10), (2, 3), (10, 12)]), 12, "contained and touching intervals");
    let mut tally = TimelineTally::default();
    tally.add(&[
        state(1, GpuTimelineState::Started, 0),
        record(ACTIVITY_KERNEL, 1, 1, 0, 10),
        record(ACTIVITY_KERNEL, 1, 2, 5, 15),
        GpuActivity { detail: 1, value: 4096, ..record(ACTIVITY_MEMCPY, 1, 3, 30, 10) },
    ]);
    let timeline = tally.finish(&RunMeta::default(), 100, true);
    assert_eq!(timeline.source, Some("cupti"));
    assert_eq!(timeline.devices, [DeviceTime { index: 0, busy_ns: 30, busy_fraction: 0.3, idle_ns: 70 }]);
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
    let timeline = tally.finish(&RunMeta::default(), 10, true);
    assert_eq!((timeline.unmatched, timeline.dropped), (2, 5));
}

#[test]
fn without_a_timeline_the_reason_is_the_first_process_s() {
    let mut tally = TimelineTally::default();
    tally.add(&[state(9, GpuTimelineState::Failed, 15), state(12, GpuTimelineState::Off, 0)]);
    let timeline = tally.finish(&RunMeta::default(), 10, true);
    assert_eq!(timeline.source, None);
    let why = timeline.unavailable.unwrap();
    assert!(why.starts_with("pid 9: CUPTI refused to collect (CUPTI_ERROR_NOT_INITIALIZED"), "{why}");
    assert!(timeline.notes.is_empty(), "notes are for runs that have a timeline");
    let none = TimelineTally::default().finish(&RunMeta::default(), 10, false);
    assert_eq!(none.unavailable.as_deref(), Some("no process used CUDA"));
}

#[test]
fn a_process_that_stood_down_is_noted_beside_those_that_collected() {
    let mut tally = TimelineTally::default();
    tally.add(&[state(1, GpuTimelineState::Started, 0), state(2, GpuTimelineState::StoodDown, 39)]);
    let timeline = tally.finish(&RunMeta::default(), 10, true);
    assert_eq!(timeline.unavailable, None);
    assert_eq!(timeline.notes.len(), 1);
    assert!(timeline.notes[0].starts_with("pid 2: another tool holds CUPTI"), "{:?}", timeline.notes);
}
