//! Liveness on a heap ring: the lanes of threads and processes that are gone, of the launched
//! command, of zombies, of claims abandoned half-way, and of images exec replaced.

use mlprof_format::func::Func;
use mlprof_format::record::{Event, KIND_PROCESS_EXIT};
use mlprof_format::ring::{LANE_ACTIVE, LANE_CLAIMING, LANE_FREE, LANE_UNBACKED, RingGeometry, lane_word};

use super::super::procfs::zombie_exit;
use super::super::testing::*;
use super::super::{DrainedRing, Drainer};
use crate::testing::dead_pid;

/// Four lanes of 4096 records: room for every test's records without a lane filling.
const GEOMETRY: RingGeometry = RingGeometry { lane_count: 4, lane_capacity: 4096 };

/// Starts `drainer`'s count of liveness checks afresh: the next check is the first, and the
/// tenth (THREAD_CHECK_EVERY) asks every thread.
fn restart_liveness_count<R: DrainedRing>(drainer: &mut Drainer<R>) {
    drainer.liveness.checks = 0;
}

#[test]
fn a_lane_whose_thread_is_gone_is_freed_at_the_tenth_check() {
    let (mut drainer, file) = drainer("thread-gone", GEOMETRY);
    hold_liveness(&mut drainer);
    let view = drainer.segment().view();
    let lane = claim(view, std::process::id(), exited_tid(), 0);
    push_all(view, lane.index, &[call(Func::Read, 5, 10)]);
    drainer.drain_once().unwrap();
    restart_liveness_count(&mut drainer);
    // Checks 1 to 9 ask whether the process exists (it does: this one); the tenth
    // (THREAD_CHECK_EVERY) asks every thread.
    for check in 1..=9 {
        drainer.free_dead_lanes().unwrap();
        assert_eq!(state(drainer.segment().view(), lane.index), LANE_ACTIVE, "check {check}");
    }
    // What the lane got meanwhile (a signal handler's last record) is drained before it is freed.
    push_all(drainer.segment().view(), lane.index, &[call(Func::Write, 15, 20)]);
    drainer.free_dead_lanes().unwrap();
    assert_eq!(state(drainer.segment().view(), lane.index), LANE_FREE, "check 10");
    assert_eq!(drainer.segment().freed, 1);
    drainer.finish().unwrap();
    let ends: Vec<u64> = events(&file.frames()).iter().map(end).collect();
    assert_eq!(ends, [10, 20]);
}

#[test]
fn the_lanes_of_a_process_that_is_gone_are_freed_at_the_next_check() {
    let (mut drainer, file) = drainer("process-gone", GEOMETRY);
    hold_liveness(&mut drainer);
    let view = drainer.segment().view();
    let pid = dead_pid();
    let lanes = [claim(view, pid, pid, 0), claim(view, pid, pid + 1, 0)];
    drainer.drain_once().unwrap();
    for (lane, end) in lanes.iter().zip([10, 20]) {
        push_all(drainer.segment().view(), lane.index, &[call(Func::Read, end - 5, end)]);
    }
    restart_liveness_count(&mut drainer);
    drainer.free_dead_lanes().unwrap();
    let view = drainer.segment().view();
    assert!(lanes.iter().all(|lane| state(view, lane.index) == LANE_FREE), "both, at check 1");
    assert_eq!(drainer.segment().freed, 2);
    let totals = drainer.finish().unwrap();
    assert_eq!((totals.events, totals.threads), (2, 2));
    assert!(exits(&file.frames()).is_empty(), "a reaped process has no exit to tell");
}

#[test]
fn the_launched_command_is_alive_until_the_launcher_reaps_it() {
    let (mut drainer, _file) = drainer("launched", GEOMETRY);
    hold_liveness(&mut drainer);
    let view = drainer.segment().view();
    // The launcher's child: gone already, but its pid cannot be reused before it is reaped.
    let pid = dead_pid();
    let lane = claim(view, pid, pid, 0);
    drainer.drain_once().unwrap();
    drainer.watch_launched(pid);
    restart_liveness_count(&mut drainer);
    drainer.free_dead_lanes().unwrap();
    assert_eq!(state(drainer.segment().view(), lane.index), LANE_ACTIVE, "known to exist");
    drainer.launched_reaped();
    drainer.free_dead_lanes().unwrap();
    assert_eq!(state(drainer.segment().view(), lane.index), LANE_FREE, "asked, and gone");
    drainer.finish().unwrap();
}

#[test]
fn a_killed_process_is_freed_as_a_zombie_and_its_exit_recorded_once() {
    let (mut drainer, file) = drainer("zombie", GEOMETRY);
    hold_liveness(&mut drainer);
    // Two children that end as zombies (not reaped before the end of the test): the first
    // exits where no hook sees it (as if killed), the second's hook recorded its exit.
    let mut silent = std::process::Command::new("sh").args(["-c", "exit 7"]).spawn().unwrap();
    let mut recorded = std::process::Command::new("sh").args(["-c", "exit 9"]).spawn().unwrap();
    let (silent_pid, recorded_pid) = (silent.id(), recorded.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while zombie_exit(silent_pid).is_none() || zombie_exit(recorded_pid).is_none() {
        assert!(std::time::Instant::now() < deadline, "the children did not end");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let view = drainer.segment().view();
    let silent_lane = claim(view, silent_pid, silent_pid, 0);
    let recorded_lane = claim(view, recorded_pid, recorded_pid, 0);
    let exit = Event { kind: KIND_PROCESS_EXIT, start: 30, ret: 9, ..Event::default() };
    push_all(view, recorded_lane.index, &[exit]);
    drainer.drain_once().unwrap();
    restart_liveness_count(&mut drainer);
    // A zombie exists until it is reaped: the process checks keep its lanes; the thread check
    // (the tenth) finds the leader a zombie.
    for _ in 1..=9 {
        drainer.free_dead_lanes().unwrap();
    }
    let view = drainer.segment().view();
    assert_eq!(
        (state(view, silent_lane.index), state(view, recorded_lane.index)),
        (LANE_ACTIVE, LANE_ACTIVE)
    );
    drainer.free_dead_lanes().unwrap();
    let view = drainer.segment().view();
    assert_eq!((state(view, silent_lane.index), state(view, recorded_lane.index)), (LANE_FREE, LANE_FREE));
    drainer.finish().unwrap();
    silent.wait().unwrap();
    recorded.wait().unwrap();
    let frames = file.frames();
    let exits: Vec<(u32, Option<i32>, Option<i32>)> =
        exits(&frames).iter().map(|e| (e.pid, e.exit_code, e.signal)).collect();
    assert_eq!(exits, [(recorded_pid, Some(9), None), (silent_pid, Some(7), None)]);
}

#[test]
fn a_claim_abandoned_half_way_is_taken_back_a_check_later() {
    use std::sync::atomic::Ordering;
    let (mut drainer, _file) = drainer("claiming", GEOMETRY);
    hold_liveness(&mut drainer);
    let view = drainer.segment().view();
    // Two claims stopped half-way, as by a claimer killed between its two compare-and-swaps;
    // the second claimer was only slow, and finishes between the checks.
    let (dead, slow) = (claim(view, 0, 0, 0), claim(view, std::process::id(), gettid(), 0));
    for lane in [dead, slow] {
        let claiming = lane_word(lane.generation, LANE_CLAIMING);
        view.lane(lane.index).unwrap().state.store(claiming, Ordering::Release);
    }
    // The pass's look at every lane finds them in use.
    drainer.drain_once().unwrap();
    drainer.free_dead_lanes().unwrap();
    let view = drainer.segment().view();
    assert_eq!(
        (state(view, dead.index), state(view, slow.index)),
        (LANE_CLAIMING, LANE_CLAIMING),
        "seen once"
    );
    let active = lane_word(slow.generation, LANE_ACTIVE);
    view.lane(slow.index).unwrap().state.store(active, Ordering::Release);
    drainer.free_dead_lanes().unwrap();
    let view = drainer.segment().view();
    assert_eq!(state(view, dead.index), LANE_UNBACKED, "taken back, to be backed again before it is offered");
    assert_eq!(state(view, slow.index), LANE_ACTIVE, "the slow claimer keeps its lane");
    assert_eq!(drainer.segment().freed, 1);
    drainer.finish().unwrap();
}

#[test]
fn the_lanes_of_an_image_that_exec_replaced_are_freed_after_the_pass() {
    let (mut drainer, file) = drainer("exec", GEOMETRY);
    hold_liveness(&mut drainer);
    let view = drainer.segment().view();
    let pid = std::process::id();
    // Thread 101 of image 1, and the exec'd image 2 announcing itself from thread 102.
    let lanes = claim_in_order(view, &[(pid, 101, 1), (pid, 102, 2)]);
    push_all(view, lanes[0].index, &[call(Func::Read, 5, 10)]);
    push_string(view, lanes[1].index, 0xa7, b"python\0");
    push_all(view, lanes[1].index, &[process_start(1, 0xa7, 50, false), call(Func::Read, 55, 60)]);
    assert_eq!(drainer.drain_once().unwrap(), 5, "3 records and a 2-slot string");
    let view = drainer.segment().view();
    assert_eq!(state(view, lanes[0].index), LANE_FREE, "image 1's lane, drained");
    assert_eq!(state(view, lanes[1].index), LANE_ACTIVE);
    drainer.finish().unwrap();
    let ends: Vec<u64> = events(&file.frames()).iter().map(end).collect();
    assert_eq!(ends, [10, 60]);
}
