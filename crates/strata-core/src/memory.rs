//! The memory API of a device, named as PyTorch's `torch.cuda` memory functions: statistics,
//! peaks, the summary table, `empty_cache`, limits, history and snapshots.
//!
//! Every function asks the *default* allocator of `device` (on the CPU: PyTorch's caching
//! algorithm over host memory, see [`strata_alloc::CachingAllocator`]). Allocations routed
//! elsewhere with [`with_allocator`](crate::with_allocator) are counted by that allocator,
//! not here.
//!
//! On the host, "reserved" means address space mapped for cached segments. Pages of a
//! fresh segment become resident when first written; once a segment has been used its pages
//! stay resident while it is cached, which is why a reused block takes no page faults.
//!
//! ```
//! use strata_core::{memory, DType, Device, Tensor};
//! let before = memory::memory_allocated(Device::Cpu)?;
//! let t = Tensor::zeros(&[1024], DType::F32)?;           // 4 KiB
//! assert!(memory::memory_allocated(Device::Cpu)? >= before + 4096);
//! drop(t);                                               // back to the cache at once
//! assert!(memory::memory_reserved(Device::Cpu)? >= memory::memory_allocated(Device::Cpu)?);
//! println!("{}", memory::memory_summary(Device::Cpu, true)?);
//! # Ok::<(), strata_core::Error>(())
//! ```

use std::collections::BTreeMap;
use std::sync::Mutex;

use strata_alloc::BackingError;
use strata_alloc::{
    ConfigError, DeviceAllocator, GroupUsage, Grouping, MemoryStats, RecordContext, SiteUsage,
    Snapshot,
};

use crate::routing::{device_allocator, DefaultAllocator};

/// Runs `$body` with `$a` bound to the default allocator of `$device`, whichever backing
/// it has.
macro_rules! on_default {
    ($device:expr, |$a:ident| $body:expr) => {
        match device_allocator($device)? {
            DefaultAllocator::Host($a) => $body,
            DefaultAllocator::Meta($a) => $body,
            #[cfg(feature = "cuda")]
            DefaultAllocator::Cuda($a) => $body,
        }
    };
}
use crate::{Device, Error, ProgramLines, Result};

fn config_error(op: &'static str, e: ConfigError) -> Error {
    Error::Argument {
        op,
        message: e.to_string(),
        hint: Some(format!("check the value given for `{}`", e.key)),
    }
}

fn backing_error(op: &'static str, e: BackingError) -> Error {
    Error::Unsupported {
        op,
        message: format!("the device refused to release memory: {e}"),
    }
}

/// Bytes of blocks handed out to live tensors (`allocated_bytes.all.current`); sizes are
/// rounded up to the allocator's 512-byte granularity, as PyTorch counts them.
pub fn memory_allocated(device: Device) -> Result<usize> {
    Ok(on_default!(device, |a| a.memory_allocated()))
}

/// The peak of [`memory_allocated`] since start or the last [`reset_peak_memory_stats`].
pub fn max_memory_allocated(device: Device) -> Result<usize> {
    Ok(on_default!(device, |a| a.max_memory_allocated()))
}

/// Bytes held by the allocator: live blocks plus the cache (`reserved_bytes.all.current`).
pub fn memory_reserved(device: Device) -> Result<usize> {
    Ok(on_default!(device, |a| a.memory_reserved()))
}

/// The peak of [`memory_reserved`] since start or the last [`reset_peak_memory_stats`].
pub fn max_memory_reserved(device: Device) -> Result<usize> {
    Ok(on_default!(device, |a| a.max_memory_reserved()))
}

/// Restarts every peak (`*.peak`) from its current value.
pub fn reset_peak_memory_stats(device: Device) -> Result<()> {
    on_default!(device, |a| a.reset_peak_memory_stats());
    Ok(())
}

/// Zeroes the accumulated totals (`*.allocated`, `*.freed`) and the event counters
/// (`num_ooms`, `num_alloc_retries`, ...).
pub fn reset_accumulated_memory_stats(device: Device) -> Result<()> {
    on_default!(device, |a| a.reset_accumulated_memory_stats());
    Ok(())
}

/// Every statistic, typed.
pub fn memory_stats(device: Device) -> Result<MemoryStats> {
    Ok(on_default!(device, |a| a.memory_stats()))
}

/// The pinned host allocator's statistics under PyTorch's `host_memory_stats` keys
/// (`allocated_bytes.current`, `active_requests.peak`, `num_host_alloc`, ...).
pub fn host_memory_stats() -> BTreeMap<String, i64> {
    crate::routing::pinned_host_allocator().host_memory_stats()
}

/// Returns the pinned host allocator's cached blocks to the system (PyTorch's
/// `torch._C._host_emptyCache()`); blocks in use, or waiting for their events, stay.
pub fn empty_host_cache() {
    crate::routing::pinned_host_allocator().empty_cache()
}

/// Every statistic under PyTorch's key names (`allocated_bytes.all.current`,
/// `reserved_bytes.large_pool.peak`, `num_alloc_retries`, `num_ooms`, ...).
pub fn memory_stats_map(device: Device) -> Result<BTreeMap<String, i64>> {
    Ok(on_default!(device, |a| a.memory_stats_map()))
}

/// A readable table of the statistics, laid out like PyTorch's `memory_summary`
/// (`abbreviated` leaves out the per-pool rows).
pub fn memory_summary(device: Device, abbreviated: bool) -> Result<String> {
    Ok(on_default!(device, |a| a.memory_summary(abbreviated)))
}

/// Returns every wholly free cached segment to the system. Live tensors are untouched;
/// segments that still hold a live block keep their free pieces.
pub fn empty_cache(device: Device) -> Result<()> {
    // Reserved bytes are read only for an observer, which is told what the call released.
    let observer = crate::observer::observer();
    let before = match observer {
        Some(_) => memory_reserved(device)?,
        None => 0,
    };
    on_default!(device, |a| a.empty_cache()).map_err(|e| backing_error("empty_cache", e))?;
    if let Some(o) = observer {
        let after = memory_reserved(device)?;
        o.cache_emptied(device, before.saturating_sub(after), after);
    }
    Ok(())
}

/// Limits reserved memory on `device` to `bytes` (`None` lifts the limit), so that
/// out-of-memory is reachable on purpose, on the CPU too.
pub fn set_memory_limit(bytes: Option<usize>, device: Device) -> Result<()> {
    on_default!(device, |a| a.set_memory_limit(bytes));
    Ok(())
}

/// The limit on reserved memory, if any.
pub fn memory_limit(device: Device) -> Result<Option<usize>> {
    Ok(on_default!(device, |a| a.memory_limit()))
}

/// Limits reserved memory to `fraction` (in `[0, 1]`) of the device's total memory.
pub fn set_per_process_memory_fraction(fraction: f64, device: Device) -> Result<()> {
    on_default!(device, |a| a.set_per_process_memory_fraction(fraction))
        .map_err(|e| config_error("set_per_process_memory_fraction", e))
}

/// `(free, total)` bytes of the device.
pub fn mem_get_info(device: Device) -> Result<(usize, usize)> {
    Ok(on_default!(device, |a| a.mem_get_info()))
}

/// Replaces the allocator settings at run time (the `STRATA_ALLOC_CONF` syntax); an invalid
/// setting is an error naming its key and changes nothing.
pub fn set_allocator_settings(settings: &str, device: Device) -> Result<()> {
    on_default!(device, |a| a.set_allocator_settings(settings))
        .map_err(|e| config_error("set_allocator_settings", e))
}

/// Live bytes and blocks grouped by the source line and op that allocated them, largest
/// first: the first place to look when memory grows.
pub fn live_allocations(device: Device) -> Result<Vec<SiteUsage>> {
    Ok(on_default!(device, |a| a.live_allocations()))
}

/// Live bytes and blocks grouped by site, by scope path (`Grouping::Scope`: which part of
/// the model holds the memory) or by category (`Grouping::Category`: parameters, gradients,
/// optimizer state, activations, inputs, temporaries), largest first.
///
/// ```
/// use strata_core::{memory, scope, DType, Device, Grouping, Tensor};
/// let _s = scope::enter("decoder");
/// let h = Tensor::on(Device::Meta).zeros(&[1 << 20], DType::F32)?;
/// let by_scope = memory::live_allocations_by(Device::Meta, Grouping::Scope)?;
/// assert!(by_scope.iter().any(|g| g.key == "decoder" && g.bytes >= 4 << 20));
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn live_allocations_by(device: Device, grouping: Grouping) -> Result<Vec<GroupUsage>> {
    Ok(on_default!(device, |a| a.live_allocations_by(grouping)))
}

/// Starts (`enabled`) or stops recording allocation history into a ring buffer of the newest
/// `max_entries` events; see [`snapshot`]. While it records sites (any `context` but
/// `Never`), ops are attributed to the program's lines, as [`ProgramLines`] does, so the
/// history names the lines the program wrote rather than strata's own.
///
/// [`ProgramLines`]: crate::ProgramLines
pub fn record_memory_history(
    enabled: bool,
    context: RecordContext,
    max_entries: usize,
    device: Device,
) -> Result<()> {
    on_default!(device, |a| a.record_memory_history(
        enabled,
        context,
        max_entries
    ));
    let mut recording = HISTORY_LINES.lock().unwrap_or_else(|p| p.into_inner());
    recording.retain(|(d, _)| *d != device);
    if enabled && context != RecordContext::Never {
        recording.push((device, ProgramLines::record()));
    }
    Ok(())
}

/// The devices whose default allocator records history with sites, each holding ops to
/// the program's lines.
static HISTORY_LINES: Mutex<Vec<(Device, ProgramLines)>> = Mutex::new(Vec::new());

/// What-if replay of a recorded history (a [`Snapshot`]'s trace, strata's or PyTorch's)
/// under other allocator settings and capacities: see
/// [`strata_alloc::offline::replay`]. `Snapshot::load` reads the file.
pub use strata_alloc::offline::{
    replay, Coverage, ReplayError, ReplayFigures, ReplayOom, ReplayReport,
};

/// Segments, blocks and the recorded history, in the structure of PyTorch's
/// `torch.cuda.memory._snapshot()`; save it with [`Snapshot::to_json`].
pub fn snapshot(device: Device) -> Result<Snapshot> {
    Ok(on_default!(device, |a| a.snapshot()))
}
