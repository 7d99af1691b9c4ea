//! The measured step: one training step (or a generation) on a fresh caching allocator with
//! the run's settings, pushed on the training thread, whose peaks are the step's own.

use std::collections::BTreeMap;
use std::sync::Arc;

use strata::alloc::caching::format_size;
use strata::alloc::{
    Backing, CachingAllocator, DeviceAllocator, Grouping, HostCachingAllocator, MemoryStats,
    VirtualBacking, VirtualCachingAllocator,
};
use strata::core::routing::META_CAPACITY;
use strata::core::{memory, with_device_allocator, Device};

use super::{Result, TrainError};

/// What the measured step left: its allocator's peaks, the category mix at the peak, and
/// the largest holders after the forward.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Measured {
    pub allocated: usize,
    pub reserved: usize,
    pub requested: usize,
    pub categories: BTreeMap<String, usize>,
    pub holders: Vec<String>,
}

/// Runs `step` on a fresh caching allocator for `device` (a host one, or a virtual one on
/// meta, configured from `STRATA_ALLOC_CONF` as the default one) pushed on this thread; what
/// `device`'s own allocator holds now counts as held through it. `step` is given the call
/// that lists the largest holders (the training step makes it after its forward).
pub(crate) fn measure_on_fresh<R>(
    device: Device,
    step: impl FnOnce(&mut dyn FnMut()) -> Result<R>,
) -> Result<(R, Measured)> {
    let held = memory::memory_stats(device)?;
    let settings = |e: strata::alloc::ConfigError| TrainError::Options(e.to_string());
    match device {
        Device::Meta => {
            let backing = VirtualBacking::new(META_CAPACITY).named("meta");
            let fresh = VirtualCachingAllocator::from_env(backing).map_err(settings)?;
            measure(Arc::new(fresh), device, &held, step)
        }
        _ => {
            let fresh = HostCachingAllocator::host().map_err(settings)?;
            measure(Arc::new(fresh), device, &held, step)
        }
    }
}

/// Runs `step` with `fresh` as `device`'s allocator on this thread; `held` are the bytes by
/// category that live elsewhere through the step (parameters, optimizer state, the batch,
/// on the run's own allocator), added to the fresh allocator's mix at its peak.
fn measure<B, R>(
    fresh: Arc<CachingAllocator<B>>,
    device: Device,
    held: &MemoryStats,
    step: impl FnOnce(&mut dyn FnMut()) -> Result<R>,
) -> Result<(R, Measured)>
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
