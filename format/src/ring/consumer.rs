//! The consumer side (`mlprof-collect`): copying published records out of a lane, splitting
//! them into items ([`LaneItems`]), freeing a lane. Everything read from the lane is treated as
//! hostile: a producer can lose its own records, never make the consumer read outside the lane,
//! panic or loop.

use core::sync::atomic::Ordering;

use super::layout::LANE_FREE;
use super::view::RingView;
use crate::record::{Event, KIND_STRING_DEF, MAX_STRING_BYTES, RECORD_BYTES, string_payload_slots};

impl RingView {
    /// The address and length of lane `index`'s slot array (for the collector to pre-fault it).
    pub fn lane_slots(&self, index: u32) -> Option<(*mut u8, usize)> {
        (index < self.geometry().lane_count)
            .then(|| (self.slot(index, 0), self.geometry().lane_slots_bytes() as usize))
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

    /// Zeroes a lane whose owner is gone and makes it claimable again.
    pub fn free(&self, index: u32) {
        let Some(lane) = self.lane(index) else { return };
        lane.head.store(0, Ordering::Relaxed);
        lane.cached_tail.store(0, Ordering::Relaxed);
        lane.tail.store(0, Ordering::Relaxed);
        lane.dropped.store(0, Ordering::Relaxed);
        for slot in &lane.aggregates {
            slot.count.store(0, Ordering::Relaxed);
            slot.timed.store(0, Ordering::Relaxed);
            slot.ticks.store(0, Ordering::Relaxed);
        }
        lane.pid.store(0, Ordering::Relaxed);
        lane.tid.store(0, Ordering::Relaxed);
        lane.uid.store(0, Ordering::Relaxed);
        lane.state.store(LANE_FREE, Ordering::Release);
    }
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
        let len = (event.arg2 as usize).min(MAX_STRING_BYTES);
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

#[cfg(test)]
mod tests {
    use super::*;

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
