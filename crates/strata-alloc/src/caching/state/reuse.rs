//! The allocator's fast path for a request that repeats the one just freed: the [`Reuse`]
//! record, the allocation and free it short-cuts, and the deferred statistics it keeps.

use super::super::blocks::BlockId;
use super::super::config::{PoolKind, MAX_REQUEST};
use super::super::history::TraceAction;
use super::{adjust, State};
use crate::backing::StreamId;
use crate::{Category, Site};

/// The most recent cache hit, kept so that the free that undoes it, and then a request of the
/// same rounded size on the same stream, skip the free-set and live-map updates and, while
/// history is off, the statistics.
///
/// A hit takes the free block `M` out of its free set and hands out its front `front`, leaving
/// the remainder `rem` (if it was split) in the free set. Freeing `front` right afterwards
/// merges it back into exactly `M`, so the allocator is back in the state the hit started
/// from; the same request would then take `M` again and split it the same way. Instead of
/// doing that merge and that split on the free set, the free only marks the record
/// [`Freed`](Phase::Freed) and leaves `front` in `live`, and the repeated request hands `front`
/// out again. Any other operation first [settles](State::settle) the record, doing what the
/// free skipped, so everything else only ever sees the usual state. Anything but the hit's own
/// free and the repeated request drops the record, so while it exists nothing else has
/// changed: the blocks around `front` are as the hit left them.
///
/// A repeated request with history off is not counted at all ([`Phase::Uncounted`]): its free
/// then adds one to `pairs`, and [`State::sync_stats`] folds the pairs into the statistics
/// when they are read. Every such pair raises and lowers the same statistics by the same
/// amounts from the same starting point (nothing else happens in between), so `k` of them
/// add `k` times those amounts to the `allocated` and `freed` totals, leave `current` as it
/// was, and lift `peak` to at least `current` plus the largest rise: exactly what counting
/// each at once would give.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reuse {
    /// The block handed out.
    pub(super) front: BlockId,
    /// Its address.
    pub(super) addr: usize,
    /// The free remainder split off `M`, if it was split.
    pub(super) rem: Option<BlockId>,
    /// The size of `rem` (0 without one).
    pub(super) rem_size: usize,
    pub(super) stream: StreamId,
    pub(super) pool: PoolKind,
    /// The latest request for it, in bytes.
    pub(super) n: usize,
    /// The site of the latest request.
    pub(super) site: Site,
    /// The rounded request size.
    pub(super) size: usize,
    /// The size of `front` (larger than `size` when `M` was too close in size to split).
    pub(super) bsize: usize,
    /// `front` counts as an oversize allocation (the settings cannot change while the record
    /// exists).
    pub(super) oversize: bool,
    /// `M` was part of a split segment (it had a neighbour).
    pub(super) m_split: bool,
    pub(super) phase: Phase,
    /// Requests and frees of `front` that undid each other while uncounted, not yet in the
    /// statistics.
    pub(super) pairs: u64,
    /// The sum of their requests, in bytes.
    pub(super) pairs_requested: u64,
    /// The largest of their requests, in bytes.
    pub(super) pairs_max_requested: usize,
}

/// Where the block of a [`Reuse`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Handed out, and counted in the statistics and its block fields.
    Live,
    /// Handed out, but only the record says so: the statistics and the block's fields are as
    /// they were when it was last freed. [`State::sync_stats`] counts it.
    Uncounted,
    /// Freed: it counts as merged back into `M` and cached, but the free set still holds `rem`
    /// alone, `front` keeps its allocation-time extent and it is still in `live`.
    Freed,
}

impl State {
    /// Brings the statistics up to date with a [`Reuse`] record: folds in the pairs it has not
    /// counted and counts the allocation it holds uncounted. The record stays; what is left of
    /// the fast path afterwards counts at once until the next uncounted request.
    pub fn sync_stats(&mut self) {
        let Some(r) = self.reuse.as_mut() else { return };
        let pairs = std::mem::take(&mut r.pairs);
        let requested = std::mem::take(&mut r.pairs_requested);
        let max_requested = std::mem::take(&mut r.pairs_max_requested);
        let uncounted = r.phase == Phase::Uncounted;
        if pairs == 0 && !uncounted {
            return;
        }
        if uncounted {
            r.phase = Phase::Live;
        }
        let r = *r;
        // The pairs came before the allocation now held: fold them first.
        if pairs > 0 {
            self.count_pairs(&r, pairs, requested, max_requested);
        }
        if uncounted {
            self.count_reuse_alloc(&r);
        }
    }

    /// The statistics of `k` requests of `r`'s block, each freed at once, whose requests sum
    /// to `requested` bytes, the largest `max_requested`: what `count_reuse_alloc` and then
    /// the counting part of `reuse_free` give, `k` times over.
    fn count_pairs(&mut self, r: &Reuse, k: u64, requested: u64, max_requested: usize) {
        let pool = r.pool;
        let st = &mut self.stats;
        let bytes = k * r.bsize as u64;
        if st.allocated_bytes.all.current + r.bsize as i64 > st.allocated_bytes.all.peak {
            // The first of the pairs set a new peak: the live blocks and this temporary.
            st.take_peak_mix();
            st.category_bytes_at_peak.add_temporary(r.bsize);
        }
        st.allocation.rise_and_fall(pool, k, 1);
        st.active.rise_and_fall(pool, k, 1);
        st.allocated_bytes.rise_and_fall(pool, bytes, r.bsize);
        st.active_bytes.rise_and_fall(pool, bytes, r.bsize);
        st.requested_bytes
            .rise_and_fall(pool, requested, max_requested);
        // Nothing could mark the block between the request and the free: a temporary.
        st.category_bytes
            .get_mut(Category::Temporary)
            .rise_and_fall(bytes, r.bsize);
        if r.oversize {
            st.oversize_allocations.rise_and_fall(k, 1);
        }
        match (r.rem, r.m_split) {
            // The request shrinks `M`, a split block, to `rem`; the free grows it back.
            (Some(_), true) => st
                .inactive_split_bytes
                .fall_and_rise(pool, k * r.size as u64),
            // The request splits a whole segment, leaving `rem` non-releasable; the free
            // makes it whole again.
            (Some(_), false) => {
                let rem = r.rem_size;
                st.inactive_split_bytes
                    .rise_and_fall(pool, k * rem as u64, rem);
                st.inactive_split.rise_and_fall(pool, k, 1);
            }
            // The request takes `M`, a split block, whole; the free returns it.
            (None, true) => {
                st.inactive_split_bytes
                    .fall_and_rise(pool, k * r.bsize as u64);
                st.inactive_split.fall_and_rise(pool, k);
            }
            (None, false) => {}
        }
    }

    /// Completes a [`Reuse`] record and drops it: counts what it left uncounted, and does the
    /// merge, caching and `live` removal a free through it skipped. Every operation but
    /// `malloc`, `free` and the statistics readers runs after this, since the state the record
    /// describes may change.
    pub fn settle(&mut self) {
        if self.reuse.is_none() {
            return;
        }
        self.sync_stats();
        // The fields the free skipped, read in place: moving the whole record out costs a
        // `memcpy` on every allocation and free that passes here.
        let Some(&Reuse {
            phase,
            addr,
            front,
            rem,
            rem_size,
            ..
        }) = self.reuse.as_ref()
        else {
            return;
        };
        self.reuse = None;
        if phase != Phase::Freed {
            return;
        }
        let removed = self.live.remove(&addr);
        debug_assert_eq!(removed, Some(front));
        if let Some(rem) = rem {
            let merged = self.try_merge(front, Some(rem));
            debug_assert_eq!(
                merged, rem_size,
                "the remainder of a reused block stays free"
            );
        }
        self.heap.insert_free(front);
    }

    /// Whether `src` would merge into a mapped, non-expandable neighbour.
    pub(super) fn mergeable(&self, src: Option<BlockId>) -> bool {
        src.is_some_and(|src| {
            let s = &self.heap.blocks[src];
            !(s.active || s.allocated || s.event_count > 0 || !s.mapped)
        })
    }

    /// A request repeating the one a freed [`Reuse`] undid: hands the same block out again,
    /// returning its address. Searching the free set and splitting would pick and split the
    /// same block; with history on, the statistics and history are counted as they would
    /// be, otherwise the request is left [uncounted](Phase::Uncounted).
    #[inline]
    pub(super) fn reuse_alloc(&mut self, n: usize, stream: StreamId, site: Site) -> Option<usize> {
        let r = self.reuse.as_mut()?;
        if r.phase != Phase::Freed
            || r.stream != stream
            || !self.events.is_empty()
            || (n != r.n && (n >= MAX_REQUEST || self.cfg.round_size(n) != r.size))
        {
            return None;
        }
        r.n = n;
        r.site = site;
        let addr = r.addr;
        if self.history.enabled {
            r.phase = Phase::Live;
            let r = *r;
            self.count_reuse_alloc(&r);
            self.trace(TraceAction::Alloc, addr, n, stream, Some(site));
        } else {
            r.phase = Phase::Uncounted;
        }
        Some(addr)
    }

    /// Counts the request `r` records for its freed block, in the statistics and the block
    /// fields, as searching the free set and splitting would.
    fn count_reuse_alloc(&mut self, r: &Reuse) {
        let pool = r.pool;
        if let Some(rem) = r.rem {
            // What re-caching the remainder would record.
            self.heap.blocks[rem].gc_count_base = self.heap.free_calls[pool.index()];
            if r.m_split {
                self.stats.inactive_split_bytes.decrease(pool, r.size);
            } else {
                self.stats.inactive_split_bytes.increase(pool, r.rem_size);
                self.stats.inactive_split.increase(pool, 1);
            }
        } else if r.m_split {
            self.stats.inactive_split_bytes.decrease(pool, r.bsize);
            self.stats.inactive_split.decrease(pool, 1);
        }
        {
            let blk = &mut self.heap.blocks[r.front];
            debug_assert!(blk.size == r.bsize && blk.addr == r.addr && !blk.allocated);
            blk.allocated = true;
            blk.active = true;
            blk.requested = r.n;
            blk.site = Some(r.site);
            blk.oversize = r.oversize;
            blk.category = Category::Temporary;
        }
        self.count_alloc(pool, r.bsize, r.n, r.oversize);
    }

    /// The free of the block of a [`Reuse`], when nothing else happened since: every
    /// statistic and history entry that `free` and `free_block` give (none for an uncounted
    /// request, which becomes an uncounted pair), but the merge with the remainder, the caching
    /// and the `live` removal are left to `settle`. False (nothing done) when the free is not
    /// such a one.
    #[inline]
    pub(super) fn reuse_free(&mut self, addr: usize) -> bool {
        let Some(r) = self.reuse.as_mut() else {
            return false;
        };
        if r.addr != addr {
            return false;
        }
        match r.phase {
            Phase::Freed => return false,
            Phase::Uncounted => {
                // Nothing observed the request: it and this free cancel out but for the
                // totals and peaks, which `sync_stats` folds in.
                r.phase = Phase::Freed;
                r.pairs += 1;
                r.pairs_requested += r.n as u64;
                r.pairs_max_requested = r.pairs_max_requested.max(r.n);
                return true;
            }
            Phase::Live => {}
        }
        // Counted pairs are folded in whenever the block is counted as live.
        debug_assert_eq!(r.pairs, 0);
        let blk = &mut self.heap.blocks[r.front];
        if !blk.stream_uses.is_empty() {
            return false;
        }
        r.phase = Phase::Freed;
        let r = *r;
        let o = blk.oversize;
        let site = blk.site.take();
        blk.allocated = false;
        blk.oversize = false;
        blk.active = false;
        let requested = std::mem::take(&mut blk.requested);
        let category = blk.category;
        let (pool, size, stream) = (r.pool, r.bsize, r.stream);
        self.stats.allocation.decrease(pool, 1);
        self.stats.allocated_bytes.decrease(pool, size);
        self.stats.category_bytes.get_mut(category).decrease(size);
        if o {
            self.stats.oversize_allocations.decrease(1);
        }
        self.trace_freed(addr, requested, stream, site, category);
        self.trace(TraceAction::FreeCompleted, addr, requested, stream, site);
        // `front` merges with `rem` (its only free neighbour) back into `M`.
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        if r.rem.is_some() {
            net_blocks -= 1;
            net_bytes -= r.rem_size as i64;
        }
        if r.m_split {
            net_blocks += 1;
            net_bytes += (size + r.rem_size) as i64;
        }
        adjust(&mut self.stats.inactive_split, pool, net_blocks);
        adjust(&mut self.stats.inactive_split_bytes, pool, net_bytes);
        self.stats.active.decrease(pool, 1);
        self.stats.active_bytes.decrease(pool, size);
        self.stats.requested_bytes.decrease(pool, requested);
        true
    }
}
