//! Run-wide ids given by content, the rule of every id kind of the run file (sites, modules,
//! stacks, Python frames, capture ranges in a merge): the first distinct key is 1, the next 2,
//! and so on; 0 stays "none". Collectors number what they meet, merges renumber the nodes'.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Ids by key; `S` the map's hasher (a hot one may bring a faster one than std's).
#[derive(Clone, Debug)]
pub struct Ids<K, S = std::collections::hash_map::RandomState> {
    by_key: HashMap<K, u32, S>,
}

impl<K, S: Default> Default for Ids<K, S> {
    fn default() -> Self {
        Ids { by_key: HashMap::default() }
    }
}

impl<K: Hash + Eq, S: BuildHasher> Ids<K, S> {
    /// The id of `key`, and whether it is new (the caller then writes what it names).
    pub fn id(&mut self, key: K) -> (u32, bool) {
        let next = self.by_key.len() as u32 + 1;
        let id = *self.by_key.entry(key).or_insert(next);
        (id, id == next)
    }

    /// The id of `key` if it has one, without taking ownership of a key to look it up.
    pub fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<u32>
    where
        K: std::borrow::Borrow<Q>,
    {
        self.by_key.get(key).copied()
    }

    /// How many ids were given.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids count from 1 in order of first sight; a key met again has its id, not new.
    #[test]
    fn ids_count_from_one_by_first_sight() {
        let mut ids: Ids<&str> = Ids::default();
        assert_eq!([ids.id("a"), ids.id("b"), ids.id("a")], [(1, true), (2, true), (1, false)]);
        assert_eq!((ids.get("b"), ids.get("c"), ids.len()), (Some(2), None, 2));
    }
}
