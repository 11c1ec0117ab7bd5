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
mod tests;
