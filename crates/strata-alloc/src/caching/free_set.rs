//! The ordered set of a pool's free blocks, searched on every allocation that the reuse
//! record does not serve and updated on every free.
//!
//! A pool often caches only a few free blocks (a loop that replaces a live result alternates
//! two); its allocations then search, take and return blocks among them all the time. A
//! sorted vector answers each of those with one binary search and a short move of the
//! entries after it, where a `BTreeMap` walks nodes (about two and a half times the
//! instructions in a loop of one-element ops, `scripts/count-instructions`). Past
//! [`TO_TREE`] entries, moving the tail would cost more than the tree (a data loader's
//! many small batches leave hundreds of free blocks), so the set becomes a `BTreeMap`, and
//! back to a vector once it has shrunk below [`TO_VECTOR`] (apart, so that a set near one
//! size does not switch back and forth). Both keep the same order, so every
//! choice is the same whichever holds the blocks.

use std::collections::btree_map;
use std::collections::BTreeMap;

/// Entries above which a sorted vector becomes a tree: each update of a vector moves its
/// tail (up to this many 40-byte entries), which past a few dozen costs more than the
/// tree's node walk.
const TO_TREE: usize = 32;
/// Entries below which a tree becomes a sorted vector again.
const TO_VECTOR: usize = 8;

/// Free blocks `V` keyed by `K` (the pool's free-set key), in key order: best fit is the
/// first key at or after a request's.
#[derive(Debug)]
pub(crate) enum FreeSet<K, V> {
    /// Few blocks: sorted by key, no two keys equal.
    Sorted(Vec<(K, V)>),
    /// Many blocks.
    Tree(BTreeMap<K, V>),
}

impl<K, V> Default for FreeSet<K, V> {
    fn default() -> Self {
        FreeSet::Sorted(Vec::new())
    }
}

impl<K: Ord + Copy, V> FreeSet<K, V> {
    /// How many blocks the set holds.
    pub fn len(&self) -> usize {
        match self {
            FreeSet::Sorted(v) => v.len(),
            FreeSet::Tree(t) => t.len(),
        }
    }

    /// The block at `key`, if any.
    pub fn get(&self, key: &K) -> Option<&V> {
        match self {
            FreeSet::Sorted(v) => v.binary_search_by(|e| e.0.cmp(key)).ok().map(|i| &v[i].1),
            FreeSet::Tree(t) => t.get(key),
        }
    }

    /// Adds `id` at `key`; returns the block that was there, which it replaces.
    pub fn insert(&mut self, key: K, id: V) -> Option<V> {
        match self {
            FreeSet::Sorted(v) => match v.binary_search_by(|e| e.0.cmp(&key)) {
                Ok(i) => Some(std::mem::replace(&mut v[i].1, id)),
                Err(i) => {
                    v.insert(i, (key, id));
                    if v.len() > TO_TREE {
                        *self = FreeSet::Tree(std::mem::take(v).into_iter().collect());
                    }
                    None
                }
            },
            FreeSet::Tree(t) => t.insert(key, id),
        }
    }

    /// Takes the block at `key` out of the set.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        match self {
            FreeSet::Sorted(v) => {
                let i = v.binary_search_by(|e| e.0.cmp(key)).ok()?;
                Some(v.remove(i).1)
            }
            FreeSet::Tree(t) => {
                let id = t.remove(key);
                if t.len() < TO_VECTOR {
                    *self = FreeSet::Sorted(std::mem::take(t).into_iter().collect());
                }
                id
            }
        }
    }

    /// The entries at or after `start`, in order.
    pub fn at_or_after(&self, start: K) -> Entries<'_, K, V> {
        match self {
            FreeSet::Sorted(v) => {
                let i = v.partition_point(|e| e.0 < start);
                Entries::Sorted(v[i..].iter())
            }
            FreeSet::Tree(t) => Entries::Tree(t.range(start..)),
        }
    }

    /// The entries before `end`, in order (`.rev()` walks them from the largest down).
    pub fn before(&self, end: K) -> Entries<'_, K, V> {
        match self {
            FreeSet::Sorted(v) => {
                let i = v.partition_point(|e| e.0 < end);
                Entries::Sorted(v[..i].iter())
            }
            FreeSet::Tree(t) => Entries::Tree(t.range(..end)),
        }
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> Entries<'_, K, V> {
        match self {
            FreeSet::Sorted(v) => Entries::Sorted(v.iter()),
            FreeSet::Tree(t) => Entries::Tree(t.range(..)),
        }
    }

    /// Every key, in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// Every block, in key order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, id)| id)
    }
}

/// A run of a [`FreeSet`]'s entries in key order.
pub(crate) enum Entries<'a, K, V> {
    /// From the sorted vector.
    Sorted(std::slice::Iter<'a, (K, V)>),
    /// From the tree.
    Tree(btree_map::Range<'a, K, V>),
}

impl<'a, K, V> Iterator for Entries<'a, K, V> {
    type Item = (&'a K, &'a V);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Entries::Sorted(it) => it.next().map(|(k, id)| (k, id)),
            Entries::Tree(it) => it.next(),
        }
    }
}

impl<K, V> DoubleEndedIterator for Entries<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Entries::Sorted(it) => it.next_back().map(|(k, id)| (k, id)),
            Entries::Tree(it) => it.next_back(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::StreamId;
    use proptest::prelude::*;

    /// The allocator's free-set key: stream, size, segment, offset.
    type Key = (StreamId, usize, u64, usize);

    fn key(stream: u64, size: usize, seg: u64, off: usize) -> Key {
        (StreamId(stream), size, seg, off)
    }

    proptest! {
        /// Any sequence of inserts and removes, across both representations, answers every
        /// query exactly as a `BTreeMap` does.
        #[test]
        fn answers_as_a_tree_does(
            ops in proptest::collection::vec((any::<bool>(), 0u64..2, 0usize..40, 0u64..3, 0usize..12), 0..1200),
            probe in (0u64..2, 0usize..45, 0u64..4, 0usize..13),
        ) {
            let mut set: FreeSet<Key, usize> = FreeSet::default();
            let mut tree = BTreeMap::new();
            for (n, &(add, s, size, seg, off)) in ops.iter().enumerate() {
                let k = key(s, size * 512, seg, off * 512);
                if add {
                    prop_assert_eq!(set.insert(k, n), tree.insert(k, n));
                } else {
                    prop_assert_eq!(set.remove(&k), tree.remove(&k));
                }
                prop_assert_eq!(set.len(), tree.len());
            }
            let p = key(probe.0, probe.1 * 512, probe.2, probe.3 * 512);
            prop_assert_eq!(set.get(&p), tree.get(&p));
            let from: Vec<_> = set.at_or_after(p).collect();
            prop_assert_eq!(from, tree.range(p..).collect::<Vec<_>>());
            let before: Vec<_> = set.before(p).rev().collect();
            prop_assert_eq!(before, tree.range(..p).rev().collect::<Vec<_>>());
            let values: Vec<_> = set.values().collect();
            prop_assert_eq!(values, tree.values().collect::<Vec<_>>());
            let keys: Vec<_> = set.keys().collect();
            prop_assert_eq!(keys, tree.keys().collect::<Vec<_>>());
        }
    }

    #[test]
    fn grows_into_a_tree_and_shrinks_back() {
        let mut set: FreeSet<Key, usize> = FreeSet::default();
        for i in 0..=TO_TREE {
            set.insert(key(0, 512, 0, i * 512), i);
        }
        assert!(matches!(set, FreeSet::Tree(_)));
        for i in 0..=TO_TREE - TO_VECTOR + 1 {
            assert_eq!(set.remove(&key(0, 512, 0, i * 512)), Some(i));
        }
        assert!(matches!(set, FreeSet::Sorted(_)));
        assert_eq!(set.len(), TO_VECTOR - 1);
        let first = set.at_or_after(key(0, 0, 0, 0)).next().map(|(_, &id)| id);
        assert_eq!(first, Some(TO_TREE - TO_VECTOR + 2));
    }
}
