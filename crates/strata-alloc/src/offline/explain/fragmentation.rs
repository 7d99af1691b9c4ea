//! How the reserved memory is used at a moment: free bytes inside segments, the largest free
//! block, split blocks that cannot be released, and segments by pool.

use serde::Serialize;

use crate::caching::PoolKind;
use crate::caching::{BlockState, SegmentSnapshot};

/// The segments of one pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolUse {
    /// The pool.
    pub pool: PoolKind,
    /// Segments (for expandable segments: mapped ranges).
    pub segments: usize,
    /// How many of them are expandable.
    pub expandable: usize,
    /// Bytes reserved.
    pub reserved: u64,
    /// Bytes of allocated blocks in them.
    pub allocated: u64,
    /// Bytes of free (cached) blocks in them.
    pub free: u64,
}

/// Fragmentation at a moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fragmentation {
    /// Bytes reserved from the device.
    pub reserved: u64,
    /// Bytes of allocated blocks.
    pub allocated: u64,
    /// Bytes of free blocks inside reserved segments ("reserved but unallocated").
    pub free_in_reserved: u64,
    /// The largest free block.
    pub largest_free_block: u64,
    /// Free bytes in segments that also hold a live block: the cache cannot give them back
    /// to the device (`inactive_split_bytes`, "non-releasable").
    pub inactive_split_bytes: u64,
    /// Segments by pool (small first).
    pub pools: Vec<PoolUse>,
}

impl Fragmentation {
    /// The figures of `segments`.
    pub fn of(segments: &[SegmentSnapshot]) -> Fragmentation {
        let mut f = Fragmentation {
            reserved: 0,
            allocated: 0,
            free_in_reserved: 0,
            largest_free_block: 0,
            inactive_split_bytes: 0,
            pools: Vec::new(),
        };
        for pool in [PoolKind::Small, PoolKind::Large] {
            let mut p = PoolUse {
                pool,
                segments: 0,
                expandable: 0,
                reserved: 0,
                allocated: 0,
                free: 0,
            };
            for s in segments.iter().filter(|s| s.segment_type == pool) {
                p.segments += 1;
                p.expandable += usize::from(s.is_expandable);
                p.reserved += s.total_size;
                let split = s.blocks.len() > 1;
                for b in &s.blocks {
                    match b.state {
                        BlockState::Inactive => {
                            p.free += b.size;
                            f.largest_free_block = f.largest_free_block.max(b.size);
                            if split {
                                f.inactive_split_bytes += b.size;
                            }
                        }
                        BlockState::ActiveAllocated => p.allocated += b.size,
                        BlockState::ActivePendingFree => {}
                    }
                }
            }
            f.reserved += p.reserved;
            f.allocated += p.allocated;
            f.free_in_reserved += p.free;
            if p.segments > 0 {
                f.pools.push(p);
            }
        }
        f
    }
}
