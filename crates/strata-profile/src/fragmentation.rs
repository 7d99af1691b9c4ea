//! Reserved memory the allocator holds but cannot hand out in one piece.

use std::fmt;

use strata_alloc::caching::BlockState;
use strata_core::{memory, Device};

use crate::finding::{Finding, FindingKind};
use crate::format::bytes;
use crate::Result;

/// The state of a device's cache: reserved against allocated, the free blocks, and what the
/// allocator is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct FragmentationReport {
    /// Bytes handed out to tensors.
    pub allocated: usize,
    /// Bytes held from the system (allocated plus cached).
    pub reserved: usize,
    /// Cached bytes: reserved minus allocated.
    pub free: usize,
    /// The largest free block: the largest request the cache can serve without asking the
    /// system.
    pub largest_free_block: usize,
    /// Free blocks in all.
    pub free_blocks: usize,
    /// Bytes of free blocks split off larger segments (PyTorch's `inactive_split_bytes`).
    pub inactive_split_bytes: usize,
    /// Whether segments grow in place (`expandable_segments`).
    pub expandable_segments: bool,
    /// The `max_split_size` setting in bytes (negative: none).
    pub max_split_size: i64,
}

impl FragmentationReport {
    /// The share of cached memory that is not in the largest free block: 0 when the cache
    /// is one block, near 1 when it is scattered in small pieces.
    pub fn fragmentation(&self) -> f64 {
        if self.free == 0 {
            0.0
        } else {
            1.0 - self.largest_free_block as f64 / self.free as f64
        }
    }

    /// A finding when at least a quarter of reserved memory (and 1 MiB) is cached and
    /// scattered (over half of it outside the largest free block), with settings to try.
    pub fn finding(&self) -> Option<Finding> {
        let cached_share = self.free as f64 / self.reserved.max(1) as f64;
        if self.free < 1 << 20 || cached_share < 0.25 || self.fragmentation() < 0.5 {
            return None;
        }
        let mut tips = Vec::new();
        if !self.expandable_segments {
            tips.push(
                "`expandable_segments:True` (segments grow in place instead of leaving gaps)"
                    .to_owned(),
            );
        }
        if self.max_split_size < 0 {
            let mb = (self.largest_free_block >> 20).max(1);
            tips.push(format!(
                "`max_split_size_mb:{mb}` (blocks above that size are not split for smaller \
                 requests)"
            ));
        }
        let settings = if tips.is_empty() {
            String::new()
        } else {
            format!(
                "; settings to try in STRATA_ALLOC_CONF: {}",
                tips.join(", ")
            )
        };
        Some(Finding::new(
            FindingKind::Fragmentation,
            format!(
                "{self}{settings}; or allocate the largest tensors first, at sizes that \
                 repeat from step to step"
            ),
        ))
    }
}

impl fmt::Display for FragmentationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} reserved for {} allocated: {} cached in {} free blocks, the largest {} \
             ({:.0}% fragmented), {} in split blocks",
            bytes(self.reserved),
            bytes(self.allocated),
            bytes(self.free),
            self.free_blocks,
            bytes(self.largest_free_block),
            100.0 * self.fragmentation(),
            bytes(self.inactive_split_bytes)
        )
    }
}

/// The fragmentation report of `device`'s allocator.
///
/// ```
/// use strata_profile::fragmentation;
/// use strata_core::Device;
/// let r = fragmentation(Device::Meta)?;
/// assert!(r.reserved >= r.allocated);
/// # Ok::<(), strata_profile::ProfileError>(())
/// ```
pub fn fragmentation(device: Device) -> Result<FragmentationReport> {
    let stats = memory::memory_stats(device)?;
    let snap = memory::snapshot(device)?;
    let free: Vec<u64> = snap
        .segments
        .iter()
        .flat_map(|s| s.blocks.iter())
        .filter(|b| b.state == BlockState::Inactive)
        .map(|b| b.size)
        .collect();
    let allocated = stats.allocated_bytes.all.current.max(0) as usize;
    let reserved = stats.reserved_bytes.all.current.max(0) as usize;
    Ok(FragmentationReport {
        allocated,
        reserved,
        free: reserved.saturating_sub(allocated),
        largest_free_block: free.iter().copied().max().unwrap_or(0) as usize,
        free_blocks: free.len(),
        inactive_split_bytes: stats.inactive_split_bytes.all.current.max(0) as usize,
        expandable_segments: snap.allocator_settings.expandable_segments,
        max_split_size: stats.max_split_size,
    })
}
