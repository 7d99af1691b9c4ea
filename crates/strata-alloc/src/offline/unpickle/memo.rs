//! The pickle memo: what `PUT`, `BINPUT`, `LONG_BINPUT` and `MEMOIZE` store and the `GET`s
//! fetch. CPython numbers memo entries from 0 upwards (`MEMOIZE` takes the next number), so
//! they are kept in a vector, 8 bytes each; an index far beyond the others (a hand-written or
//! hostile pickle) goes to a map instead, so no index sizes an allocation.

use std::collections::HashMap;

use super::Id;

/// A free slot of the vector.
const EMPTY: Id = Id::MAX;

/// The memo.
#[derive(Default)]
pub(super) struct Memo {
    dense: Vec<Id>,
    sparse: HashMap<u64, Id>,
    /// Distinct indices stored.
    count: usize,
}

impl Memo {
    /// How many distinct indices are stored: the index `MEMOIZE` stores at.
    pub(super) fn len(&self) -> usize {
        self.count
    }

    /// Stores `id` at `index`, replacing what was there.
    pub(super) fn put(&mut self, index: u64, id: Id) {
        let dense_len = self.dense.len() as u64;
        if index < dense_len {
            let slot = &mut self.dense[index as usize];
            if *slot == EMPTY {
                self.count += 1;
            }
            *slot = id;
        } else if index == dense_len {
            if self.sparse.remove(&index).is_none() {
                self.count += 1;
            }
            self.dense.push(id);
        } else if self.sparse.insert(index, id).is_none() {
            self.count += 1;
        }
    }

    /// What `index` holds.
    pub(super) fn get(&self, index: u64) -> Option<Id> {
        match usize::try_from(index).ok().and_then(|i| self.dense.get(i)) {
            Some(&id) if id != EMPTY => Some(id),
            _ => self.sparse.get(&index).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_in_order_and_far_apart_both_read_back() {
        let mut m = Memo::default();
        m.put(0, 10);
        m.put(1, 11);
        m.put(1 << 40, 12);
        m.put(2, 13);
        m.put(1, 14);
        assert_eq!(m.len(), 4);
        assert_eq!(
            (m.get(0), m.get(1), m.get(2), m.get(1 << 40)),
            (Some(10), Some(14), Some(13), Some(12))
        );
        assert_eq!(m.get(3), None);
        // An index first stored far ahead moves to the vector when the others reach it.
        m.put(4, 20);
        m.put(3, 21);
        m.put(4, 22);
        assert_eq!((m.len(), m.get(3), m.get(4)), (6, Some(21), Some(22)));
    }
}
