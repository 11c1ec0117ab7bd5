//! The consumer side (`mlprof-collect`, and the `ring` fuzz target on the same code): one
//! [`LaneConsumer::drain`] step per lane checks the positions, copies the published records
//! out, splits them into items ([`LaneItems`]), hands each to the caller and releases exactly
//! what was consumed. Everything read from the lane is treated as hostile: a producer can lose
//! its own records, never make the consumer read outside the lane, panic or loop.

use core::sync::atomic::Ordering;

use super::layout::{
    LANE_CLAIMING, LANE_FREE, LANE_OPEN, LANE_UNBACKED, Lane, lane_generation, lane_state, lane_word,
};
use super::view::RingView;
use crate::record::{
    CONTROL_KIND_BASE, Event, KIND_STRING_DEF, MAX_STRING_BYTES, RECORD_BYTES, string_payload_slots,
};

/// A string definition's payload length, as a consumer honours it: the `arg2` it declares, at
/// most [`MAX_STRING_BYTES`]. One rule for [`LaneItems`] and [`RingView::record_end_ahead`].
fn string_len(arg2: u64) -> usize {
    (arg2 as usize).min(MAX_STRING_BYTES)
}

impl RingView {
    /// The address and length of lane `index`'s slot array (for the collector to pre-fault it).
    pub fn lane_slots(&self, index: u32) -> Option<(*mut u8, usize)> {
        self.lane_part(index, 0, self.geometry().lane_capacity as u64)
    }

    /// The address and length of slots `from..to` of lane `index` (what backing a lane's first
    /// slots, or growing it, takes); `None` outside the ring or the lane.
    pub fn lane_part(&self, index: u32, from: u64, to: u64) -> Option<(*mut u8, usize)> {
        let capacity = self.geometry().lane_capacity as u64;
        (index < self.geometry().lane_count && from <= to && to <= capacity)
            .then(|| (self.slot_of(index, from), (to - from) as usize * RECORD_BYTES))
    }

    /// Copies the record at `position` of lane `index` (volatile: another process may be
    /// writing the neighbouring slots). All zeroes for an index outside the ring.
    pub fn read_slot(&self, index: u32, position: u64) -> [u8; RECORD_BYTES] {
        let mut out = [0u8; RECORD_BYTES];
        if index >= self.geometry().lane_count {
            return out;
        }
        let src = self.slot(index, position);
        for (i, byte) in out.iter_mut().enumerate() {
            // Safety: within the slot (see `slot`).
            *byte = unsafe { core::ptr::read_volatile(src.add(i)) };
        }
        out
    }

    /// The end time (`start + dur`, ring clock) of the `n`-th record (n ≥ 1) lane `index` has
    /// published past its tail, counting what a [`LaneConsumer::drain`] step hands out as
    /// [`LaneItem::Record`] with a kind below [`CONTROL_KIND_BASE`] (string definitions with
    /// their payloads and control records skipped), when the lane holds that many: how far in
    /// time taking `n` of its records reaches, without copying them (the collector takes every
    /// lane up to a common time). Reads only published slots; garbage from a hostile producer
    /// only gives a wrong time.
    pub fn record_end_ahead(&self, index: u32, n: usize) -> Option<u64> {
        let lane = self.lane(index)?;
        let head = lane.head.load(Ordering::Acquire);
        let tail = lane.tail.load(Ordering::Relaxed);
        if head.wrapping_sub(tail) > self.geometry().lane_capacity as u64 {
            return None;
        }
        let (mut position, mut records) = (tail, 0);
        while position < head {
            let (kind, arg2, end) = self.peek_slot(index, position)?;
            position += 1;
            if kind == KIND_STRING_DEF {
                position = position.saturating_add(string_payload_slots(string_len(arg2)) as u64);
            } else if kind < CONTROL_KIND_BASE {
                records += 1;
                if records == n {
                    return Some(end);
                }
            }
        }
        None
    }

    /// The kind, `arg2` and end time (`start + dur`, saturating) of the record at `position` of
    /// lane `index`, read field by field (volatile: a producer may be writing neighbouring
    /// slots), for looking ahead without copying. `None` for an index outside the ring.
    fn peek_slot(&self, index: u32, position: u64) -> Option<(u16, u64, u64)> {
        if index >= self.geometry().lane_count {
            return None;
        }
        let record = self.slot(index, position) as *const Event;
        // Safety: `record` is the slot of a lane inside the ring (checked above), 64-byte aligned
        // (slot arrays start page aligned); Event is plain data, so any bits are a value.
        unsafe {
            let kind = core::ptr::read_volatile(core::ptr::addr_of!((*record).kind));
            let arg2 = core::ptr::read_volatile(core::ptr::addr_of!((*record).arg2));
            let start = core::ptr::read_volatile(core::ptr::addr_of!((*record).start));
            let dur = core::ptr::read_volatile(core::ptr::addr_of!((*record).dur));
            Some((kind, arg2, start.saturating_add(dur)))
        }
    }

    /// Appends the records at positions `from..to` of lane `index` to `out` (at most one lane's
    /// capacity; two bulk copies when the range wraps). The caller has read `to` from `head`
    /// with acquire ordering, so these slots are published.
    pub fn copy_out(&self, index: u32, from: u64, to: u64, out: &mut Vec<Event>) {
        let capacity = self.geometry().lane_capacity as u64;
        if index >= self.geometry().lane_count || to <= from {
            return;
        }
        let to = to.min(from.saturating_add(capacity));
        let mut position = from;
        while position < to {
            let within = position & (capacity - 1);
            let run = (capacity - within).min(to - position) as usize;
            out.reserve(run);
            let len = out.len();
            // Safety: `run` slots starting at `within` lie inside lane `index`'s array, and `out`
            // has room for them; Event is plain data (any bit pattern is valid).
            unsafe {
                core::ptr::copy_nonoverlapping(
                    self.slot(index, position) as *const Event,
                    out.as_mut_ptr().add(len),
                    run,
                );
                out.set_len(len + run);
            }
            position += run as u64;
        }
    }

    /// Zeroes a lane whose owner is gone (drained, final counters taken) and makes it
    /// claimable again, keeping its generation. Its slots stay backed.
    pub fn free(&self, index: u32) {
        let Some(lane) = self.lane(index) else { return };
        let word = lane.state.load(Ordering::Acquire);
        clear(lane);
        lane.state.store(lane_word(lane_generation(word), LANE_FREE), Ordering::Release);
        self.header().lanes_offered.fetch_add(1, Ordering::Release);
    }

    /// Offers an unbacked lane to producers (`UNBACKED → FREE`) once the collector has backed
    /// all its slots with memory; false if it was not unbacked.
    pub fn offer(&self, index: u32) -> bool {
        self.offer_backed(index, self.geometry().lane_capacity as u64)
    }

    /// Offers an unbacked lane to producers (`UNBACKED → FREE`) once the collector has backed
    /// its first `records` slots with memory (the owner or the collector backs more as the lane
    /// fills: see [`Lane::backed`]); false if it was not unbacked.
    pub fn offer_backed(&self, index: u32, records: u64) -> bool {
        let Some(lane) = self.lane(index) else { return false };
        lane.backed.fetch_max(records, Ordering::Release);
        let word = lane.state.load(Ordering::Acquire);
        lane_state(word) == LANE_UNBACKED
            && lane
                .state
                .compare_exchange(
                    word,
                    lane_word(lane_generation(word), LANE_FREE),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Opens an unbacked lane to producers that back it themselves (`UNBACKED → OPEN`, see
    /// [`LANE_OPEN`](super::LANE_OPEN)); false if it was not unbacked.
    pub fn open(&self, index: u32) -> bool {
        let opened = self.move_lane(index, LANE_UNBACKED, LANE_OPEN);
        if opened {
            self.header().lanes_offered.fetch_add(1, Ordering::Release);
        }
        opened
    }

    /// Takes an open lane back from producers (`OPEN → UNBACKED`), so that the collector backs
    /// it itself; false if a producer claimed it meanwhile.
    pub fn withdraw_open(&self, index: u32) -> bool {
        self.move_lane(index, LANE_OPEN, LANE_UNBACKED)
    }

    /// Takes a free lane back from producers (`FREE → UNBACKED`), so that the collector may
    /// release its memory; false if a producer claimed it meanwhile.
    pub fn withdraw(&self, index: u32) -> bool {
        self.move_lane(index, LANE_FREE, LANE_UNBACKED)
    }

    /// Moves lane `index` from state `from` to `to`, keeping its generation, if it is in `from`
    /// now; false if it is not, or a producer changed it meanwhile (the compare-and-swap that
    /// every collector-side transition of a lane a producer may race for goes through).
    fn move_lane(&self, index: u32, from: u32, to: u32) -> bool {
        let Some(lane) = self.lane(index) else { return false };
        let word = lane.state.load(Ordering::Acquire);
        lane_state(word) == from
            && lane
                .state
                .compare_exchange(
                    word,
                    lane_word(lane_generation(word), to),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Takes back a lane whose claimer died between winning it and finishing the claim: if the
    /// lane still holds the very `CLAIMING` word the collector saw a liveness period ago, it
    /// becomes `UNBACKED` (the claimer may have been backing it, half-way: the collector backs
    /// it again before offering it), and a claimer that was only slow fails its own
    /// compare-and-swap and claims another. Returns whether it did.
    pub fn reclaim_stale_claim(&self, index: u32, seen: u32) -> bool {
        let Some(lane) = self.lane(index) else { return false };
        if lane_state(seen) != LANE_CLAIMING {
            return false;
        }
        clear_identity(lane);
        lane.state
            .compare_exchange(
                seen,
                lane_word(lane_generation(seen), LANE_UNBACKED),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }
}

/// Zeroes everything a lane's owner leaves behind.
fn clear(lane: &Lane) {
    lane.head.store(0, Ordering::Relaxed);
    lane.cached_tail.store(0, Ordering::Relaxed);
    lane.limit.store(0, Ordering::Relaxed);
    lane.grow_failed_at.store(0, Ordering::Relaxed);
    lane.tail.store(0, Ordering::Relaxed);
    lane.dropped.store(0, Ordering::Relaxed);
    lane.interrupted.store(0, Ordering::Relaxed);
    for slot in &lane.aggregates {
        slot.count.store(0, Ordering::Relaxed);
        slot.timed.store(0, Ordering::Relaxed);
        slot.ticks.store(0, Ordering::Relaxed);
    }
    clear_identity(lane);
}

fn clear_identity(lane: &Lane) {
    lane.pid.store(0, Ordering::Relaxed);
    lane.tid.store(0, Ordering::Relaxed);
    lane.uid.store(0, Ordering::Relaxed);
    lane.image.store(0, Ordering::Relaxed);
}

/// One item of a lane's records as the consumer reads them: an event or control record, or a
/// string definition with its payload (which spans the following slots).
#[derive(Debug, PartialEq, Eq)]
pub enum LaneItem<'a> {
    /// An event, or a control record other than a string definition, exactly as the producer
    /// wrote it (times in ring clock ticks; `pid`/`tid` as the producer set them, unchecked).
    Record(Event),
    /// A string definition ([`KIND_STRING_DEF`]) with its whole payload.
    String {
        /// The string's id ([`crate::string_id`] of the bytes, as the producer computed it;
        /// not re-checked).
        id: u64,
        /// The payload, at most [`MAX_STRING_BYTES`] long, borrowed from the copied records.
        bytes: &'a [u8],
    },
}

/// Splits records copied out of a lane ([`RingView::copy_out`]) into items. A string whose
/// payload is not all there (a garbage length) ends the iteration: [`LaneItems::consumed`]
/// then says how many records to advance the tail by. Never reads outside `records`.
pub struct LaneItems<'a> {
    records: &'a [Event],
    at: usize,
}

impl<'a> LaneItems<'a> {
    /// Items of `records`, from the first.
    pub fn new(records: &'a [Event]) -> LaneItems<'a> {
        LaneItems { records, at: 0 }
    }

    /// Records consumed so far (all of them once the iteration ended).
    pub fn consumed(&self) -> usize {
        self.at
    }
}

impl<'a> Iterator for LaneItems<'a> {
    type Item = LaneItem<'a>;

    fn next(&mut self) -> Option<LaneItem<'a>> {
        let event = *self.records.get(self.at)?;
        self.at += 1;
        if event.kind != KIND_STRING_DEF {
            return Some(LaneItem::Record(event));
        }
        let len = string_len(event.arg2);
        let slots = string_payload_slots(len);
        let Some(payload) = self.records.get(self.at..self.at + slots) else {
            self.at = self.records.len();
            return None;
        };
        self.at += slots;
        let bytes = zerocopy::IntoBytes::as_bytes(payload);
        Some(LaneItem::String { id: event.arg, bytes: &bytes[..len] })
    }
}

/// What one [`LaneConsumer::drain`] step did to a lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// This many records (slots, string payloads included) were consumed and released by
    /// advancing `tail`; 0 when nothing was published (or the index is outside the ring).
    Taken(usize),
    /// The lane's positions were impossible (`head < tail`, or more than a lane's capacity
    /// published): a broken or hostile producer. `tail` was moved to `head`, discarding what
    /// the lane claimed to hold; nothing was handed to the handler. The positions are those
    /// read before the reset.
    CorruptPositions {
        /// The consumer's position as read.
        tail: u64,
        /// The producer's position as read (acquire).
        head: u64,
    },
}

impl Drained {
    /// Records consumed by the step (0 for corrupt positions).
    pub fn taken(self) -> usize {
        match self {
            Drained::Taken(records) => records,
            Drained::CorruptPositions { .. } => 0,
        }
    }
}

/// The consumer step of the ring protocol, shared by `mlprof-collect` and the `ring` fuzz
/// target. It owns the buffer that records are copied into, reused from step to step, so a
/// steady-state drain does not allocate.
#[derive(Debug, Default)]
pub struct LaneConsumer {
    records: Vec<Event>,
}

impl LaneConsumer {
    /// A consumer with an empty copy buffer (it grows to one lane's capacity at most).
    pub fn new() -> LaneConsumer {
        LaneConsumer::default()
    }

    /// Drains what lane `index` has published, one step:
    ///
    /// 1. reads `head` (acquire: the records below it are written) and `tail`;
    /// 2. checks them: `head < tail` or `head - tail > capacity` is
    ///    [`Drained::CorruptPositions`], and `tail` is moved to `head`;
    /// 3. block by block ([`DRAIN_BLOCK`] records), copies the records out of the shared slots
    ///    ([`RingView::copy_out`]), so the handler never reads memory a producer may be
    ///    writing;
    /// 4. splits them into items ([`LaneItems`]) and calls `handle` on each, in order; a string
    ///    whose payload is cut off (by `head`) ends the step, and its remains count as consumed;
    /// 5. after each block, release-stores `tail` advanced by exactly the records consumed, so
    ///    the producer may reuse those slots while the rest is handled.
    ///
    /// Blocks, not the whole backlog at once: a lane that filled during a long pass holds 64 Ki
    /// records (4 MiB), and copying all of it before handling any went through memory instead
    /// of the cache, and kept the whole lane full until its last record was handled (a burst on
    /// two busy CPUs dropped records while the collector was draining).
    ///
    /// When `handle` fails, the step stops: the tail is advanced past the items handled before
    /// the failing one only (that one is handed out again by the next step), and the error is
    /// returned. The lane's state is not looked at: which lanes to drain, and what the items
    /// mean, is the caller's business.
    pub fn drain<E>(
        &mut self,
        view: &RingView,
        index: u32,
        handle: impl FnMut(LaneItem<'_>) -> Result<(), E>,
    ) -> Result<Drained, E> {
        self.drain_in_blocks(view, index, DRAIN_BLOCK, handle)
    }

    /// [`LaneConsumer::drain`] with blocks of `block` records (1..=[`DRAIN_BLOCK`]; clamped):
    /// for a caller whose handler stops after a few items (the collector's bounded batch takes
    /// a share of each busy lane in turn), so that a step copies little more than it hands
    /// out; a handler that stopped after 8 items of a 512-record block had 504 copied for
    /// nothing, again at the next step.
    pub fn drain_in_blocks<E>(
        &mut self,
        view: &RingView,
        index: u32,
        block: usize,
        mut handle: impl FnMut(LaneItem<'_>) -> Result<(), E>,
    ) -> Result<Drained, E> {
        let block = block.clamp(1, DRAIN_BLOCK);
        let Some(lane) = view.lane(index) else { return Ok(Drained::Taken(0)) };
        let capacity = view.geometry().lane_capacity as u64;
        let head = lane.head.load(Ordering::Acquire);
        let tail = lane.tail.load(Ordering::Relaxed);
        if head == tail {
            return Ok(Drained::Taken(0));
        }
        if head < tail || head - tail > capacity {
            lane.tail.store(head, Ordering::Release);
            return Ok(Drained::CorruptPositions { tail, head });
        }
        // A string starting in a block has its payload in the copied window (unless `head`
        // cuts it off, as when the whole backlog was copied at once).
        let window = (block + string_payload_slots(MAX_STRING_BYTES)) as u64;
        let mut position = tail;
        while position < head {
            // Saturating: hostile positions may sit just below u64::MAX.
            let end = head.min(position.saturating_add(window));
            self.records.clear();
            view.copy_out(index, position, end, &mut self.records);
            debug_assert_eq!(self.records.len() as u64, end - position, "copied what was published");
            let mut items = LaneItems::new(&self.records);
            while items.consumed() < block {
                let before = items.consumed();
                let Some(item) = items.next() else { break };
                if let Err(error) = handle(item) {
                    lane.tail.store(position.wrapping_add(before as u64), Ordering::Release);
                    return Err(error);
                }
            }
            let taken = items.consumed();
            debug_assert!(taken <= self.records.len(), "consumed only what was copied");
            position = position.wrapping_add(taken as u64);
            lane.tail.store(position, Ordering::Release);
            if taken == 0 {
                // Nothing copied (never, with sane positions): no step may loop.
                break;
            }
        }
        Ok(Drained::Taken((position - tail) as usize))
    }
}

/// Records a [`LaneConsumer::drain`] step copies out and hands over before it releases them
/// (32 KiB: the copy stays in the cache while it is handled).
pub const DRAIN_BLOCK: usize = 512;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::RingGeometry;
    use crate::testing::{HeapRing, record};

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

    fn string_def(id: u64, len: usize) -> Event {
        Event { kind: KIND_STRING_DEF, arg: id, arg2: len as u64, ..Event::default() }
    }

    fn positions(view: &RingView, index: u32) -> (u64, u64) {
        let lane = view.lane(index).unwrap();
        (lane.tail.load(Ordering::Relaxed), lane.head.load(Ordering::Relaxed))
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
        assert_eq!(
            drain_all(&mut consumer, &view, lane),
            (Drained::Taken(1), vec![Item::Record(record(1, 1))])
        );
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
        records.push(Event { kind: KIND_STRING_DEF, arg: 9, arg2: 70, ..Event::default() });
        let mut payload = [Event::default(); 2];
        zerocopy::IntoBytes::as_mut_bytes(&mut payload[..]).fill(b'a');
        records.extend_from_slice(&payload);
        records.push(Event { kind: 21, ..Event::default() });
        records.push(Event { kind: KIND_STRING_DEF, arg: 5, arg2: 4000, ..Event::default() });
        let mut items = LaneItems::new(&records);
        assert!(matches!(items.next(), Some(LaneItem::Record(e)) if e.arg == 1));
        assert!(matches!(items.next(), Some(LaneItem::String { id: 9, bytes }) if bytes.len() == 70));
        assert!(matches!(items.next(), Some(LaneItem::Record(e)) if e.kind == 21));
        assert_eq!(items.next(), None);
        assert_eq!(items.consumed(), records.len());
    }
}
