//! Giving cached memory back to the backing: whole segments, oversize segments under pressure,
//! `empty_cache`, and the garbage collector.

use super::blocks::BlockId;
use super::config::PoolKind;
use super::history::TraceAction;
use super::state::{Fallible, State};
use crate::backing::{Backing, StreamId};

impl State {
    /// Returns the segment of the free, unsplit, non-expandable block `id` to the backing.
    pub fn release_block<B: Backing>(&mut self, b: &B, id: BlockId) -> Fallible<()> {
        let (seq, addr, size, pool, stream) = {
            let blk = &self.heap.blocks[id];
            debug_assert!(blk.is_free() && !blk.is_split());
            (blk.seg, blk.addr, blk.size, blk.pool, blk.stream)
        };
        // SAFETY: the block covers its whole segment and is free: nothing points into it.
        unsafe { b.free_segment(addr, size)? };
        self.heap.remove_free(id);
        self.heap.blocks.remove(id);
        let seg = self
            .heap
            .segments
            .remove(&seq)
            .expect("segment of a live block");
        self.reserved -= size;
        self.stats.num_device_free += 1;
        self.stats.segment.decrease(pool, 1);
        self.stats.reserved_bytes.decrease(pool, size);
        if seg.oversize {
            self.stats.oversize_segments.decrease(1);
        }
        self.trace(TraceAction::SegmentFree, addr, size, stream, seg.site);
        Ok(())
    }

    fn releasable(&self, id: BlockId) -> bool {
        !self.heap.blocks[id].is_split() && !self.heap.is_expandable(id)
    }

    /// Under pressure with `max_split_size` set: frees the smallest cached oversize segment
    /// that covers the request on this stream, or else oversize segments from the largest down
    /// until enough is freed. Returns whether enough was freed.
    pub fn release_available_cached_blocks<B: Backing>(
        &mut self,
        b: &B,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Fallible<bool> {
        let ms = self.cfg.max_split_size_bytes();
        if self.cfg.max_split_size.is_none() {
            return Ok(false);
        }
        let key = size.max(ms);
        let p = pool.index();
        let single = self.heap.free[p]
            .at_or_after((stream, key, 0, 0))
            .next()
            .filter(|(k, _)| k.0 == stream)
            .map(|(_, &id)| id)
            .filter(|&id| self.releasable(id));
        if let Some(id) = single {
            self.release_block(b, id)?;
            return Ok(true);
        }
        let candidates: Vec<BlockId> = self.heap.free[p]
            .before((stream, key, 0, 0))
            .rev()
            .take_while(|(k, _)| k.0 == stream && k.1 >= ms)
            .map(|(_, &id)| id)
            .collect();
        let mut released = 0;
        for id in candidates {
            if released >= key {
                break;
            }
            if self.releasable(id) {
                released += self.heap.blocks[id].size;
                self.release_block(b, id)?;
            }
        }
        Ok(released >= key)
    }

    /// PyTorch's `release_cached_blocks` (what `empty_cache` does): waits for outstanding
    /// events, frees every cached segment that is wholly free, and unmaps the free pages of
    /// expandable segments (releasing those left with nothing mapped).
    pub fn release_cached_blocks<B: Backing>(&mut self, b: &B) -> Fallible<()> {
        self.synchronize_and_free_events(b)?;
        for pool in [PoolKind::Large, PoolKind::Small] {
            let p = pool.index();
            let ids: Vec<BlockId> = self.heap.free[p].values().copied().collect();
            let mut to_unmap = Vec::new();
            for id in ids {
                if self.heap.is_expandable(id) {
                    to_unmap.push(id);
                } else if !self.heap.blocks[id].is_split() {
                    self.release_block(b, id)?;
                }
            }
            for id in to_unmap {
                self.unmap_block(b, id)?;
            }
            // Expandable segments with nothing mapped (including fresh ones whose first
            // mapping failed) give their address space back.
            let empty: Vec<BlockId> = self.heap.unmapped[p]
                .values()
                .copied()
                .filter(|&id| !self.heap.blocks[id].is_split())
                .collect();
            for id in empty {
                self.release_expandable_segment(b, id)?;
            }
        }
        Ok(())
    }

    /// The garbage collector (`garbage_collection_threshold`): when reserved memory is above
    /// the threshold fraction of the limit, frees the oldest cached whole segments of the large
    /// pool (those at least as old as the average, round after round) until enough is freed.
    pub fn garbage_collect<B: Backing>(&mut self, b: &B) -> Fallible<()> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let threshold = (self.cfg.garbage_collection_threshold * limit as f64) as usize;
        if self.reserved <= threshold {
            return Ok(());
        }
        let target = self.reserved - threshold;
        let p = PoolKind::Large.index();
        let clock = self.heap.free_calls[p];
        let age = |s: &State, id: BlockId| clock.saturating_sub(s.heap.blocks[id].gc_count_base);
        let candidates = |s: &State| -> Vec<BlockId> {
            s.heap.free[p]
                .values()
                .copied()
                .filter(|&id| s.releasable(id))
                .collect()
        };
        let initial = candidates(self);
        let mut count = initial.len();
        let mut total_age: f64 = initial.iter().map(|&id| age(self, id) as f64).sum();
        let mut reclaimed = 0;
        let mut freed_any = true;
        while reclaimed < target && freed_any && count > 0 {
            let average = total_age / count as f64;
            freed_any = false;
            for id in candidates(self) {
                let a = age(self, id);
                if a as f64 >= average {
                    freed_any = true;
                    reclaimed += self.heap.blocks[id].size;
                    total_age -= a as f64;
                    count -= 1;
                    self.release_block(b, id)?;
                }
            }
        }
        Ok(())
    }
}
