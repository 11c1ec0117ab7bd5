//! Strings (paths, command lines, kernel names) are sent into the ring once per process: the record of an open
//! carries only the string's id (its FNV-1a hash). The table of ids already sent is a fixed,
//! lock-free open-addressing set; a fork child inherits it, which is right because the collector
//! keeps every string of the run.

use core::sync::atomic::{AtomicU64, Ordering};

use super::session;

const TABLE_SLOTS: usize = 8192;
const MAX_PROBES: usize = 16;

/// A fixed, lock-free set of non-zero 64-bit keys. Inserting into a crowded neighbourhood
/// silently fails: callers treat "not found" as "send again", which costs bytes, never data.
struct SeenSet {
    slots: [AtomicU64; TABLE_SLOTS],
}

impl SeenSet {
    const fn new() -> SeenSet {
        SeenSet { slots: [const { AtomicU64::new(0) }; TABLE_SLOTS] }
    }

    #[inline]
    fn contains(&self, key: u64) -> bool {
        let start = key as usize % TABLE_SLOTS;
        for probe in 0..MAX_PROBES {
            match self.slots.get((start + probe) % TABLE_SLOTS).map(|slot| slot.load(Ordering::Acquire)) {
                None | Some(0) => return false,
                Some(found) if found == key => return true,
                _ => {}
            }
        }
        false
    }

    fn insert(&self, key: u64) {
        let start = key as usize % TABLE_SLOTS;
        for probe in 0..MAX_PROBES {
            let Some(slot) = self.slots.get((start + probe) % TABLE_SLOTS) else { return };
            match slot.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(existing) if existing == key => return,
                Err(_) => {}
            }
        }
    }
}

static SENT_STRINGS: SeenSet = SeenSet::new();
static DEFINED_SYMBOLS: SeenSet = SeenSet::new();

/// The key of `id` in the current epoch: a process that joins a new collector must send its
/// strings again, so keys are salted with the epoch instead of clearing the set (which other
/// threads are reading). Never 0 (an empty slot).
#[inline]
fn key(id: u64) -> u64 {
    let salted = id ^ (session::epoch() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    if salted == 0 { 1 } else { salted }
}

/// Whether string `id` was sent by this process (or its parent before a fork) to the current
/// collector.
#[inline]
pub fn was_sent(id: u64) -> bool {
    SENT_STRINGS.contains(key(id))
}

/// Remembers that string `id` was sent to the current collector.
pub fn mark_sent(id: u64) {
    SENT_STRINGS.insert(key(id))
}

/// Whether GPU function `handle` was named by this process to the current collector.
#[inline]
pub fn symbol_was_defined(handle: u64) -> bool {
    DEFINED_SYMBOLS.contains(key(handle))
}

/// Remembers that GPU function `handle` was named to the current collector.
pub fn mark_symbol_defined(handle: u64) {
    DEFINED_SYMBOLS.insert(key(handle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_after_insertion_and_not_before() {
        let set = SeenSet::new();
        assert!(!set.contains(42));
        set.insert(42);
        set.insert(42);
        assert!(set.contains(42));
        // Keys that share a start slot probe onwards.
        let crowd: Vec<u64> = (1..=MAX_PROBES as u64).map(|k| k * TABLE_SLOTS as u64 + 7).collect();
        for &key in &crowd {
            set.insert(key);
        }
        assert!(crowd.iter().all(|&key| set.contains(key)));
        // One more in that neighbourhood does not fit: it is reported unseen (sent again).
        let extra = (MAX_PROBES as u64 + 1) * TABLE_SLOTS as u64 + 7;
        set.insert(extra);
        assert!(!set.contains(extra));
    }
}
