//! Strings (paths, command lines) are sent into the ring once per process: the record of an open
//! carries only the string's id (its FNV-1a hash). The table of ids already sent is a fixed,
//! lock-free open-addressing set; a fork child inherits it, which is right because the collector
//! keeps every string of the run.

use core::sync::atomic::{AtomicU64, Ordering};

const TABLE_SLOTS: usize = 8192;
const MAX_PROBES: usize = 16;

static SENT: [AtomicU64; TABLE_SLOTS] = [const { AtomicU64::new(0) }; TABLE_SLOTS];

/// Whether `id` was sent by this process (or its parent before a fork).
#[inline]
pub fn was_sent(id: u64) -> bool {
    let start = id as usize % TABLE_SLOTS;
    for probe in 0..MAX_PROBES {
        match SENT[(start + probe) % TABLE_SLOTS].load(Ordering::Acquire) {
            0 => return false,
            found if found == id => return true,
            _ => {}
        }
    }
    false
}

/// Remembers `id` as sent. When the table is crowded the id is simply not remembered, and the
/// string is sent again next time: more bytes, never a missing path.
pub fn mark_sent(id: u64) {
    let start = id as usize % TABLE_SLOTS;
    for probe in 0..MAX_PROBES {
        let slot = &SENT[(start + probe) % TABLE_SLOTS];
        match slot.compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(existing) if existing == id => return,
            Err(_) => {}
        }
    }
}
