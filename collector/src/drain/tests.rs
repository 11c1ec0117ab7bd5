//! The drain on a heap ring: what a pass writes, in which order, and which lanes it frees.

use mlprof_format::func::Func;
use mlprof_format::ring::{LANE_FREE, RingGeometry};

use super::testing::*;
use super::{BATCH_EVENTS, DrainedRing};
use crate::testing::dead_pid;

/// Four lanes of 4096 records: room for every test's records without a lane filling.
const GEOMETRY: RingGeometry = RingGeometry { lane_count: 4, lane_capacity: 4096 };

#[test]
fn records_of_all_lanes_are_written_in_end_time_order() {
    let (mut drainer, file) = drainer("order", GEOMETRY);
    let view = drainer.segment().view();
    let pid = std::process::id();
    let (a, b) = (claim(view, pid, 101, 0), claim(view, pid, 102, 0));
    // Each thread's calls end 20 ns apart, the two threads' interleaved.
    push_all(view, a.index, &[call(Func::Read, 5, 10), call(Func::Read, 25, 30), call(Func::Read, 45, 50)]);
    push_all(
        view,
        b.index,
        &[call(Func::Write, 0, 20), call(Func::Write, 35, 40), call(Func::Write, 59, 60)],
    );
    assert_eq!(drainer.drain_once().unwrap(), 6);
    let totals = drainer.finish().unwrap();
    assert_eq!((totals.events, totals.threads), (6, 2));
    let frames = file.frames();
    let written = event_frames(&frames);
    assert_eq!(written.len(), 1, "one pass, one frame");
    let order: Vec<(u64, u32, u32)> = written[0].iter().map(|e| (end(e), e.pid, e.tid)).collect();
    assert_eq!(
        order,
        [(10, pid, 101), (20, pid, 102), (30, pid, 101), (40, pid, 102), (50, pid, 101), (60, pid, 102)],
        "sorted by end time, each event named by its lane's owner"
    );
}

#[test]
fn frames_of_a_burst_are_small_and_follow_each_other_in_time() {
    let (mut drainer, file) = drainer("burst", GEOMETRY);
    let view = drainer.segment().view();
    let pid = std::process::id();
    let (a, b) = (claim(view, pid, 101, 0), claim(view, pid, 102, 0));
    // 3,000 calls each: lane a's call i ends at 2i + 2, lane b's at 2i + 3.
    for i in 0..3000 {
        push_all(view, a.index, &[call(Func::Read, 2 * i + 1, 2 * i + 2)]);
        push_all(view, b.index, &[call(Func::Read, 2 * i + 2, 2 * i + 3)]);
    }
    assert_eq!(drainer.drain_once().unwrap(), 6000);
    drainer.finish().unwrap();
    let frames = file.frames();
    let sizes: Vec<usize> = event_frames(&frames).iter().map(|f| f.len()).collect();
    // A round gives each of the two busy lanes a share of BATCH_EVENTS / 2 = 1024 events, up
    // to the earlier of the times their 1024th events end: lane a's ends at 2·1023 + 2 = 2048,
    // by which lane b has 1023 (its 1024th ends at 2049): 2,047 events. The second round ends
    // at lane b's 1024th next event (4095): 1,023 + 1,024 again. The 1,906 left are fewer
    // than a share on either lane: the last round takes them all.
    assert_eq!(sizes, [2047, 2047, 1906]);
    assert!(sizes.iter().all(|&n| n <= BATCH_EVENTS));
    let ends: Vec<u64> = events(&frames).iter().map(end).collect();
    assert_eq!(ends, (2..6002).collect::<Vec<u64>>(), "in time order within and across frames");
}

#[test]
fn an_event_waits_for_the_path_another_lane_defines() {
    let (mut drainer, file) = drainer("path", GEOMETRY);
    let view = drainer.segment().view();
    let pid = std::process::id();
    // The lane that needs the path is the one a pass takes first.
    let lanes = claim_in_order(view, &[(pid, 101, 0), (pid, 102, 0)]);
    let (needs, defines) = (lanes[0], lanes[1]);
    const PATH: u64 = 0xfeed;
    push_all(view, needs.index, &[call(Func::Read, 5, 10), open_path(PATH, 20), call(Func::Read, 29, 30)]);
    push_string(view, defines.index, PATH, b"/data/shard-0");
    push_all(view, defines.index, &[call(Func::Read, 24, 25)]);
    drainer.drain_once().unwrap();
    drainer.finish().unwrap();
    let frames = file.frames();
    let string = frames.iter().position(|f| matches!(f, Written::String(PATH))).unwrap();
    let first_events = frames.iter().position(|f| matches!(f, Written::Events(_))).unwrap();
    assert!(string < first_events, "the path is in the file before the event that names it");
    let ends: Vec<(u64, u16)> = events(&frames).iter().map(|e| (end(e), e.kind)).collect();
    assert_eq!(ends, [(10, 10), (20, 1), (25, 10), (30, 10)], "one frame, in time order");
}

#[test]
fn an_event_whose_path_never_comes_is_written_at_the_end() {
    let (mut drainer, file) = drainer("lost-path", GEOMETRY);
    let view = drainer.segment().view();
    let lane = claim(view, std::process::id(), 101, 0);
    push_all(view, lane.index, &[open_path(0xdead, 10), call(Func::Read, 19, 20)]);
    // The open waits aside (its lane's later records go on), until the run ends.
    assert_eq!(drainer.drain_once().unwrap(), 2);
    drainer.finish().unwrap();
    let frames = file.frames();
    let written: Vec<Vec<u64>> = event_frames(&frames).iter().map(|f| f.iter().map(end).collect()).collect();
    assert_eq!(written, [vec![20], vec![10]]);
}

/// Two threads of one process run the same line: the one that met it first defined the site
/// on its own lane, which the pass takes after the other's (the feeder threads of a
/// DataLoader's index queues lost sites this way, at random, when the lanes came in that
/// order).
#[test]
fn an_event_waits_for_the_site_another_lane_defines() {
    let (mut drainer, file) = drainer("site", GEOMETRY);
    let view = drainer.segment().view();
    let pid = std::process::id();
    let lanes = claim_in_order(view, &[(pid, 101, 0), (pid, 102, 0)]);
    let (uses, defines) = (lanes[0], lanes[1]);
    const FILE: u64 = 0xf11e;
    push_all(view, uses.index, &[at_site(7, call(Func::Read, 5, 10)), call(Func::Read, 19, 20)]);
    push_string(view, defines.index, FILE, b"train.py");
    push_all(view, defines.index, &[site_def(7, FILE, 42), at_site(7, call(Func::Read, 14, 15))]);
    drainer.drain_once().unwrap();
    drainer.finish().unwrap();
    let frames = file.frames();
    let site = frames.iter().find_map(|f| if let Written::Site(id, 42) = f { Some(*id) } else { None });
    let site = site.expect("the site's definition");
    let written: Vec<(u64, u32, u32)> =
        events_and_sites(&frames).iter().map(|(e, s)| (end(e), e.tid, *s)).collect();
    // Both threads' calls at line 42 carry its site; all in one frame, in time order.
    assert_eq!(written, [(10, 101, site), (15, 102, site), (20, 101, 0)]);
    assert_eq!(event_frames(&frames).len(), 1);
}

/// A record whose site is never defined (a lost definition) is written at the end, without
/// one, and counted.
#[test]
fn an_event_whose_site_never_comes_is_written_at_the_end_without_one() {
    let (mut drainer, file) = drainer("lost-site", GEOMETRY);
    let view = drainer.segment().view();
    let lane = claim(view, std::process::id(), 101, 0);
    push_all(view, lane.index, &[at_site(9, call(Func::Read, 5, 10)), call(Func::Read, 19, 20)]);
    assert_eq!(drainer.drain_once().unwrap(), 2);
    assert_eq!(drainer.metadata.sites.undefined, 0, "not given up before the end");
    let undefined = drainer.finish().unwrap().sites_undefined;
    let written: Vec<(u64, u32)> =
        events_and_sites(&file.frames()).iter().map(|(e, s)| (end(e), *s)).collect();
    assert_eq!(written, [(20, 0), (10, 0)]);
    assert_eq!(undefined, 1);
}

#[test]
fn a_process_is_named_by_its_command_line_and_a_fork_child_by_its_parents() {
    let (mut drainer, file) = drainer("process", GEOMETRY);
    let view = drainer.segment().view();
    let (parent, child) = (std::process::id(), dead_pid());
    // The child's start comes first in the pass, before its parent's command line is defined.
    let lanes = claim_in_order(view, &[(child, child, 0), (parent, parent, 0)]);
    let (child_lane, parent_lane) = (lanes[0], lanes[1]);
    const ARGV: u64 = 0xa7;
    push_all(view, child_lane.index, &[process_start(parent, ARGV, 200, true)]);
    push_string(view, parent_lane.index, ARGV, b"python\0train.py\0--epochs\x002\0");
    push_all(view, parent_lane.index, &[process_start(1, ARGV, 100, false)]);
    drainer.drain_once().unwrap();
    let totals = drainer.finish().unwrap();
    assert_eq!(totals.processes, 2);
    let frames = file.frames();
    let processes = processes(&frames);
    let named = |pid: u32| processes.iter().find(|p| p.pid == pid).unwrap();
    let argv = ["python", "train.py", "--epochs", "2"];
    assert_eq!((named(parent).ppid, named(parent).start_ns, named(parent).forked), (1, 100, false));
    assert_eq!(named(parent).argv, argv);
    assert_eq!((named(child).ppid, named(child).start_ns, named(child).forked), (parent, 200, true));
    assert_eq!(named(child).argv, argv, "a fork child runs its parent's command line");
}

#[test]
fn records_out_of_end_order_do_not_stall_the_pass() {
    let (mut drainer, file) = drainer("out-of-order", GEOMETRY);
    let view = drainer.segment().view();
    let lane = claim(view, std::process::id(), 101, 0);
    // A call that ends at 5,000, then 2,047 that end at 1 to 2,047: the lane's share of a
    // round (all of BATCH_EVENTS = 2,048, the only busy lane) reaches 2,047, before its first
    // call ends. The first round takes nothing; the next goes by count alone.
    push_all(view, lane.index, &[call(Func::Read, 4999, 5000)]);
    for end in 1..=2047 {
        push_all(view, lane.index, &[call(Func::Read, end - 1, end)]);
    }
    assert_eq!(drainer.drain_once().unwrap(), 2048);
    drainer.finish().unwrap();
    let frames = file.frames();
    let written = event_frames(&frames);
    assert_eq!(written.len(), 1);
    let ends: Vec<u64> = written[0].iter().map(end).collect();
    assert_eq!(ends, (1..=2047).chain([5000]).collect::<Vec<u64>>());
}

#[test]
fn a_rank_record_names_the_process_that_starts_next_on_its_lane_a_pass_later_too() {
    use mlprof_format::rank::RankRecord;
    let (mut drainer, file) = drainer("rank", GEOMETRY);
    hold_liveness(&mut drainer);
    let (ranked, unranked) = (std::process::id(), dead_pid());
    let lanes = claim_in_order(drainer.segment().view(), &[(ranked, ranked, 0), (unranked, unranked, 0)]);
    let rank = RankRecord {
        rank: 3,
        source: 0,
        local_rank: Some(1),
        world_size: Some(8),
        local_world_size: Some(2),
        node_rank: Some(1),
    };
    let view = drainer.segment().view();
    push_string(view, lanes[0].index, 0xa7, b"python\0train.py\0");
    push_all(view, lanes[0].index, &[rank.to_event()]);
    // The pass ends between the rank record and the start it comes before.
    drainer.drain_once().unwrap();
    let view = drainer.segment().view();
    push_all(view, lanes[0].index, &[process_start(1, 0xa7, 100, false)]);
    push_all(view, lanes[1].index, &[process_start(ranked, 0xa7, 200, true)]);
    drainer.drain_once().unwrap();
    drainer.finish().unwrap();
    let frames = file.frames();
    let processes = processes(&frames);
    let rank_of = |pid: u32| processes.iter().find(|p| p.pid == pid).unwrap().rank.clone();
    assert_eq!(rank_of(ranked), Some(rank.info()));
    assert_eq!(rank_of(unranked), None, "a rank belongs to its own lane's next process only");
}

#[test]
fn a_retired_lane_is_drained_and_freed_in_the_pass() {
    let (mut drainer, file) = drainer("retired", GEOMETRY);
    let view = drainer.segment().view();
    let lane = claim(view, std::process::id(), 101, 0);
    push_all(view, lane.index, &[call(Func::Read, 5, 10), call(Func::Close, 15, 20)]);
    // The thread exited: it retired its lane itself.
    view.retire(lane);
    assert_eq!(drainer.drain_once().unwrap(), 2);
    let view = drainer.segment().view();
    assert_eq!(state(view, lane.index), LANE_FREE, "free for the next thread");
    assert_eq!(view.lane(lane.index).unwrap().head.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(drainer.segment().freed, 1);
    let totals = drainer.finish().unwrap();
    assert_eq!((totals.events, totals.threads), (2, 1));
    assert_eq!(events(&file.frames()).len(), 2);
}

#[test]
fn records_of_a_lane_claimed_as_another_user_are_refused() {
    let (mut drainer, file) = drainer("refused", GEOMETRY);
    let view = drainer.segment().view();
    let lane = view.claim(std::process::id(), 101, uid() + 1, 0, false).unwrap();
    push_all(
        view,
        lane.index,
        &[call(Func::Read, 5, 10), call(Func::Read, 15, 20), call(Func::Read, 25, 30)],
    );
    assert_eq!(drainer.drain_once().unwrap(), 3, "taken, so that the lane does not fill");
    let totals = drainer.finish().unwrap();
    assert_eq!((totals.refused_records, totals.events), (3, 0));
    let frames = file.frames();
    assert!(events(&frames).is_empty());
    assert!(!frames.iter().any(|f| matches!(f, Written::Thread)), "not even its thread is named");
}

#[test]
fn a_claim_the_count_missed_is_found_by_the_tenth_pass() {
    let (mut drainer, _file) = drainer("uncounted", GEOMETRY);
    hold_liveness(&mut drainer);
    // Pass 1 looks at every lane: nothing in use yet.
    assert_eq!(drainer.drain_once().unwrap(), 0);
    let view = drainer.segment().view();
    let lane = claim(view, std::process::id(), gettid(), 0);
    // As if the claim's count was read before the claimer added it.
    view.header().lanes_claimed.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    push_all(view, lane.index, &[call(Func::Read, 5, 10)]);
    // Passes 2 to 9 read only the lanes known in use; pass 10 (LOOK_AT_ALL_EVERY) reads every
    // lane's state again.
    for pass in 2..=9 {
        assert_eq!(drainer.drain_once().unwrap(), 0, "pass {pass}");
    }
    assert_eq!(drainer.drain_once().unwrap(), 1, "pass 10");
    // A counted claim is seen by the next pass.
    let view = drainer.segment().view();
    let counted = claim(view, std::process::id(), gettid(), 0);
    push_all(view, counted.index, &[call(Func::Read, 15, 20)]);
    assert_eq!(drainer.drain_once().unwrap(), 1, "pass 11");
}

#[test]
fn the_sleep_lasts_until_the_busiest_lane_would_be_an_eighth_full() {
    use std::time::Duration;
    let geometry = RingGeometry { lane_count: 1, lane_capacity: 65536 };
    let (mut drainer, _file) = drainer("sleep", geometry);
    let ms = Duration::from_millis;
    // Nothing taken: the longest sleep, 100 ms.
    assert_eq!(drainer.next_sleep(ms(100)), ms(100));
    // An eighth of the lane is 8,192 records: taken over 100 ms, the lane takes 100 ms to be an
    // eighth full again; over 10 ms, 10 ms; over a microsecond, far less than the 1 ms floor.
    drainer.pass.busiest = 8192;
    assert_eq!(drainer.next_sleep(ms(100)), ms(100));
    assert_eq!(drainer.next_sleep(ms(10)), ms(10));
    assert_eq!(drainer.next_sleep(Duration::from_micros(1)), ms(1));
    // A pass that took a quarter of a lane (16,384) or more says a burst outran the sleep.
    assert!(!drainer.is_busy());
    drainer.pass.busiest = 16384;
    assert!(drainer.is_busy());
}

#[test]
fn counters_are_written_when_they_change_and_totalled_at_the_end() {
    use mlprof_format::runfile::{AggregateSample, DropSample};
    let (mut drainer, file) = drainer("counters", GEOMETRY);
    hold_liveness(&mut drainer);
    let view = drainer.segment().view();
    let lane = claim(view, std::process::id(), 101, 0);
    // Three CLOCK_MONOTONIC reads (aggregate slot 1), two of them timed at 50 ns; 4 records
    // dropped (a full lane) and 1 interrupted by a signal handler; 2 records of threads that
    // found no lane.
    let slot = view.aggregate_slot(lane.index, 1).unwrap();
    for _ in 0..3 {
        slot.count_call();
    }
    for _ in 0..2 {
        slot.add_timing(50);
    }
    view.count_drops(lane.index, 4);
    view.count_interrupted(lane.index, 1);
    for _ in 0..2 {
        view.count_no_lane_drop(999);
    }
    drainer.drain_once().unwrap();
    drainer.snapshot_all().unwrap();
    drainer.snapshot_all().unwrap();
    // One more read: the stream's last snapshot (when its lane is closed at the end) has it.
    drainer.segment().view().aggregate_slot(lane.index, 1).unwrap().count_call();
    let totals = drainer.finish().unwrap();
    assert_eq!((totals.aggregated_calls, totals.dropped), (4, 7), "4 reads; 4 + 1 + 2 records lost");
    let frames = file.frames();
    let counts: Vec<(u64, u64, u64, Option<i32>)> = frames
        .iter()
        .filter_map(|f| match f {
            Written::Aggregates(samples) => Some(samples.clone()),
            _ => None,
        })
        .flatten()
        .map(|s: AggregateSample| (s.count, s.timed, s.timed_ns, s.clock_id))
        .collect();
    assert_eq!(counts, [(3, 2, 100, Some(1)), (4, 2, 100, Some(1))], "written when they changed only");
    let drops: Vec<(u64, u64, u64)> = frames
        .iter()
        .filter_map(|f| match f {
            Written::Drops(samples) => Some(samples.clone()),
            _ => None,
        })
        .flatten()
        .map(|s: DropSample| (s.stream, s.dropped, s.interrupted))
        .collect();
    // The lane's stream is stream 1; stream 0 stands for the threads without a lane.
    assert_eq!(drops, [(1, 5, 1), (0, 2, 0)]);
    let end = frames.iter().find_map(|f| match f {
        Written::End(end) => Some((end.events, end.dropped)),
        _ => None,
    });
    assert_eq!(end, Some((0, 7)));
}

#[test]
fn gpu_activities_are_written_in_their_own_frames_on_the_monotonic_axis() {
    use mlprof_format::gpu::{ACTIVITY_FLAG_MONOTONIC, ACTIVITY_KERNEL, GpuActivity, KIND_GPU_ACTIVITY};
    let (mut drainer, file) = drainer("gpu", GEOMETRY);
    let view = drainer.segment().view();
    let pid = std::process::id();
    let lane = claim(view, pid, 101, 0);
    let kernel = |correlation, start, flags| GpuActivity {
        kind: KIND_GPU_ACTIVITY,
        what: ACTIVITY_KERNEL,
        flags,
        pid: 1,
        correlation,
        start,
        dur: 5,
        ..Default::default()
    };
    // A host call between two kernels; the second kernel's times are monotonic ns already
    // (CUPTI refused the timestamp callback): the collector passes them through. The test
    // timebase is the identity (ring ticks are ns), so both come out as given.
    push_all(
        view,
        lane.index,
        &[
            kernel(7, 100, 0).into_event(),
            call(Func::Read, 5, 10),
            kernel(8, 200, ACTIVITY_FLAG_MONOTONIC).into_event(),
        ],
    );
    drainer.drain_once().unwrap();
    let totals = drainer.finish().unwrap();
    assert_eq!((totals.events, totals.gpu_activities), (1, 2), "GPU records are not events");
    let gpu = gpu_records(&file.frames());
    let seen: Vec<(u32, u32, u64, u64, u8)> =
        gpu.iter().map(|a| (a.pid, a.correlation, a.start, a.dur, a.flags)).collect();
    assert_eq!(
        seen,
        [(pid, 7, 100, 5, 0), (pid, 8, 200, 5, 0)],
        "named by the lane's owner, in CUPTI's order"
    );
}

#[test]
fn a_correlated_call_is_stored_as_its_thread_with_a_link_beside_the_gpu_work() {
    use mlprof_format::gpu::ACTIVITY_LINK;
    use mlprof_format::record::FLAG_CORRELATED;
    let (mut drainer, file) = drainer("link", GEOMETRY);
    let view = drainer.segment().view();
    let pid = std::process::id();
    let lane = claim(view, pid, 101, 0);
    // In the ring, a correlated launch carries CUPTI's correlation id (42) where its tid goes.
    let mut launch = call(Func::CuLaunchKernel, 10, 16);
    launch.flags |= FLAG_CORRELATED;
    launch.tid = 42;
    push_all(view, lane.index, &[launch, call(Func::Read, 20, 25)]);
    drainer.drain_once().unwrap();
    drainer.finish().unwrap();
    let frames = file.frames();
    let stored = events(&frames);
    assert_eq!(
        stored.iter().map(|e| (e.tid, e.flags)).collect::<Vec<_>>(),
        [(101, FLAG_CORRELATED), (101, 0)]
    );
    let links = gpu_records(&frames);
    assert_eq!(links.len(), 1);
    let link = links[0];
    assert_eq!(
        (link.what, link.pid, link.correlation, link.value, link.start, link.dur, link.aux),
        (ACTIVITY_LINK, pid, 42, 101, 10, 6, Func::CuLaunchKernel as u16)
    );
}
