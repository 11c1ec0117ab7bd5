//! Path string ids to dense path indexes: an open-addressed table (linear probing, at most
//! half full) rather than a `HashMap`, so that a caller can ask for an id's slot ahead
//! ([`PathTable::prefetch`]). A run names tens of thousands of paths; each lookup, one per
//! open in a streaming conversion or export, was a cache miss (5-7 % of their time).

use super::PathIndex;
use crate::prefetch::prefetch;

/// An empty table; grows on its first insertion.
#[derive(Default)]
pub(super) struct PathTable {
    /// (string id, index + 1); an index of 0 marks an empty slot.
    slots: Vec<(u64, u32)>,
    len: usize,
}

impl PathTable {
    /// The slot to probe first. Ids are hashes of the strings already; the multiply mixes
    /// their high bits into the ones kept.
    #[inline]
    fn home(&self, id: u64) -> usize {
        let bits = self.slots.len().trailing_zeros();
        (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    /// Where `id` is (its slot and index), or the empty slot where it would go.
    #[inline]
    fn probe(&self, id: u64) -> (usize, Option<PathIndex>) {
        let mask = self.slots.len() - 1;
        let mut at = self.home(id);
        loop {
            match self.slots[at] {
                (_, 0) => return (at, None),
                (key, index) if key == id => return (at, Some(index - 1)),
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// The index of `id`, if it has one.
    #[inline]
    pub(super) fn get(&self, id: u64) -> Option<PathIndex> {
        if self.slots.is_empty() {
            return None;
        }
        self.probe(id).1
    }

    /// The index of `id`; `new()` gives it one if it has none.
    pub(super) fn get_or_insert(&mut self, id: u64, new: impl FnOnce() -> PathIndex) -> PathIndex {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        match self.probe(id) {
            (_, Some(index)) => index,
            (at, None) => {
                let index = new();
                self.slots[at] = (id, index + 1);
                self.len += 1;
                index
            }
        }
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(64);
        let old = std::mem::replace(&mut self.slots, vec![(0, 0); size]);
        for (id, index) in old.into_iter().filter(|&(_, index)| index != 0) {
            // Ids are unique: the probe ends at an empty slot.
            let (at, _) = self.probe(id);
            self.slots[at] = (id, index);
        }
    }

    /// Asks the cache for `id`'s first slot: a lookup a few events later finds it there.
    #[inline]
    pub(super) fn prefetch(&self, id: u64) {
        if !self.slots.is_empty() {
            prefetch(self.slots.as_ptr().wrapping_add(self.home(id)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_survive_growth_and_collisions() {
        let mut table = PathTable::default();
        assert_eq!(table.get(7), None);
        table.prefetch(7);
        // Ids that share their high bits collide in a small table.
        let ids: Vec<u64> = (1..=10_000u64).map(|i| i << 40 | i.wrapping_mul(0x5bd1_e995)).collect();
        for (n, &id) in ids.iter().enumerate() {
            assert_eq!(table.get_or_insert(id, || n as PathIndex), n as PathIndex);
        }
        for (n, &id) in ids.iter().enumerate() {
            assert_eq!(table.get(id), Some(n as PathIndex));
            assert_eq!(table.get_or_insert(id, || unreachable!("known")), n as PathIndex);
        }
        assert_eq!(table.get(u64::MAX), None);
        assert_eq!(table.get(0), None);
        assert_eq!(table.get_or_insert(0, || 10_000), 10_000);
        assert_eq!(table.get(0), Some(10_000));
        assert!(table.slots.len() >= 2 * table.len);
    }
}
