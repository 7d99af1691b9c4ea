//! The measured step: one training step on a fresh caching allocator with the run's
//! settings, pushed on the training thread, whose peaks are the step's own.

use std::collections::BTreeMap;
use std::sync::Arc;

use strata::alloc::caching::format_size;
use strata::alloc::{Backing, CachingAllocator, DeviceAllocator, Grouping, MemoryStats};
use strata::core::{with_device_allocator, Device};

use super::step::StepOutcome;
use super::Result;

/// What the measured step left: its allocator's peaks, the category mix at the peak, and
/// the largest holders after the forward.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    pub allocated: usize,
    pub reserved: usize,
    pub requested: usize,
    pub categories: BTreeMap<String, usize>,
    pub holders: Vec<String>,
}

/// Runs `step` with `fresh` as `device`'s allocator on this thread; `held` are the bytes by
/// category that live elsewhere through the step (parameters, optimizer state, the batch,
/// on the run's own allocator), added to the fresh allocator's mix at its peak.
pub(crate) fn measure<B>(
    fresh: Arc<CachingAllocator<B>>,
    device: Device,
    held: &MemoryStats,
    step: impl FnOnce(&mut dyn FnMut()) -> Result<StepOutcome>,
) -> Result<(StepOutcome, Measured)>
where
    B: Backing + 'static,
    CachingAllocator<B>: DeviceAllocator,
{
    let routed: Arc<dyn DeviceAllocator> = fresh.clone();
    let mut holders = Vec::new();
    let outcome = with_device_allocator(device, &routed, || {
        step(&mut || {
            let mut live = fresh.live_allocations_by(Grouping::Site);
            live.truncate(5);
            holders = live
                .iter()
                .map(|g| format!("{}: {} in {} blocks", g.key, format_size(g.bytes), g.count))
                .collect();
        })
    })?;
    let stats = fresh.memory_stats();
    let categories = stats.categories_at_peak_with(held);
    Ok((
        outcome,
        Measured {
            allocated: stats.allocated_bytes.all.peak.max(0) as usize,
            reserved: stats.reserved_bytes.all.peak.max(0) as usize,
            requested: stats.requested_bytes.all.peak.max(0) as usize,
            categories,
            holders,
        },
    ))
}
