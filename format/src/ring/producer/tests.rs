//! The producer side against heap rings: claims, wrap-around and exact drop counts, lanes
//! offered, opened and grown through a test backer, and producers racing a consumer.

use super::*;
use crate::ring::{LANE_FIRST_BACKED, RingGeometry};
use crate::testing::{HeapRing, positions, record, string_def, take};

#[test]
fn wrap_around_keeps_order_and_full_lane_drops_exactly() {
    let geometry = RingGeometry { lane_count: 2, lane_capacity: 64 };
    let mapping = HeapRing::new(geometry);
    let view = mapping.view();
    let lane = view.claim(1, 7, 0, 0, false).unwrap().index;
    let mut next = 0;
    let mut seq = 0;
    // Many laps around a 64-slot lane.
    for _ in 0..100 {
        for _ in 0..50 {
            assert!(view.push(lane, &record(seq, 7)));
            seq += 1;
        }
        take(&view, lane, &mut next);
    }
    assert_eq!(next, 5000);
    // Without a consumer, exactly `capacity` records fit; the rest are counted drops.
    for i in 0..100 {
        let accepted = view.push(lane, &record(seq, 7));
        assert_eq!(accepted, i < 64);
        if accepted {
            seq += 1;
        }
    }
    assert_eq!(view.lane(lane).unwrap().dropped.load(Ordering::Relaxed), 36);
    assert_eq!(take(&view, lane, &mut next), 64);
    // A 200-byte string takes 5 slots: its definition and 4 of payload.
    assert!(view.push_string(lane, &string_def(1, 200), &[b'x'; 200]));
    let (tail, head) = positions(&view, lane);
    assert_eq!(head - tail, 5);
    // With 3 slots left, one that needs 5 is refused whole: nothing of it is written.
    for _ in 0..56 {
        assert!(view.push(lane, &record(seq, 7)));
        seq += 1;
    }
    assert!(!view.push_string(lane, &string_def(2, 200), &[b'y'; 200]));
    assert_eq!(positions(&view, lane), (tail, head + 56));
}

#[test]
fn lanes_are_claimed_once_and_freed_for_reuse() {
    let geometry = RingGeometry { lane_count: 3, lane_capacity: 64 };
    let mapping = HeapRing::new(geometry);
    let view = mapping.view();
    let claims: Vec<Claim> = (0..3).map(|t| view.claim(1, t, 0, 77, false).unwrap()).collect();
    let mut sorted: Vec<u32> = claims.iter().map(|c| c.index).collect();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 3);
    assert!(claims.iter().all(|c| c.generation == 1));
    assert_eq!(view.lane(claims[0].index).unwrap().image.load(Ordering::Relaxed), 77);
    assert_eq!(view.claim(1, 99, 0, 0, false), None);
    assert_eq!(
        view.header().lanes_claimed.load(Ordering::Relaxed),
        3,
        "every claim, and only a claim that got its lane, is counted for the collector"
    );
    view.count_no_lane_drop(99);
    view.count_no_lane_drop(100);
    assert_eq!(view.header().no_lane_drops_total(), 2);
    let state = |index: u32| view.lane(index).unwrap().state.load(Ordering::Relaxed);
    view.retire(Claim { generation: 7, ..claims[1] }); // another claim's generation: no effect
    assert_eq!(state(claims[1].index), lane_word(1, LANE_ACTIVE));
    view.retire(claims[1]);
    assert_eq!(state(claims[1].index), lane_word(1, LANE_RETIRED));
    view.free(claims[1].index);
    assert_eq!(state(claims[1].index), lane_word(1, LANE_FREE));
    let again = view.claim(2, 42, 0, 0, false).unwrap();
    assert_eq!(again, Claim { index: claims[1].index, generation: 2 });
    // The first owner's retire, arriving late, cannot touch the new owner's lane.
    view.retire(claims[1]);
    assert_eq!(state(again.index), lane_word(2, LANE_ACTIVE));
}

#[test]
fn an_unbacked_lane_is_never_claimed_and_an_abandoned_claim_is_taken_back() {
    let geometry = RingGeometry { lane_count: 2, lane_capacity: 64 };
    let mapping = HeapRing::new(geometry);
    let view = mapping.view();
    assert!(view.withdraw(0), "a free lane can be taken back");
    assert!(!view.withdraw(0));
    let claim = view.claim(1, 5, 0, 0, false).unwrap();
    assert_eq!(claim.index, 1, "lane 0 is unbacked");
    assert_eq!(view.claim(1, 6, 0, 0, false), None);
    assert!(view.offer(0));
    assert!(!view.offer(0));
    // A claimer killed between its two steps leaves the lane CLAIMING.
    let lane = view.lane(0).unwrap();
    let stuck = lane_word(4, LANE_CLAIMING);
    lane.state.store(stuck, Ordering::Relaxed);
    assert!(!view.reclaim_stale_claim(0, lane_word(3, LANE_CLAIMING)), "another claim than the one seen");
    assert!(view.reclaim_stale_claim(0, stuck));
    assert_eq!(lane.state.load(Ordering::Relaxed), lane_word(4, LANE_UNBACKED), "backed again before reuse");
    assert!(view.offer(0));
    assert_eq!(view.claim(1, 6, 0, 0, false), Some(Claim { index: 0, generation: 5 }));
}

#[test]
fn an_open_lane_is_claimed_only_by_a_producer_that_backs_it() {
    let geometry = RingGeometry { lane_count: 2, lane_capacity: 64 };
    let mapping = HeapRing::new(geometry);
    let view = mapping.view();
    assert!(view.withdraw(0) && view.withdraw(1));
    assert!(view.open(0) && view.open(1));
    assert_eq!(view.claim(1, 5, 0, 0, true), None, "without a way to back it, an open lane is not taken");
    /// Fails its first call, then succeeds.
    fn fail_first(start: *mut u8, len: usize) -> bool {
        BACKED.with_borrow_mut(|(calls, _)| {
            calls.push((start as usize, len));
            calls.len() > 1
        })
    }
    BACKED.with_borrow_mut(|b| *b = (Vec::new(), true));
    let view = mapping.view().with_backing(fail_first);
    assert_eq!(view.claim(1, 5, 0, 0, false), None, "a producer that may not back takes no open lane");
    assert!(BACKED.with_borrow(|b| b.0.is_empty()));
    let claim = view.claim(1, 5, 0, 0, true).unwrap();
    let tries = BACKED.with_borrow_mut(|b| std::mem::take(&mut b.0));
    assert_eq!(tries.len(), 2, "the first lane failed to back, the second did");
    assert_eq!(tries[1], (view.lane_slots(claim.index).unwrap().0 as usize, 64 * 64));
    let other = 1 - claim.index;
    let state = view.lane(other).unwrap().state.load(Ordering::Relaxed);
    assert_eq!(
        state,
        lane_word(1, LANE_UNBACKED),
        "a lane that could not be backed goes back to the collector"
    );
}

/// A mapping whose lanes are backed only as far as `LANE_FIRST_BACKED`, as the collector
/// offers them (heap memory is backed whole; the count is what the protocol goes by).
fn first_backed_lanes(geometry: RingGeometry) -> HeapRing {
    let mapping = HeapRing::new(geometry);
    let view = mapping.view();
    for index in 0..geometry.lane_count {
        assert!(view.withdraw(index));
        view.lane(index).unwrap().backed.store(0, Ordering::Relaxed);
        assert!(view.offer_backed(index, geometry.first_backed()));
    }
    mapping
}

std::thread_local! {
    /// The ranges a test's backing function was asked for, and whether it succeeds.
    static BACKED: std::cell::RefCell<(Vec<(usize, usize)>, bool)> = const { std::cell::RefCell::new((Vec::new(), true)) };
}

fn back_for_test(start: *mut u8, len: usize) -> bool {
    BACKED.with_borrow_mut(|(calls, succeed)| {
        calls.push((start as usize, len));
        *succeed
    })
}

/// A first-backed mapping (kept alive by the caller), a view that grows lanes through
/// `back_for_test` (succeeding as `succeed` says, its calls cleared), thread 7's lane in
/// it and that lane's writer.
fn growing_lane(geometry: RingGeometry, succeed: bool) -> (HeapRing, &'static RingView, u32, LaneWriter) {
    let mapping = first_backed_lanes(geometry);
    let view: &'static RingView = Box::leak(Box::new(mapping.view().with_backing(back_for_test)));
    let lane = view.claim(1, 7, 0, 0, false).unwrap().index;
    let writer = view.writer(lane).unwrap();
    BACKED.with_borrow_mut(|b| *b = (Vec::new(), succeed));
    (mapping, view, lane, writer)
}

#[test]
fn a_lane_is_written_only_as_far_as_it_is_backed_without_a_way_to_grow_it() {
    let geometry = RingGeometry { lane_count: 1, lane_capacity: 4 * LANE_FIRST_BACKED as u32 };
    let mapping = first_backed_lanes(geometry);
    let view = mapping.view();
    let lane = view.claim(1, 7, 0, 0, false).unwrap().index;
    let writer = Box::leak(Box::new(mapping.view())).writer(lane).unwrap();
    let (mut next, mut seq) = (0, 0);
    for _ in 0..LANE_FIRST_BACKED + 10 {
        if writer.push(&record(seq, 7)) != Pushed::Dropped {
            seq += 1;
        }
        // A consumer that keeps up: only the backing stops the writer.
        take(&view, lane, &mut next);
    }
    assert_eq!(seq, LANE_FIRST_BACKED, "nothing is written past the backed slots");
    assert_eq!(view.lane(lane).unwrap().dropped.load(Ordering::Relaxed), 10);
    assert_ne!(
        view.lane(lane).unwrap().grow_failed_at.load(Ordering::Relaxed),
        0,
        "the lane asks the collector to grow it"
    );
    // The collector backs more (as its drain pass does): the writer goes on.
    view.lane(lane).unwrap().backed.fetch_max(2 * LANE_FIRST_BACKED, Ordering::Release);
    assert_eq!(writer.push(&record(seq, 7)), Pushed::Written);
    assert_eq!(take(&view, lane, &mut next), 1);
}

#[test]
fn an_owner_that_can_back_memory_grows_its_lane_by_doubling_and_then_wraps() {
    let first = LANE_FIRST_BACKED as usize;
    let geometry = RingGeometry { lane_count: 2, lane_capacity: 4 * first as u32 };
    let (_mapping, view, lane, writer) = growing_lane(geometry, true);
    let (mut next, mut seq) = (0, 0);
    for _ in 0..3 * geometry.lane_capacity as usize {
        assert_ne!(writer.push(&record(seq, 7)), Pushed::Dropped);
        seq += 1;
        if seq % 1000 == 0 {
            take(view, lane, &mut next);
        }
    }
    take(view, lane, &mut next);
    assert_eq!(next, seq, "every record arrived, in order, over three laps");
    let slots = view.lane_slots(lane).unwrap().0 as usize;
    let calls = BACKED.with_borrow(|b| b.0.clone());
    assert_eq!(
        calls,
        vec![(slots + first * 64, first * 64), (slots + 2 * first * 64, 2 * first * 64)],
        "backed from 1 to 2 to 4 times the first slots, each range once"
    );
    assert_eq!(view.lane(lane).unwrap().backed.load(Ordering::Relaxed), 4 * first as u64);
    // A string that crosses the end of what is backed grows the lane too.
    let other = view.claim(1, 8, 0, 0, false).unwrap().index;
    for _ in 0..first - 2 {
        assert!(view.push(other, &record(0, 8)));
    }
    assert!(view.push_string(other, &string_def(1, 200), &[b'x'; 200]));
    assert_eq!(view.lane(other).unwrap().backed.load(Ordering::Relaxed), 2 * first as u64);
    view.free(lane);
    assert_eq!(
        view.lane(lane).unwrap().backed.load(Ordering::Relaxed),
        4 * first as u64,
        "a freed lane keeps its memory"
    );
}

#[test]
fn an_owner_that_cannot_back_more_drops_and_retries_only_every_thousand_drops() {
    let geometry = RingGeometry { lane_count: 1, lane_capacity: 2 * LANE_FIRST_BACKED as u32 };
    let (_mapping, view, lane, writer) = growing_lane(geometry, false);
    let mut written = 0;
    let attempts = LANE_FIRST_BACKED + 2 * GROW_RETRY_DROPS + 1;
    for _ in 0..attempts {
        if writer.push(&record(0, 7)) != Pushed::Dropped {
            written += 1;
        }
    }
    assert_eq!(written, LANE_FIRST_BACKED);
    let dropped = view.lane(lane).unwrap().dropped.load(Ordering::Relaxed);
    assert_eq!(written + dropped, attempts, "recorded + dropped = calls made");
    assert_eq!(BACKED.with_borrow(|b| b.0.len()), 3, "the first try, then one per {GROW_RETRY_DROPS} drops");
    // Memory came back: the next try grows the lane.
    BACKED.with_borrow_mut(|b| b.1 = true);
    for _ in 0..GROW_RETRY_DROPS {
        writer.push(&record(0, 7));
    }
    assert_eq!(view.lane(lane).unwrap().backed.load(Ordering::Relaxed), 2 * LANE_FIRST_BACKED);
}

#[test]
fn counters_added_by_one_instruction_are_exact() {
    let counter = AtomicU64::new(5);
    assert_eq!(signal_safe_add(&counter, 3), 5);
    assert_eq!(counter.load(Ordering::Relaxed), 8);
    let slot = AggSlot { count: AtomicU64::new(0), timed: AtomicU64::new(0), ticks: AtomicU64::new(0) };
    assert_eq!(slot.count_call(), 1);
    assert_eq!(slot.count_call(), 2);
    slot.add_timing(40);
    slot.add_timing(2);
    assert_eq!((slot.timed.load(Ordering::Relaxed), slot.ticks.load(Ordering::Relaxed)), (2, 42));
}

#[test]
fn concurrent_producers_lose_nothing_they_did_not_count() {
    let geometry = RingGeometry { lane_count: 8, lane_capacity: 256 };
    let mapping = HeapRing::new(geometry);
    let producers = 4u32;
    let per_producer = 200_000u64;
    let done = std::sync::atomic::AtomicU32::new(0);
    let received: Vec<u64> = std::thread::scope(|scope| {
        for tid in 0..producers {
            let view = mapping.view();
            let done = &done;
            scope.spawn(move || {
                let lane = view.claim(1, tid, 0, 0, false).unwrap().index;
                let mut seq = 0;
                for _ in 0..per_producer {
                    // Sequence numbers only advance when accepted, so the consumer can
                    // check order; drops are counted by the ring.
                    if view.push(lane, &record(seq, tid)) {
                        seq += 1;
                    }
                }
                view.aggregate_slot(lane, 3).unwrap().count_call();
                done.fetch_add(1, Ordering::Release);
            });
        }
        let view = mapping.view();
        let mut next = vec![0u64; geometry.lane_count as usize];
        loop {
            let finished = done.load(Ordering::Acquire) == producers;
            for index in 0..geometry.lane_count {
                take(&view, index, &mut next[index as usize]);
            }
            if finished {
                break;
            }
        }
        next
    });
    let view = mapping.view();
    let mut total_received = 0;
    let mut total_dropped = 0;
    for index in 0..geometry.lane_count {
        let lane = view.lane(index).unwrap();
        total_received += received[index as usize];
        total_dropped += lane.dropped.load(Ordering::Relaxed);
        if lane.state.load(Ordering::Relaxed) == LANE_ACTIVE {
            assert_eq!(lane.aggregates[3].count.load(Ordering::Relaxed), 1);
        }
    }
    assert_eq!(total_received + total_dropped, producers as u64 * per_producer);
}

#[test]
fn an_uncounted_push_into_a_full_lane_leaves_the_lanes_drops_alone() {
    let geometry = RingGeometry { lane_count: 1, lane_capacity: 64 };
    let mapping = HeapRing::new(geometry);
    let view = mapping.view();
    let lane = view.claim(1, 7, 0, 0, false).unwrap().index;
    for seq in 0..64 {
        assert!(view.push_uncounted(lane, &record(seq, 7)));
    }
    // Full: a GPU activity is refused and not counted as a lost call; a call still is.
    assert!(!view.push_uncounted(lane, &record(64, 7)));
    assert_eq!(view.lane(lane).unwrap().dropped.load(Ordering::Relaxed), 0);
    assert!(!view.push(lane, &record(64, 7)));
    assert_eq!(view.lane(lane).unwrap().dropped.load(Ordering::Relaxed), 1);
    let mut next = 0;
    assert_eq!(take(&view, lane, &mut next), 64);
}
