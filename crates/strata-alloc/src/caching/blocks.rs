//! Block and segment bookkeeping: an arena of blocks linked to their neighbours, the segments
//! they tile, and the ordered free sets of the two pools.
//!
//! Free blocks are ordered by `(stream, size, segment id, offset in segment)`. PyTorch orders
//! them by `(stream, size, address)`; numbering segments in the order they were created and
//! using the offset instead makes the choices independent of the addresses a backing happens
//! to return, so a [`VirtualBacking`](crate::VirtualBacking) run makes exactly the same choices
//! as a [`HostBacking`](crate::HostBacking) one. A backing that
//! [orders by address](crate::Backing::orders_by_address) (a replay of PyTorch's run) has
//! its segments numbered by base address instead, which is PyTorch's order.

use std::collections::BTreeMap;

use super::config::PoolKind;
use super::free_set::FreeSet;
use crate::backing::StreamId;
use crate::{Category, Site};

pub(crate) type BlockId = usize;
pub(crate) type SegId = u64;

/// Key of the free sets: best fit is the first key at or after `(stream, size, 0, 0)`.
pub(crate) type FreeKey = (StreamId, usize, SegId, usize);
/// Key of the unmapped sets (expandable segments): lowest address first, per stream.
pub(crate) type UnmappedKey = (StreamId, SegId, usize);

/// A contiguous piece of a segment.
#[derive(Debug, Clone)]
pub(crate) struct BlockInfo {
    pub seg: SegId,
    /// The segment's base address and whether it is expandable, copied from its [`Segment`]
    /// (neither ever changes): the free-set key and the merge rules need them on every
    /// allocation and free, without a lookup in `segments`.
    pub seg_base: usize,
    pub seg_expandable: bool,
    pub stream: StreamId,
    pub pool: PoolKind,
    pub addr: usize,
    pub size: usize,
    /// The caller's un-rounded size while active.
    pub requested: usize,
    /// Handed out to a caller.
    pub allocated: bool,
    /// Handed out, or freed but waiting for other streams' events.
    pub active: bool,
    /// Backed by memory (false only for unmapped ranges of expandable segments).
    pub mapped: bool,
    pub prev: Option<BlockId>,
    pub next: Option<BlockId>,
    /// Outstanding events on other streams that used the block.
    pub event_count: usize,
    /// Streams other than `stream` that used the block (`record_stream`).
    pub stream_uses: Vec<StreamId>,
    /// The pool's free-block search count when the block was last cached (GC age base).
    pub gc_count_base: u64,
    /// Who allocated it, while active.
    pub site: Option<Site>,
    /// Counted in `oversize_allocations` (so a later `max_split_size` change cannot unbalance
    /// the statistic).
    pub oversize: bool,
    /// What it holds, while allocated (counted in `category_bytes`).
    pub category: Category,
}

impl BlockInfo {
    /// The block `[addr, addr + size)` of segment `seg` (based at `seg_base`, not
    /// expandable: an expandable segment's first block sets `seg_expandable` itself).
    pub fn new(
        seg: SegId,
        seg_base: usize,
        stream: StreamId,
        pool: PoolKind,
        addr: usize,
        size: usize,
    ) -> Self {
        BlockInfo {
            seg,
            seg_base,
            seg_expandable: false,
            stream,
            pool,
            addr,
            size,
            requested: 0,
            allocated: false,
            active: false,
            mapped: true,
            prev: None,
            next: None,
            event_count: 0,
            stream_uses: Vec::new(),
            gc_count_base: 0,
            site: None,
            oversize: false,
            category: Category::Temporary,
        }
    }

    /// Part of a segment that has other blocks.
    pub fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }

    /// Free, mapped, no pending events: sits in its pool's free set.
    pub fn is_free(&self) -> bool {
        !self.active && self.mapped
    }
}

/// An expandable segment's paging.
#[derive(Debug, Clone)]
pub(crate) struct Expandable {
    /// Page size (2 MiB small pool, 20 MiB large pool).
    pub page: usize,
    /// Bytes currently mapped.
    pub mapped_bytes: usize,
}

/// Memory obtained from the backing in one piece (or one address reservation).
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub base: usize,
    /// Bytes (for an expandable segment: the whole reservation).
    pub size: usize,
    pub stream: StreamId,
    pub pool: PoolKind,
    pub expandable: Option<Expandable>,
    /// The site whose request created it.
    pub site: Option<Site>,
    /// Counted in `oversize_segments`.
    pub oversize: bool,
}

/// Blocks by id, reusing the ids of destroyed blocks.
#[derive(Debug, Default)]
pub(crate) struct Arena {
    slots: Vec<Option<BlockInfo>>,
    vacant: Vec<BlockId>,
}

impl Arena {
    pub fn insert(&mut self, b: BlockInfo) -> BlockId {
        if let Some(id) = self.vacant.pop() {
            self.slots[id] = Some(b);
            id
        } else {
            self.slots.push(Some(b));
            self.slots.len() - 1
        }
    }

    pub fn remove(&mut self, id: BlockId) -> BlockInfo {
        let b = self.slots[id].take().expect("block id is live");
        self.vacant.push(id);
        b
    }

    pub fn iter(&self) -> impl Iterator<Item = (BlockId, &BlockInfo)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.as_ref().map(|b| (i, b)))
    }
}

impl std::ops::Index<BlockId> for Arena {
    type Output = BlockInfo;
    #[inline]
    fn index(&self, id: BlockId) -> &BlockInfo {
        self.slots[id].as_ref().expect("block id is live")
    }
}

impl std::ops::IndexMut<BlockId> for Arena {
    #[inline]
    fn index_mut(&mut self, id: BlockId) -> &mut BlockInfo {
        self.slots[id].as_mut().expect("block id is live")
    }
}

/// All blocks and segments, with the per-pool ordered sets.
#[derive(Debug, Default)]
pub(crate) struct Heap {
    pub blocks: Arena,
    pub segments: BTreeMap<SegId, Segment>,
    pub next_seq: SegId,
    /// Free mapped blocks, per pool.
    pub free: [FreeSet<FreeKey, BlockId>; 2],
    /// Unmapped ranges of expandable segments, per pool.
    pub unmapped: [BTreeMap<UnmappedKey, BlockId>; 2],
    /// Free-block searches per pool (the garbage collector's clock).
    pub free_calls: [u64; 2],
}

impl Heap {
    /// The id of a new segment at `base`: its base address when blocks are ordered by address,
    /// else the next number in creation order.
    pub fn new_segment_id(&mut self, base: usize, by_address: bool) -> SegId {
        if by_address {
            base as SegId
        } else {
            let seq = self.next_seq;
            self.next_seq += 1;
            seq
        }
    }

    fn offset(&self, id: BlockId) -> usize {
        let b = &self.blocks[id];
        b.addr - b.seg_base
    }

    pub fn free_key(&self, id: BlockId) -> FreeKey {
        let b = &self.blocks[id];
        (b.stream, b.size, b.seg, self.offset(id))
    }

    fn unmapped_key(&self, id: BlockId) -> UnmappedKey {
        let b = &self.blocks[id];
        (b.stream, b.seg, self.offset(id))
    }

    pub fn insert_free(&mut self, id: BlockId) {
        let key = self.free_key(id);
        let p = self.blocks[id].pool.index();
        self.blocks[id].gc_count_base = self.free_calls[p];
        let old = self.free[p].insert(key, id);
        debug_assert!(old.is_none(), "block cached twice");
    }

    pub fn remove_free(&mut self, id: BlockId) {
        let key = self.free_key(id);
        let p = self.blocks[id].pool.index();
        let old = self.free[p].remove(&key);
        debug_assert_eq!(old, Some(id), "free block missing from its pool");
    }

    pub fn insert_unmapped(&mut self, id: BlockId) {
        let key = self.unmapped_key(id);
        let p = self.blocks[id].pool.index();
        self.unmapped[p].insert(key, id);
    }

    pub fn remove_unmapped(&mut self, id: BlockId) {
        let key = self.unmapped_key(id);
        let p = self.blocks[id].pool.index();
        let old = self.unmapped[p].remove(&key);
        debug_assert_eq!(old, Some(id), "unmapped range missing from its pool");
    }

    pub fn is_expandable(&self, id: BlockId) -> bool {
        self.blocks[id].seg_expandable
    }

    /// Inserts a new block `[addr, addr + size)` between `prev` and `next` (either may be
    /// absent), inheriting segment, stream and pool from `like`.
    pub fn splice_new(
        &mut self,
        like: BlockId,
        addr: usize,
        size: usize,
        mapped: bool,
        prev: Option<BlockId>,
        next: Option<BlockId>,
    ) -> BlockId {
        let l = &self.blocks[like];
        let mut b = BlockInfo::new(l.seg, l.seg_base, l.stream, l.pool, addr, size);
        b.seg_expandable = l.seg_expandable;
        b.mapped = mapped;
        b.prev = prev;
        b.next = next;
        let id = self.blocks.insert(b);
        if let Some(p) = prev {
            self.blocks[p].next = Some(id);
        }
        if let Some(n) = next {
            self.blocks[n].prev = Some(id);
        }
        id
    }

    /// The blocks of a segment in address order.
    pub fn segment_blocks(&self) -> BTreeMap<SegId, Vec<BlockId>> {
        let mut by_seg: BTreeMap<SegId, Vec<BlockId>> = BTreeMap::new();
        for (id, b) in self.blocks.iter() {
            by_seg.entry(b.seg).or_default().push(id);
        }
        for ids in by_seg.values_mut() {
            ids.sort_by_key(|&id| self.blocks[id].addr);
        }
        by_seg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_reuses_ids() {
        let mut a = Arena::default();
        let b = BlockInfo::new(0, 0, StreamId(0), PoolKind::Small, 0, 512);
        let x = a.insert(b.clone());
        let y = a.insert(b.clone());
        assert_eq!(a.iter().count(), 2);
        a.remove(x);
        assert_eq!(a.insert(b), x);
        assert_eq!(a[y].size, 512);
        assert_eq!(a.iter().count(), 2);
    }

    #[test]
    fn free_set_orders_by_stream_size_seq_offset() {
        let mut h = Heap::default();
        for seq in 0..2 {
            h.segments.insert(
                seq,
                Segment {
                    base: 1_000_000 * (2 - seq as usize),
                    size: 4096,
                    stream: StreamId(0),
                    pool: PoolKind::Small,
                    expandable: None,
                    site: None,
                    oversize: false,
                },
            );
        }
        let base1 = h.segments[&1].base;
        let base0 = h.segments[&0].base;
        // Same size in both segments: segment 0 wins although its address is higher.
        let a = h.blocks.insert(BlockInfo::new(
            1,
            base1,
            StreamId(0),
            PoolKind::Small,
            base1,
            1024,
        ));
        let b = h.blocks.insert(BlockInfo::new(
            0,
            base0,
            StreamId(0),
            PoolKind::Small,
            base0 + 512,
            1024,
        ));
        let c = h.blocks.insert(BlockInfo::new(
            0,
            base0,
            StreamId(0),
            PoolKind::Small,
            base0,
            512,
        ));
        for id in [a, b, c] {
            h.insert_free(id);
        }
        let order: Vec<BlockId> = h.free[0].values().copied().collect();
        assert_eq!(order, [c, b, a]);
        h.remove_free(b);
        assert_eq!(h.free[0].len(), 2);
    }
}
