//! Expandable segments (`expandable_segments:True`): one growable address reservation per
//! (stream, pool), backed by pages (2 MiB small pool, 20 MiB large pool) mapped on demand at
//! the lowest address that fits and unmapped again when released.

use super::blocks::{BlockId, BlockInfo, Expandable, Segment};
use super::config::{PoolKind, LARGE_BUFFER, SMALL_BUFFER};
use super::history::TraceAction;
use super::state::{Fallible, State};
use crate::backing::{memcheck, Backing, BackingError, StreamId};
use crate::Site;

fn page_size(pool: PoolKind) -> usize {
    match pool {
        PoolKind::Small => SMALL_BUFFER,
        PoolKind::Large => LARGE_BUFFER,
    }
}

impl State {
    fn allocatable(&self, id: Option<BlockId>) -> bool {
        id.is_some_and(|id| {
            let b = &self.heap.blocks[id];
            !b.allocated && !b.active && b.event_count == 0
        })
    }

    /// Free or unmapped blocks from `start` on add up to `size`.
    fn has_room(&self, start: BlockId, size: usize) -> bool {
        let mut bytes = 0;
        let mut cur = Some(start);
        while bytes < size && self.allocatable(cur) {
            let b = &self.heap.blocks[cur.expect("allocatable implies some")];
            bytes += b.size;
            cur = b.next;
        }
        bytes >= size
    }

    /// The lowest run of free-or-unmapped space on `stream` holding `size` bytes, starting at
    /// an unmapped range or the free block just before one; else a new reservation.
    fn find_expandable_block<B: Backing>(
        &mut self,
        b: &B,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
        site: Site,
    ) -> Fallible<Option<BlockId>> {
        let p = pool.index();
        let found = self.heap.unmapped[p]
            .range((stream, 0, 0)..)
            .take_while(|(k, _)| k.0 == stream)
            .map(|(_, &id)| {
                let prev = self.heap.blocks[id].prev;
                if self.allocatable(prev) {
                    prev.expect("allocatable implies some")
                } else {
                    id
                }
            })
            .find(|&c| self.has_room(c, size));
        if found.is_some() {
            return Ok(found);
        }
        let page = page_size(pool);
        let (_, total) = b.mem_info();
        let reservation = total
            .saturating_add(total / 8)
            .max(size)
            .checked_next_multiple_of(page)
            .ok_or(BackingError::OutOfMemory { requested: size });
        let reservation = match reservation {
            Ok(r) => r.max(page),
            Err(_) => return Ok(None),
        };
        let base = match b.reserve(reservation) {
            Ok(a) => a,
            Err(BackingError::OutOfMemory { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let seq = self.heap.new_segment_id(base, b.orders_by_address());
        self.heap.segments.insert(
            seq,
            Segment {
                base,
                size: reservation,
                stream,
                pool,
                expandable: Some(Expandable {
                    page,
                    mapped_bytes: 0,
                }),
                site: Some(site),
                oversize: false,
            },
        );
        let mut blk = BlockInfo::new(seq, base, stream, pool, base, reservation);
        blk.seg_expandable = true;
        blk.mapped = false;
        let id = self.heap.blocks.insert(blk);
        self.heap.insert_unmapped(id);
        Ok(Some(id))
    }

    /// Maps the first `size` bytes (rounded up to whole pages) of the unmapped block `id` and
    /// caches them as a free block merged with free neighbours. `Ok(false)` when the device or
    /// the limit has no room.
    fn map_block<B: Backing>(
        &mut self,
        b: &B,
        id: BlockId,
        size: usize,
        site: Site,
    ) -> Fallible<bool> {
        let (addr, bsize, seq, pool, stream, next) = {
            let blk = &self.heap.blocks[id];
            debug_assert!(!blk.mapped && size <= blk.size);
            (blk.addr, blk.size, blk.seg, blk.pool, blk.stream, blk.next)
        };
        let page = self.heap.segments[&seq]
            .expandable
            .as_ref()
            .expect("expandable segment")
            .page;
        let map_size = size.next_multiple_of(page).min(bsize);
        if self
            .limit
            .is_some_and(|l| self.reserved.saturating_add(map_size) > l)
        {
            return Ok(false);
        }
        match b.map(addr, map_size) {
            Ok(()) => {}
            Err(BackingError::OutOfMemory { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
        if b.addresses_are_memory() {
            // Under Valgrind, only the blocks handed out are accessible.
            memcheck::make_noaccess(addr, map_size);
        }
        self.heap.remove_unmapped(id);
        self.heap.blocks[id].mapped = true;
        if map_size < bsize {
            let rest =
                self.heap
                    .splice_new(id, addr + map_size, bsize - map_size, false, Some(id), next);
            self.heap.insert_unmapped(rest);
            self.heap.blocks[id].size = map_size;
        }
        let prev = self.heap.blocks[id].prev;
        self.try_merge(id, prev);
        let next = self.heap.blocks[id].next;
        self.try_merge(id, next);
        self.heap.insert_free(id);
        self.reserved += map_size;
        if let Some(e) = self
            .heap
            .segments
            .get_mut(&seq)
            .and_then(|s| s.expandable.as_mut())
        {
            e.mapped_bytes += map_size;
        }
        self.stats.reserved_bytes.increase(pool, map_size);
        self.stats.num_device_alloc += 1;
        self.trace(TraceAction::SegmentMap, addr, map_size, stream, Some(site));
        Ok(true)
    }

    /// Finds room in (or creates) an expandable segment and maps pages until a free block of
    /// at least `size` bytes exists; returns it, removed from its free set.
    pub fn try_allocate_expandable<B: Backing>(
        &mut self,
        b: &B,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
        site: Site,
    ) -> Fallible<Option<BlockId>> {
        let Some(mut cand) = self.find_expandable_block(b, pool, stream, size, site)? else {
            return Ok(None);
        };
        if !self.heap.blocks[cand].mapped {
            let want = self.heap.blocks[cand].size.min(size);
            if !self.map_block(b, cand, want, site)? {
                return Ok(None);
            }
        }
        while self.heap.blocks[cand].size < size {
            // Invariant: cand is free and mapped, followed by an unmapped range.
            let remaining = size - self.heap.blocks[cand].size;
            let next = self.heap.blocks[cand]
                .next
                .expect("room was checked before mapping");
            let want = remaining.min(self.heap.blocks[next].size);
            if !self.map_block(b, next, want, site)? {
                return Ok(None);
            }
            cand = next;
        }
        self.heap.remove_free(cand);
        Ok(Some(cand))
    }

    /// Unmaps the whole pages inside the free expandable block `id`, keeping sub-page slivers
    /// at either end as free blocks.
    pub fn unmap_block<B: Backing>(&mut self, b: &B, id: BlockId) -> Fallible<()> {
        let (addr, size, seq, pool, stream, prev, next) = {
            let blk = &self.heap.blocks[id];
            (
                blk.addr, blk.size, blk.seg, blk.pool, blk.stream, blk.prev, blk.next,
            )
        };
        let (base, page) = {
            let s = &self.heap.segments[&seq];
            (
                s.base,
                s.expandable.as_ref().expect("expandable segment").page,
            )
        };
        let start = base + (addr - base).next_multiple_of(page);
        let end = base + (addr + size - base) / page * page;
        if end <= start {
            return Ok(());
        }
        let len = end - start;
        // Unmapping does not wait for queued work the way freeing a segment does.
        b.synchronize_stream(stream)?;
        // SAFETY: the pages lie inside a free block: nothing points into them.
        unsafe { b.unmap(start, len)? };
        self.heap.remove_free(id);
        if start > addr {
            let before = self
                .heap
                .splice_new(id, addr, start - addr, true, prev, Some(id));
            self.heap.insert_free(before);
        }
        if addr + size > end {
            let after = self
                .heap
                .splice_new(id, end, addr + size - end, true, Some(id), next);
            self.heap.insert_free(after);
        }
        {
            let blk = &mut self.heap.blocks[id];
            blk.addr = start;
            blk.size = len;
            blk.mapped = false;
        }
        let prev = self.heap.blocks[id].prev;
        self.try_merge(id, prev);
        let next = self.heap.blocks[id].next;
        self.try_merge(id, next);
        self.heap.insert_unmapped(id);
        self.reserved -= len;
        if let Some(e) = self
            .heap
            .segments
            .get_mut(&seq)
            .and_then(|s| s.expandable.as_mut())
        {
            e.mapped_bytes -= len;
        }
        self.stats.reserved_bytes.decrease(pool, len);
        self.stats.num_device_free += 1;
        self.trace(TraceAction::SegmentUnmap, start, len, stream, None);
        Ok(())
    }

    /// Gives back the reservation of an expandable segment that is one unmapped block.
    pub fn release_expandable_segment<B: Backing>(&mut self, b: &B, id: BlockId) -> Fallible<()> {
        let (seq, addr, size) = {
            let blk = &self.heap.blocks[id];
            debug_assert!(!blk.mapped && !blk.is_split());
            (blk.seg, blk.addr, blk.size)
        };
        // SAFETY: the whole reservation is one unmapped block.
        unsafe { b.release_reservation(addr, size)? };
        self.heap.remove_unmapped(id);
        self.heap.blocks.remove(id);
        self.heap.segments.remove(&seq);
        Ok(())
    }
}
