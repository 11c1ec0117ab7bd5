//! The consumer step against heap rings: what a drain hands over and releases, in order, across
//! the wrap, in blocks, with failing handlers, hostile positions and a producer writing meanwhile.

use super::*;
use crate::ring::RingGeometry;
use crate::testing::{HeapRing, positions, record, string_def};

/// Drains lane `index` into owned items.
fn drain_all(consumer: &mut LaneConsumer, view: &RingView, index: u32) -> (Drained, Vec<Item>) {
    let mut items = Vec::new();
    let drained = consumer
        .drain(view, index, |item| {
            items.push(Item::from(item));
            Ok::<(), ()>(())
        })
        .unwrap();
    (drained, items)
}

/// An owned [`LaneItem`].
#[derive(Debug, PartialEq, Eq)]
enum Item {
    Record(Event),
    String(u64, Vec<u8>),
}

impl From<LaneItem<'_>> for Item {
    fn from(item: LaneItem<'_>) -> Item {
        match item {
            LaneItem::Record(event) => Item::Record(event),
            LaneItem::String { id, bytes } => Item::String(id, bytes.to_vec()),
        }
    }
}

const GEOMETRY: RingGeometry = RingGeometry { lane_count: 2, lane_capacity: 64 };

#[test]
fn empty_lane_and_outside_index_take_nothing() {
    let mapping = HeapRing::new(GEOMETRY);
    let view = mapping.view();
    let mut consumer = LaneConsumer::new();
    let lane = view.claim(1, 1, 0, 0, false).unwrap().index;
    assert_eq!(drain_all(&mut consumer, &view, lane), (Drained::Taken(0), vec![]));
    assert_eq!(drain_all(&mut consumer, &view, GEOMETRY.lane_count), (Drained::Taken(0), vec![]));
    // After a drain, the lane is empty again.
    assert!(view.push(lane, &record(0, 1)));
    assert_eq!(drain_all(&mut consumer, &view, lane).0, Drained::Taken(1));
    assert_eq!(drain_all(&mut consumer, &view, lane), (Drained::Taken(0), vec![]));
    assert_eq!(positions(&view, lane), (1, 1));
}

#[test]
fn wrap_around_delivers_records_and_strings_in_order() {
    let mapping = HeapRing::new(GEOMETRY);
    let view = mapping.view();
    let mut consumer = LaneConsumer::new();
    let lane = view.claim(1, 1, 0, 0, false).unwrap().index;
    // 60 records, drained: the next writes start 4 slots before the end of the array.
    for seq in 0..60 {
        assert!(view.push(lane, &record(seq, 1)));
    }
    assert_eq!(drain_all(&mut consumer, &view, lane).0, Drained::Taken(60));
    // A 3-slot record + string straddling the wrap, then records past it.
    let text: Vec<u8> = (0..150u8).collect();
    assert!(view.push(lane, &record(60, 1)));
    assert!(view.push_string(lane, &string_def(77, text.len()), &text));
    for seq in 61..100 {
        assert!(view.push(lane, &record(seq, 1)));
    }
    let (drained, items) = drain_all(&mut consumer, &view, lane);
    assert_eq!(drained, Drained::Taken(1 + 4 + 39));
    assert_eq!(items.len(), 41);
    assert_eq!(items[0], Item::Record(record(60, 1)));
    assert_eq!(items[1], Item::String(77, text));
    for (i, item) in items[2..].iter().enumerate() {
        assert_eq!(*item, Item::Record(record(61 + i as u64, 1)));
    }
    assert_eq!(positions(&view, lane), (104, 104));
}

#[test]
fn small_blocks_deliver_the_same_items_and_release_only_what_was_handled() {
    let text: Vec<u8> = (0..150u8).collect();
    let fill = |view: &RingView, lane: u32| {
        for seq in 0..10 {
            assert!(view.push(lane, &record(seq, 1)));
        }
        assert!(view.push_string(lane, &string_def(7, text.len()), &text));
        for seq in 10..20 {
            assert!(view.push(lane, &record(seq, 1)));
        }
    };
    let mapping = HeapRing::new(GEOMETRY);
    let view = mapping.view();
    let mut consumer = LaneConsumer::new();
    let lane = view.claim(1, 1, 0, 0, false).unwrap().index;
    fill(&view, lane);
    let (whole, expected) = drain_all(&mut consumer, &view, lane);
    assert_eq!(expected.len(), 21);
    for block in [0, 1, 3, 7, DRAIN_BLOCK, DRAIN_BLOCK + 1] {
        fill(&view, lane);
        let mut items = Vec::new();
        let drained = consumer
            .drain_in_blocks(&view, lane, block, |item| {
                items.push(Item::from(item));
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!((drained, &items), (whole, &expected), "block {block}");
    }
    // A handler that stops after 4 items: exactly those are released, the 5th comes again.
    fill(&view, lane);
    let (tail, _) = positions(&view, lane);
    let mut seen = 0;
    let stopped = consumer.drain_in_blocks(&view, lane, 3, |_| {
        if seen == 4 {
            return Err(());
        }
        seen += 1;
        Ok(())
    });
    assert_eq!(stopped, Err(()));
    assert_eq!(positions(&view, lane).0, tail + 4);
    let (_, rest) = drain_all(&mut consumer, &view, lane);
    assert_eq!(rest, expected[4..]);
}

#[test]
fn peek_slot_reads_kind_length_and_end_without_consuming() {
    let mapping = HeapRing::new(GEOMETRY);
    let view = mapping.view();
    let lane = view.claim(1, 1, 0, 0, false).unwrap().index;
    let mut event = record(0, 1);
    (event.start, event.dur) = (100, 7);
    assert!(view.push(lane, &event));
    assert!(view.push_string(lane, &string_def(9, 70), &[b'x'; 70]));
    assert_eq!(view.peek_slot(lane, 0), Some((event.kind, event.arg2, 107)));
    assert_eq!(view.peek_slot(lane, 1), Some((KIND_STRING_DEF, 70, 0)));
    assert_eq!(view.peek_slot(GEOMETRY.lane_count, 0), None);
    assert_eq!(positions(&view, lane), (0, 1 + 1 + string_payload_slots(70) as u64));
    // Looking ahead by records skips the string and its payload.
    let mut later = record(1, 1);
    (later.start, later.dur) = (200, 3);
    assert!(view.push(lane, &later));
    assert_eq!(view.record_end_ahead(lane, 1), Some(107));
    assert_eq!(view.record_end_ahead(lane, 2), Some(203));
    assert_eq!(view.record_end_ahead(lane, 3), None);
    assert_eq!(view.record_end_ahead(GEOMETRY.lane_count, 1), None);
}

#[test]
fn corrupt_positions_reset_the_tail_and_deliver_nothing() {
    let mapping = HeapRing::new(GEOMETRY);
    let view = mapping.view();
    let mut consumer = LaneConsumer::new();
    let lane_index = view.claim(1, 1, 0, 0, false).unwrap().index;
    let lane = view.lane(lane_index).unwrap();
    // Tail ahead of head.
    lane.head.store(5, Ordering::Relaxed);
    lane.tail.store(9, Ordering::Relaxed);
    assert_eq!(
        drain_all(&mut consumer, &view, lane_index),
        (Drained::CorruptPositions { tail: 9, head: 5 }, vec![])
    );
    assert_eq!(positions(&view, lane_index), (5, 5));
    // More published than the lane holds.
    lane.head.store(5 + 65, Ordering::Relaxed);
    let drained = drain_all(&mut consumer, &view, lane_index);
    assert_eq!(drained, (Drained::CorruptPositions { tail: 5, head: 70 }, vec![]));
    assert_eq!(drained.0.taken(), 0);
    assert_eq!(positions(&view, lane_index), (70, 70));
    // Exactly a full lane is fine; and the lane works normally afterwards.
    lane.head.store(70 + 64, Ordering::Relaxed);
    assert_eq!(drain_all(&mut consumer, &view, lane_index).0, Drained::Taken(64));
    assert!(view.push(lane_index, &record(1, 1)));
    assert_eq!(drain_all(&mut consumer, &view, lane_index).1, vec![Item::Record(record(1, 1))]);
}

#[test]
fn truncated_string_payload_ends_the_step_and_is_released() {
    let mapping = HeapRing::new(GEOMETRY);
    let view = mapping.view();
    let mut consumer = LaneConsumer::new();
    let lane = view.claim(1, 1, 0, 0, false).unwrap().index;
    // A record, then a definition claiming 4000 bytes (63 slots) with 2 slots after it.
    assert!(view.push(lane, &record(0, 1)));
    assert!(view.push(lane, &string_def(5, 4000)));
    assert!(view.push(lane, &record(1, 1)));
    assert!(view.push(lane, &record(2, 1)));
    let (drained, items) = drain_all(&mut consumer, &view, lane);
    assert_eq!(drained, Drained::Taken(4));
    assert_eq!(items, vec![Item::Record(record(0, 1))]);
    assert_eq!(positions(&view, lane), (4, 4));
    // A length beyond MAX_STRING_BYTES is cut to it, never read past the records.
    let huge = Event { arg2: u64::MAX, ..string_def(6, 0) };
    assert!(view.push(lane, &huge));
    assert_eq!(drain_all(&mut consumer, &view, lane), (Drained::Taken(1), vec![]));
}

#[test]
fn a_backlog_is_handed_over_and_released_block_by_block() {
    let geometry = RingGeometry { lane_count: 1, lane_capacity: 4 * DRAIN_BLOCK as u32 };
    let mapping = HeapRing::new(geometry);
    let view = mapping.view();
    let mut consumer = LaneConsumer::new();
    let lane = view.claim(1, 1, 0, 0, false).unwrap().index;
    // Records up to just before the first block's end, then a string whose payload crosses
    // it, then records filling the lane but for a few slots.
    let before = DRAIN_BLOCK - 2;
    for i in 0..before {
        assert!(view.push(lane, &record(i as u64, 1)));
    }
    let bytes: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
    assert!(view.push_string(lane, &string_def(9, bytes.len()), &bytes));
    let after = 4 * DRAIN_BLOCK - before - 1 - string_payload_slots(bytes.len()) - 3;
    for i in 0..after {
        assert!(view.push(lane, &record(i as u64, 2)));
    }
    let published = positions(&view, lane).1;
    // Each item sees the slots of the blocks before its own released already.
    let (mut seen, mut releases) = (Vec::new(), Vec::new());
    let drained = consumer.drain(&view, lane, |item| {
        let tail = positions(&view, lane).0;
        if releases.last() != Some(&tail) {
            releases.push(tail);
        }
        seen.push(Item::from(item));
        Ok::<(), ()>(())
    });
    assert_eq!(drained, Ok(Drained::Taken(published as usize)));
    assert_eq!(seen.len(), before + 1 + after);
    assert_eq!(seen[before], Item::String(9, bytes.clone()));
    assert_eq!(seen[before + 1], Item::Record(record(0, 2)));
    assert_eq!(seen.last(), Some(&Item::Record(record(after as u64 - 1, 2))));
    // Released before the first item, after the first block (which ends past the string),
    // and after each block of 512 after that.
    let first_block = (before + 1 + string_payload_slots(bytes.len())) as u64;
    assert_eq!(releases[..3], [0, first_block, first_block + DRAIN_BLOCK as u64]);
    assert_eq!(positions(&view, lane), (published, published));
    // A failing handler in a later block: the earlier blocks stay released, the failing
    // item is handed out again.
    for i in 0..(DRAIN_BLOCK + 10) {
        assert!(view.push(lane, &record(i as u64, 3)));
    }
    let mut handled = 0;
    let failed = consumer.drain(&view, lane, |_| {
        handled += 1;
        if handled == DRAIN_BLOCK + 5 { Err("disk full") } else { Ok(()) }
    });
    assert_eq!(failed, Err("disk full"));
    assert_eq!(positions(&view, lane).0, published + DRAIN_BLOCK as u64 + 4);
    let (drained, items) = drain_all(&mut consumer, &view, lane);
    assert_eq!(drained, Drained::Taken(6));
    assert_eq!(items[0], Item::Record(record(DRAIN_BLOCK as u64 + 4, 3)));
}

#[test]
fn positions_near_the_top_of_the_counter_end_the_step() {
    // Hostile positions (the ring fuzz target found this one looping for good).
    let mapping = HeapRing::new(GEOMETRY);
    let view = mapping.view();
    let mut consumer = LaneConsumer::new();
    let lane = view.claim(1, 1, 0, 0, false).unwrap().index;
    let block = view.lane(lane).unwrap();
    block.tail.store(u64::MAX - 10, Ordering::Relaxed);
    block.head.store(u64::MAX - 5, Ordering::Relaxed);
    let (drained, items) = drain_all(&mut consumer, &view, lane);
    assert_eq!(drained, Drained::Taken(5));
    assert_eq!(items.len(), 5);
    assert_eq!(positions(&view, lane), (u64::MAX - 5, u64::MAX - 5));
}

#[test]
fn a_failing_handler_releases_only_the_items_before_it() {
    let mapping = HeapRing::new(GEOMETRY);
    let view = mapping.view();
    let mut consumer = LaneConsumer::new();
    let lane = view.claim(1, 1, 0, 0, false).unwrap().index;
    assert!(view.push(lane, &record(0, 1)));
    assert!(view.push_string(lane, &string_def(3, 100), &[b'p'; 100]));
    assert!(view.push(lane, &record(1, 1)));
    let mut seen = 0;
    let result = consumer.drain(&view, lane, |_| {
        seen += 1;
        if seen == 3 { Err("disk full") } else { Ok(()) }
    });
    assert_eq!(result, Err("disk full"));
    // The record and the string (1 + 1 + 2 slots) are released; the failed record is not.
    assert_eq!(positions(&view, lane), (4, 5));
    assert_eq!(drain_all(&mut consumer, &view, lane), (Drained::Taken(1), vec![Item::Record(record(1, 1))]));
}

#[test]
fn concurrent_producer_strings_and_records_arrive_whole_and_in_order() {
    let geometry = RingGeometry { lane_count: 1, lane_capacity: 256 };
    let mapping = HeapRing::new(geometry);
    let attempts = 100_000u64;
    let done = std::sync::atomic::AtomicBool::new(false);
    let producer_view = mapping.view();
    let lane = producer_view.claim(1, 1, 0, 0, false).unwrap().index;
    let accepted = std::thread::scope(|scope| {
        let done = &done;
        let producer = scope.spawn(move || {
            let mut seq = 0u64;
            for attempt in 0..attempts {
                // Every 7th attempt a string whose bytes and length derive from `seq`.
                let ok = if attempt % 7 == 0 {
                    let text = vec![seq as u8; (seq % 300) as usize];
                    producer_view.push_string(lane, &string_def(seq, text.len()), &text)
                } else {
                    producer_view.push(lane, &record(seq, 1))
                };
                // Sequence numbers advance only when accepted, so the consumer checks order.
                if ok {
                    seq += 1;
                }
            }
            done.store(true, Ordering::Release);
            seq
        });
        let view = mapping.view();
        let mut consumer = LaneConsumer::new();
        let mut next = 0u64;
        loop {
            let finished = done.load(Ordering::Acquire);
            let drained = consumer
                .drain(&view, lane, |item| {
                    match item {
                        LaneItem::Record(event) => assert_eq!(event.arg, next, "records in order"),
                        LaneItem::String { id, bytes } => {
                            assert_eq!(id, next, "strings in order");
                            assert_eq!(bytes.len() as u64, next % 300, "whole payload");
                            assert!(bytes.iter().all(|&b| b == next as u8), "payload intact");
                        }
                    }
                    next += 1;
                    Ok::<(), ()>(())
                })
                .unwrap();
            assert!(!matches!(drained, Drained::CorruptPositions { .. }));
            if finished {
                break;
            }
        }
        // One more step after the producer finished: everything it published was taken.
        assert_eq!(consumer.drain(&view, lane, |_| Ok::<(), ()>(())), Ok(Drained::Taken(0)));
        let accepted = producer.join().unwrap();
        assert_eq!(next, accepted);
        accepted
    });
    let dropped = mapping.view().lane(lane).unwrap().dropped.load(Ordering::Relaxed);
    assert_eq!(accepted + dropped, attempts);
}

#[test]
fn lane_items_split_strings_and_stop_at_a_truncated_one() {
    let mut records = vec![Event { kind: 20, arg: 1, ..Event::default() }];
    records.push(string_def(9, 70));
    let mut payload = [Event::default(); 2];
    zerocopy::IntoBytes::as_mut_bytes(&mut payload[..]).fill(b'a');
    records.extend_from_slice(&payload);
    records.push(Event { kind: 21, ..Event::default() });
    records.push(string_def(5, 4000));
    let mut items = LaneItems::new(&records);
    assert!(matches!(items.next(), Some(LaneItem::Record(e)) if e.arg == 1));
    assert!(matches!(items.next(), Some(LaneItem::String { id: 9, bytes }) if bytes.len() == 70));
    assert!(matches!(items.next(), Some(LaneItem::Record(e)) if e.kind == 21));
    assert_eq!(items.next(), None);
    assert_eq!(items.consumed(), records.len());
}
