//! The allocator's state and its core algorithm: malloc (search, split), free (merge), and
//! cross-stream events. Releasing memory is in `release.rs`, expandable segments in
//! `expandable.rs`, the fast path for a repeated request in the child module `reuse`.

mod reuse;

use std::collections::{BTreeMap, VecDeque};

use super::blocks::{BlockId, BlockInfo, Heap, Segment};
use super::config::{
    allocation_size, AllocatorConfig, Backend, PoolKind, MAX_REQUEST, MIN_BLOCK_SIZE, SMALL_SIZE,
};
use super::hash::AddrMap;
use super::history::{History, TraceAction};
use super::stats::MemoryStats;
use super::CachingError;
use crate::backing::{memcheck, Backing, BackingError, EventId, StreamId};
use crate::error::OomReport;
use crate::{Category, Site};
use reuse::{Phase, Reuse};

/// Result of internal steps: `Err` only for fatal backing failures.
pub(crate) type Fallible<T> = Result<T, BackingError>;

/// Everything behind the allocator's lock.
#[derive(Debug)]
pub(crate) struct State {
    pub cfg: AllocatorConfig,
    pub heap: Heap,
    /// Blocks handed out, by address.
    pub live: AddrMap<usize, BlockId>,
    /// Outstanding events per stream, oldest first.
    pub events: BTreeMap<StreamId, VecDeque<(EventId, BlockId)>>,
    pub stats: MemoryStats,
    /// Bytes held from the backing (PyTorch's `total_allocated_memory`).
    pub reserved: usize,
    /// Most bytes the allocator may reserve (memory limit or fraction).
    pub limit: Option<usize>,
    pub history: History,
    pub last_oom: Option<OomReport>,
    /// The most recent cache hit, while nothing else has happened since (see [`Reuse`]).
    reuse: Option<Reuse>,
}

impl State {
    pub fn new(cfg: AllocatorConfig) -> State {
        let mut s = State {
            cfg: AllocatorConfig::default(),
            heap: Heap::default(),
            live: AddrMap::default(),
            events: BTreeMap::new(),
            stats: MemoryStats::default(),
            reserved: 0,
            limit: None,
            history: History::default(),
            last_oom: None,
            reuse: None,
        };
        s.set_config(cfg);
        s
    }

    pub fn set_config(&mut self, cfg: AllocatorConfig) {
        self.stats.max_split_size = cfg.max_split_size.map_or(-1, |m| m as i64);
        self.cfg = cfg;
    }

    #[inline]
    pub fn gc_enabled(&self) -> bool {
        self.limit.is_some() && self.cfg.garbage_collection_threshold > 0.0
    }

    #[inline]
    pub fn trace(
        &mut self,
        action: TraceAction,
        addr: usize,
        size: usize,
        stream: StreamId,
        site: Option<Site>,
    ) {
        if self.history.enabled {
            self.history.record(action, addr, size, stream, site, None);
        }
    }

    /// Records a block's `FreeRequested`, with what it held.
    #[inline]
    pub(super) fn trace_freed(
        &mut self,
        addr: usize,
        size: usize,
        stream: StreamId,
        site: Option<Site>,
        category: Category,
    ) {
        if self.history.enabled {
            self.history.record(
                TraceAction::FreeRequested,
                addr,
                size,
                stream,
                site,
                Some(category),
            );
        }
    }

    /// PyTorch's `malloc`: returns the address of the block handed out.
    #[inline]
    pub fn malloc<B: Backing>(
        &mut self,
        b: &B,
        n: usize,
        stream: StreamId,
        site: Site,
    ) -> Result<usize, CachingError> {
        match self.reuse_alloc(n, stream, site) {
            Some(addr) => Ok(addr),
            None => self.malloc_general(b, n, stream, site),
        }
    }

    /// `malloc` without a [`Reuse`].
    #[inline(never)]
    fn malloc_general<B: Backing>(
        &mut self,
        b: &B,
        n: usize,
        stream: StreamId,
        site: Site,
    ) -> Result<usize, CachingError> {
        self.settle();
        if n >= MAX_REQUEST {
            return Err(CachingError::Invalid(format!(
                "{n} bytes is more than the 1 EiB any device can hold"
            )));
        }
        self.process_events(b)?;
        let size = self.cfg.round_size(n);
        let pool = PoolKind::for_size(size);
        let system = self.cfg.backend == Backend::System;
        let alloc_size = if system { size } else { allocation_size(size) };
        let mut found = if system {
            None
        } else {
            self.get_free_block(pool, stream, size)
        };
        let hit = found.is_some();
        if found.is_none() {
            if self.gc_enabled() {
                self.garbage_collect(b)?;
            }
            found = self.alloc_block(b, pool, stream, size, alloc_size, false, site)?;
            if found.is_none() && self.release_available_cached_blocks(b, pool, stream, size)? {
                found = self.alloc_block(b, pool, stream, size, alloc_size, false, site)?;
            }
            if found.is_none() {
                self.release_cached_blocks(b)?;
                found = self.alloc_block(b, pool, stream, size, alloc_size, true, site)?;
            }
        }
        match found {
            Some(id) => {
                let id = self.alloc_found_block(id, n, size, site, hit);
                Ok(self.heap.blocks[id].addr)
            }
            None => Err(CachingError::OutOfMemory(Box::new(
                self.out_of_memory(b, n, size, alloc_size, stream, site),
            ))),
        }
    }

    /// Best fit on `stream`, with PyTorch's expandable-segment and oversize rules. Removes the
    /// block from its free set.
    fn get_free_block(&mut self, pool: PoolKind, stream: StreamId, size: usize) -> Option<BlockId> {
        let p = pool.index();
        if self.gc_enabled() {
            self.heap.free_calls[p] += 1;
        }
        let heap = &self.heap;
        let mut it = heap.free[p].at_or_after((stream, size, 0, 0));
        let (&(s, ..), &first) = it.next()?;
        if s != stream {
            return None;
        }
        let mut chosen = first;
        if heap.is_expandable(first) {
            if self.cfg.expandable_segments {
                // A block followed by unmapped space counts as the size it can grow to: prefer
                // blocks that need no growth and keep the growable tail free.
                let grows_to = |id: BlockId| {
                    let blk = &heap.blocks[id];
                    blk.size
                        + blk
                            .next
                            .filter(|&n| !heap.blocks[n].mapped)
                            .map_or(0, |n| heap.blocks[n].size)
                };
                for (&(s, ..), &next) in it {
                    if !heap.is_expandable(chosen)
                        || s != stream
                        || grows_to(next) >= grows_to(chosen)
                    {
                        break;
                    }
                    chosen = next;
                }
            } else {
                // Expandable segments were switched off: skip their blocks.
                let mut rest = heap.free[p].at_or_after((stream, size, 0, 0));
                chosen = rest
                    .find(|(&(s, ..), &id)| s != stream || !heap.is_expandable(id))
                    .filter(|(&(s, ..), _)| s == stream)
                    .map(|(_, &id)| id)?;
            }
        }
        let ms = self.cfg.max_split_size_bytes();
        let bsize = heap.blocks[chosen].size;
        if size < ms && bsize >= ms {
            return None;
        }
        if size >= ms && bsize >= size.saturating_add(self.cfg.max_non_split_rounding) {
            return None;
        }
        self.heap.remove_free(chosen);
        Some(chosen)
    }

    fn should_split(&self, id: BlockId, size: usize) -> bool {
        if self.cfg.backend == Backend::System {
            return false;
        }
        let b = &self.heap.blocks[id];
        let remaining = b.size - size;
        if b.pool == PoolKind::Small || self.cfg.expandable_segments {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.cfg.max_split_size_bytes() && remaining > SMALL_SIZE
        }
    }

    /// Gets a new segment (or maps pages of an expandable one). `Ok(None)` when the device or
    /// the limit has no room.
    #[allow(clippy::too_many_arguments)]
    fn alloc_block<B: Backing>(
        &mut self,
        b: &B,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
        alloc_size: usize,
        is_retry: bool,
        site: Site,
    ) -> Fallible<Option<BlockId>> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        if self.cfg.expandable_segments && self.cfg.backend == Backend::Native {
            return self.try_allocate_expandable(b, pool, stream, size, site);
        }
        if self
            .limit
            .is_some_and(|l| self.reserved.saturating_add(alloc_size) > l)
        {
            return Ok(None);
        }
        let addr = match b.allocate_segment(alloc_size) {
            Ok(a) => a,
            Err(BackingError::OutOfMemory { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        if b.addresses_are_memory() {
            // Under Valgrind, only the blocks handed out are accessible.
            memcheck::make_noaccess(addr, alloc_size);
        }
        if addr % MIN_BLOCK_SIZE != 0 {
            return Err(BackingError::Fatal(format!(
                "the backing returned a segment at {addr:#x}, not aligned to {MIN_BLOCK_SIZE} bytes"
            )));
        }
        let seq = self.heap.new_segment_id(addr, b.orders_by_address());
        let oversize = alloc_size >= self.cfg.max_split_size_bytes();
        self.heap.segments.insert(
            seq,
            Segment {
                base: addr,
                size: alloc_size,
                stream,
                pool,
                expandable: None,
                site: Some(site),
                oversize,
            },
        );
        let id = self
            .heap
            .blocks
            .insert(BlockInfo::new(seq, addr, stream, pool, addr, alloc_size));
        self.reserved += alloc_size;
        self.stats.segment.increase(pool, 1);
        self.stats.reserved_bytes.increase(pool, alloc_size);
        if oversize {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        self.trace(
            TraceAction::SegmentAlloc,
            addr,
            alloc_size,
            stream,
            Some(site),
        );
        Ok(Some(id))
    }

    /// Hands out `id` (not in any free set), splitting off the remainder when the split rules
    /// allow. `hit`: `id` came from the free set (a cache hit), so it may be [`Reuse`]d.
    fn alloc_found_block(
        &mut self,
        id: BlockId,
        n: usize,
        size: usize,
        site: Site,
        hit: bool,
    ) -> BlockId {
        let expandable = self.heap.is_expandable(id);
        let already_split = self.heap.blocks[id].is_split();
        let pool = self.heap.blocks[id].pool;
        let mut split_rem = None;
        let id = if self.should_split(id, size) {
            let rem = id;
            let (addr, prev) = {
                let r = &self.heap.blocks[rem];
                (r.addr, r.prev)
            };
            let front = self.heap.splice_new(rem, addr, size, true, prev, Some(rem));
            {
                let r = &mut self.heap.blocks[rem];
                r.addr += size;
                r.size -= size;
            }
            let remaining = self.heap.blocks[rem].size;
            self.heap.insert_free(rem);
            split_rem = Some(rem);
            if !expandable {
                if already_split {
                    // An already split free block shrinks by `size`.
                    self.stats.inactive_split_bytes.decrease(pool, size);
                } else {
                    // A whole segment becomes split: its remainder is now non-releasable.
                    self.stats.inactive_split_bytes.increase(pool, remaining);
                    self.stats.inactive_split.increase(pool, 1);
                }
            }
            front
        } else {
            if already_split && !expandable {
                let bsize = self.heap.blocks[id].size;
                self.stats.inactive_split_bytes.decrease(pool, bsize);
                self.stats.inactive_split.decrease(pool, 1);
            }
            id
        };
        let oversize = self.heap.blocks[id].size >= self.cfg.max_split_size_bytes();
        let (addr, bsize, stream) = {
            let blk = &mut self.heap.blocks[id];
            blk.allocated = true;
            blk.active = true;
            blk.requested = n;
            blk.site = Some(site);
            blk.oversize = oversize;
            blk.category = Category::Temporary;
            (blk.addr, blk.size, blk.stream)
        };
        self.live.insert(addr, id);
        self.count_alloc(pool, bsize, n, oversize);
        self.trace(TraceAction::Alloc, addr, n, stream, Some(site));
        if hit && !expandable && self.cfg.backend == Backend::Native && !self.gc_enabled() {
            let blk = &self.heap.blocks[id];
            let (rem_size, m_next) = match split_rem {
                Some(rem) => {
                    let r = &self.heap.blocks[rem];
                    (r.size, r.next)
                }
                None => (0, blk.next),
            };
            debug_assert!(!self.mergeable(blk.prev) && !self.mergeable(m_next));
            self.reuse = Some(Reuse {
                front: id,
                addr,
                rem: split_rem,
                rem_size,
                stream,
                pool,
                n,
                site,
                size,
                bsize,
                oversize,
                m_split: blk.prev.is_some() || m_next.is_some(),
                phase: Phase::Live,
                pairs: 0,
                pairs_requested: 0,
                pairs_max_requested: 0,
            });
        }
        id
    }

    /// The statistics of handing out a block of `bsize` bytes for a request of `n`.
    #[inline]
    pub(super) fn count_alloc(&mut self, pool: PoolKind, bsize: usize, n: usize, oversize: bool) {
        let st = &mut self.stats;
        st.allocation.increase(pool, 1);
        st.allocated_bytes.increase(pool, bsize);
        st.active.increase(pool, 1);
        st.active_bytes.increase(pool, bsize);
        st.requested_bytes.increase(pool, n);
        if oversize {
            st.oversize_allocations.increase(1);
        }
        // Every block starts as a temporary; `set_category` moves it.
        st.category_bytes
            .get_mut(Category::Temporary)
            .increase(bsize);
        st.note_if_peak();
    }

    /// PyTorch's `free`: the owner gives the block at `addr` back. `Ok(false)` (and nothing
    /// done) when no block this allocator handed out starts at `addr`.
    #[inline]
    pub fn free<B: Backing>(&mut self, b: &B, addr: usize) -> Fallible<bool> {
        if self.reuse_free(addr) {
            Ok(true)
        } else {
            self.free_general(b, addr)
        }
    }

    /// `free` without a [`Reuse`].
    #[inline(never)]
    fn free_general<B: Backing>(&mut self, b: &B, addr: usize) -> Fallible<bool> {
        self.settle();
        let Some(id) = self.live.remove(&addr) else {
            return Ok(false);
        };
        let (pool, size, requested, stream, site, oversize, category) = {
            let blk = &mut self.heap.blocks[id];
            blk.allocated = false;
            let o = blk.oversize;
            blk.oversize = false;
            let c = std::mem::take(&mut blk.category);
            (
                blk.pool,
                blk.size,
                blk.requested,
                blk.stream,
                blk.site,
                o,
                c,
            )
        };
        self.stats.allocation.decrease(pool, 1);
        self.stats.allocated_bytes.decrease(pool, size);
        self.stats.category_bytes.get_mut(category).decrease(size);
        if oversize {
            self.stats.oversize_allocations.decrease(1);
        }
        self.trace_freed(addr, requested, stream, site, category);
        let uses = std::mem::take(&mut self.heap.blocks[id].stream_uses);
        let mut pending = 0;
        for s in uses {
            match b.record_event(s) {
                Ok(ev) => {
                    self.events.entry(s).or_default().push_back((ev, id));
                    pending += 1;
                }
                // Without an event, wait for the stream now: slower, never unsafe.
                Err(_) => {
                    let _ = b.synchronize_stream(s);
                }
            }
        }
        self.heap.blocks[id].event_count += pending;
        if pending == 0 {
            self.free_block(b, id)?;
        }
        Ok(true)
    }

    /// [`malloc`](State::malloc), the block counted under `category` from the start: the
    /// temporaries' statistics (current, peak and sums) are as if it had never been one, and
    /// the mix at a peak it sets has it under `category`.
    pub fn malloc_as<B: Backing>(
        &mut self,
        b: &B,
        n: usize,
        stream: StreamId,
        site: Site,
        category: Category,
    ) -> Result<usize, CachingError> {
        // Counts any deferred reuse first, so that what is restored below is this block's
        // passage alone.
        self.settle();
        let temporary = *self.stats.category_bytes.get(Category::Temporary);
        let addr = self.malloc(b, n, stream, site)?;
        self.set_category(addr, category);
        *self.stats.category_bytes.get_mut(Category::Temporary) = temporary;
        Ok(addr)
    }

    /// Counts the live block at `addr` under `category` from now on. False (nothing done) when
    /// no live block starts at `addr`.
    pub fn set_category(&mut self, addr: usize, category: Category) -> bool {
        self.settle();
        let Some(&id) = self.live.get(&addr) else {
            return false;
        };
        let blk = &mut self.heap.blocks[id];
        let (old, size) = (blk.category, blk.size);
        if old != category {
            blk.category = category;
            self.stats.category_bytes.get_mut(old).decrease(size);
            self.stats.category_bytes.get_mut(category).increase(size);
            self.stats.follow_mark_at_peak(old, category, size);
        }
        true
    }

    /// Marks that `stream` (other than the block's own) uses the block at `addr`.
    pub fn record_stream(&mut self, addr: usize, stream: StreamId) -> bool {
        let Some(&id) = self.live.get(&addr) else {
            return false;
        };
        let blk = &mut self.heap.blocks[id];
        if blk.stream != stream && !blk.stream_uses.contains(&stream) {
            blk.stream_uses.push(stream);
        }
        true
    }

    /// Returns a block whose owner and other streams are done with it to its pool, merging it
    /// with free neighbours.
    pub fn free_block<B: Backing>(&mut self, b: &B, id: BlockId) -> Fallible<()> {
        let (pool, orig_size, requested, addr, stream, site) = {
            let blk = &self.heap.blocks[id];
            (
                blk.pool,
                blk.size,
                blk.requested,
                blk.addr,
                blk.stream,
                blk.site,
            )
        };
        self.trace(TraceAction::FreeCompleted, addr, requested, stream, site);
        let expandable = self.heap.is_expandable(id);
        {
            let blk = &mut self.heap.blocks[id];
            blk.active = false;
            blk.site = None;
            blk.requested = 0;
        }
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        for nb in [self.heap.blocks[id].prev, self.heap.blocks[id].next] {
            let merged = self.try_merge(id, nb);
            if merged > 0 {
                net_blocks -= 1;
                net_bytes -= merged as i64;
            }
        }
        self.heap.insert_free(id);
        if self.heap.blocks[id].is_split() {
            net_blocks += 1;
            net_bytes += self.heap.blocks[id].size as i64;
        }
        if !expandable {
            adjust(&mut self.stats.inactive_split, pool, net_blocks);
            adjust(&mut self.stats.inactive_split_bytes, pool, net_bytes);
        }
        self.stats.active.decrease(pool, 1);
        self.stats.active_bytes.decrease(pool, orig_size);
        self.stats.requested_bytes.decrease(pool, requested);
        if self.cfg.backend == Backend::System && !expandable && !self.heap.blocks[id].is_split() {
            self.release_block(b, id)?;
        }
        Ok(())
    }

    /// Merges `src` into `dst` if `src` is a free neighbour in the same mapped state. Returns
    /// the bytes absorbed.
    pub fn try_merge(&mut self, dst: BlockId, src: Option<BlockId>) -> usize {
        let Some(src) = src else { return 0 };
        {
            let s = &self.heap.blocks[src];
            let d = &self.heap.blocks[dst];
            if s.active || s.allocated || s.event_count > 0 || s.mapped != d.mapped {
                return 0;
            }
        }
        if self.heap.blocks[src].mapped {
            self.heap.remove_free(src);
        } else {
            self.heap.remove_unmapped(src);
        }
        let s = self.heap.blocks.remove(src);
        if self.heap.blocks[dst].prev == Some(src) {
            let d = &mut self.heap.blocks[dst];
            d.addr = s.addr;
            d.prev = s.prev;
            if let Some(p) = s.prev {
                self.heap.blocks[p].next = Some(dst);
            }
        } else {
            self.heap.blocks[dst].next = s.next;
            if let Some(n) = s.next {
                self.heap.blocks[n].prev = Some(dst);
            }
        }
        self.heap.blocks[dst].size += s.size;
        s.size
    }

    /// Frees blocks whose cross-stream events have completed (start of every malloc).
    fn process_events<B: Backing>(&mut self, b: &B) -> Fallible<()> {
        let mut ready = Vec::new();
        for q in self.events.values_mut() {
            while let Some(&(ev, id)) = q.front() {
                if !b.query_event(ev)? {
                    break;
                }
                q.pop_front();
                b.release_event(ev);
                let blk = &mut self.heap.blocks[id];
                blk.event_count -= 1;
                if blk.event_count == 0 {
                    ready.push(id);
                }
            }
        }
        self.events.retain(|_, q| !q.is_empty());
        for id in ready {
            self.free_block(b, id)?;
        }
        Ok(())
    }

    /// Waits for every outstanding event and frees the blocks they held.
    pub fn synchronize_and_free_events<B: Backing>(&mut self, b: &B) -> Fallible<()> {
        self.stats.num_sync_all_streams += 1;
        let queues = std::mem::take(&mut self.events);
        let mut ready = Vec::new();
        for (ev, id) in queues.into_values().flatten() {
            b.synchronize_event(ev)?;
            b.release_event(ev);
            let blk = &mut self.heap.blocks[id];
            blk.event_count -= 1;
            if blk.event_count == 0 {
                ready.push(id);
            }
        }
        for id in ready {
            self.free_block(b, id)?;
        }
        Ok(())
    }

    /// Size of the largest free cached block.
    pub fn largest_free_block(&self) -> usize {
        self.heap
            .free
            .iter()
            .flat_map(|f| f.keys())
            .map(|k| k.1)
            .max()
            .unwrap_or(0)
    }
}

#[inline]
fn adjust(stat: &mut super::stats::StatArray, pool: PoolKind, delta: i64) {
    if delta > 0 {
        stat.increase(pool, delta as usize);
    } else if delta < 0 {
        stat.decrease(pool, delta.unsigned_abs() as usize);
    }
}
