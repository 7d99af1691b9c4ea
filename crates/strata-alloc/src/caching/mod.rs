//! `CachingAllocator`: PyTorch's CUDA caching allocator, over any [`Backing`].
//!
//! The algorithm is PyTorch's (`shared/reference/pytorch-memory-spec.md` §1):
//!
//! * Requests are rounded up to 512 bytes (or to `roundup_power2_divisions` steps). Rounded
//!   sizes up to 1 MiB are served from the small pool, carved from 2 MiB segments; larger ones
//!   from the large pool, carved from 20 MiB segments (requests under 10 MiB) or from segments
//!   of the request rounded up to 2 MiB.
//! * A request takes the smallest cached free block of its pool on its stream that fits (best
//!   fit; a block freed on one stream is only ever reused on that stream). A block is split
//!   when the remainder is at least 512 bytes (small pool, or expandable segments on) or more
//!   than 1 MiB (large pool, and only below `max_split_size`). Freed blocks merge with free
//!   neighbours at once.
//! * On a miss: garbage collection (if a limit and a threshold are set), a new segment, then
//!   freeing oversize cached segments (with `max_split_size`), then freeing every cached whole
//!   segment and retrying (`num_alloc_retries`), and only then out-of-memory
//!   ([`OomReport`], `num_ooms`).
//! * `empty_cache` returns every wholly free segment; segments with a live block keep their
//!   free pieces ("non-releasable", `inactive_split`).
//! * The limit ([`CachingAllocator::set_memory_limit`] or a fraction of the device) bounds
//!   *reserved* memory, as PyTorch's `set_per_process_memory_fraction` does.
//! * Expandable segments map memory in whole pages of PyTorch's sizes, 2 MiB in the small pool
//!   and 20 MiB in the large pool, so they remove the slack between segments but not the
//!   rounding to pages. On a small model that rounding sets the floor: the MLP of
//!   [`MlpTraining::small`](crate::trace::MlpTraining::small) peaks at 35.5 MiB allocated,
//!   35.3 MiB of it in the large pool (two pages, 40 MiB) and 2.6 MiB in the small pool (two
//!   pages, 4 MiB), so it reserves 44 MiB, 1.24 times its peak, with expandable segments as
//!   without them.
//!
//! Deliberate differences from PyTorch:
//! * Free blocks are ordered by `(stream, size, segment sequence number, offset)` instead of
//!   `(stream, size, address)`: ties go to the oldest segment rather than the lowest address,
//!   so the choices do not depend on the addresses a backing returns, and a
//!   [`VirtualBacking`] replay makes exactly the choices a
//!   [`HostBacking`] run makes. Expandable segments likewise prefer the
//!   oldest segment, then the lowest offset.
//! * With expandable segments the limit is checked against the pages actually mapped, not
//!   against a whole segment's size.
//! * Requests of 1 EiB or more are an invalid request, not an out-of-memory.
//! * The out-of-memory report names the user's request (PyTorch names the segment size it
//!   tried) and lists the sites holding the most memory.

mod blocks;
mod config;
mod expandable;
mod free_set;
mod hash;
mod history;
mod inspect;
mod oom;
mod release;
mod snapshot;
mod state;
mod stats;
mod summary;

use std::collections::BTreeMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

pub use config::{
    allocation_size, AllocatorConfig, Backend, ConfigError, PoolKind, CUDA_ENV_VARS, ENV_VAR,
    LARGE_BUFFER, MAX_REQUEST, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, ROUNDUP_INTERVALS, ROUND_LARGE,
    SMALL_BUFFER, SMALL_SIZE,
};
pub use history::{RecordContext, TraceAction, TraceEntry};
pub use inspect::{BlockLayout, SegmentLayout};
pub use snapshot::{
    AllocatorSettings, BlockSnapshot, BlockState, Frame, Frames, SegmentSnapshot, Snapshot,
    TraceEntrySnapshot, SCOPE_FILE,
};
pub use stats::{CategoryBytes, CategoryMix, MemoryStats, Stat, StatArray};
// The report, site usage and size formatting live below the allocators (the plain allocator
// and the errors use them too); these keep their `caching::` paths.
pub use crate::error::{OomReport, OOM_TOP_SITES};
pub use crate::site::SiteUsage;
pub use crate::size::format_size;

use crate::backing::{memcheck, Backing, BackingError, HostBacking, StreamId, VirtualBacking};
use crate::{
    AllocError, Block, Category, DeviceAllocator, GroupUsage, Grouping, Site, BLOCK_ALIGN,
};
use state::State;

/// Why a caching allocation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CachingError {
    /// Not enough memory even after releasing every cached segment. Recoverable.
    #[error(transparent)]
    OutOfMemory(Box<OomReport>),
    /// The request can never be satisfied.
    #[error("invalid allocation request: {0}")]
    Invalid(String),
    /// The backing failed.
    #[error(transparent)]
    Device(#[from] BackingError),
}

impl From<CachingError> for AllocError {
    fn from(e: CachingError) -> AllocError {
        match e {
            CachingError::OutOfMemory(r) => AllocError::OutOfMemory {
                device: r.device.clone(),
                requested: r.requested,
                allocated: r.allocated,
                limit: r.limit,
                report: Some(r),
            },
            CachingError::Invalid(m) => AllocError::Invalid(m),
            CachingError::Device(d) => AllocError::Invalid(d.to_string()),
        }
    }
}

/// A caching allocator over host memory.
pub type HostCachingAllocator = CachingAllocator<HostBacking>;
/// A caching allocator over address ranges only (simulation, planning).
pub type VirtualCachingAllocator = CachingAllocator<VirtualBacking>;

/// PyTorch's caching allocator over a [`Backing`]; see the [module docs](self).
///
/// It is `Send + Sync` (one lock around its state) and a [`DeviceAllocator`], so it can replace
/// [`HostAllocator`](crate::HostAllocator) anywhere. Allocations through the trait use the
/// backing's default stream; [`allocate_on_stream`](Self::allocate_on_stream) names one.
///
/// Over a backing whose addresses are not memory
/// ([`Backing::addresses_are_memory`] is false, as for [`VirtualBacking`]) the blocks handed
/// out carry addresses that must never be dereferenced.
///
/// ```
/// use strata_alloc::{CachingAllocator, DeviceAllocator, Site, VirtualBacking};
/// let a = CachingAllocator::new(VirtualBacking::new(1 << 30));
/// let b = a.allocate(100, &Site::unknown("example")).unwrap();
/// assert_eq!(a.memory_allocated(), 512); // rounded to 512 bytes
/// assert_eq!(a.memory_reserved(), 2 << 20); // one 2 MiB small-pool segment
/// unsafe { a.deallocate(b) };
/// assert_eq!(a.memory_reserved(), 2 << 20); // cached
/// a.empty_cache().unwrap();
/// assert_eq!(a.memory_reserved(), 0);
/// ```
pub struct CachingAllocator<B: Backing> {
    backing: B,
    state: Mutex<State>,
    /// Whether blocks are announced to Valgrind's memcheck: the process runs under memcheck
    /// and the backing's addresses are memory (see `docs/MEMCHECK.md`).
    shows_blocks_to_memcheck: bool,
}

impl<B: Backing> CachingAllocator<B> {
    /// An allocator with the default settings.
    pub fn new(backing: B) -> Self {
        Self::with_config(backing, AllocatorConfig::default())
    }

    /// An allocator with `config` (a `per_process_memory_fraction` in it sets the limit).
    pub fn with_config(backing: B, config: AllocatorConfig) -> Self {
        let fraction = config.per_process_memory_fraction;
        let shows_blocks_to_memcheck =
            backing.addresses_are_memory() && memcheck::running_under_memcheck();
        let a = CachingAllocator {
            backing,
            state: Mutex::new(State::new(config)),
            shows_blocks_to_memcheck,
        };
        if let Some(f) = fraction {
            a.apply_fraction(f);
        }
        a
    }

    /// An allocator configured by `STRATA_ALLOC_CONF`.
    pub fn from_env(backing: B) -> Result<Self, ConfigError> {
        Ok(Self::with_config(backing, AllocatorConfig::from_env()?))
    }

    /// The state, with whatever `malloc`/`free` deferred (a free's merge, a repeated request's
    /// statistics) completed: what every operation but those two and the statistics readers
    /// works on.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.lock_raw();
        st.settle();
        st
    }

    /// The state with its statistics up to date (`State::sync_stats`) but any free that
    /// `malloc`/`free` left pending still pending: for reading or resetting statistics.
    fn lock_stats(&self) -> MutexGuard<'_, State> {
        let mut st = self.lock_raw();
        st.sync_stats();
        st
    }

    /// The state as it is, possibly with a pending free and statistics not yet counted (see
    /// `State::settle`): for `malloc`, `free` and `memory_reserved`.
    fn lock_raw(&self) -> MutexGuard<'_, State> {
        // A panic while the lock is held is a bug in this module; the state is still the best
        // record of which memory is in use, so keep going with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The backing.
    pub fn backing(&self) -> &B {
        &self.backing
    }

    /// The settings in force.
    pub fn config(&self) -> AllocatorConfig {
        self.lock().cfg.clone()
    }

    /// Replaces the settings at run time with `settings` (the `STRATA_ALLOC_CONF` syntax), as
    /// PyTorch's `_set_allocator_settings`: keys not named return to their defaults. Blocks
    /// already handed out keep the layout they have; switching expandable segments off stops
    /// new memory going into them.
    pub fn set_allocator_settings(&self, settings: &str) -> Result<(), ConfigError> {
        let cfg = AllocatorConfig::parse(settings)?;
        let fraction = cfg.per_process_memory_fraction;
        self.lock().set_config(cfg);
        if let Some(f) = fraction {
            self.apply_fraction(f);
        }
        Ok(())
    }

    /// Allocates `size` bytes on `stream`. Zero bytes cost nothing and touch no statistic.
    pub fn allocate_on_stream(
        &self,
        size: usize,
        stream: StreamId,
        site: &Site,
    ) -> Result<Block, CachingError> {
        self.allocate_with(size, site, |st| {
            st.malloc(&self.backing, size, stream, *site)
        })
    }

    /// [`allocate_on_stream`](CachingAllocator::allocate_on_stream) on the default stream,
    /// the block counted under `category` from the start (see [`State::malloc_as`]).
    fn allocate_counted_as(
        &self,
        size: usize,
        site: &Site,
        category: Category,
    ) -> Result<Block, CachingError> {
        let stream = self.backing.default_stream();
        self.allocate_with(size, site, |st| {
            st.malloc_as(&self.backing, size, stream, *site, category)
        })
    }

    /// A block of `size` bytes from `malloc` (run under the lock), or the empty block.
    #[inline(always)]
    fn allocate_with(
        &self,
        size: usize,
        site: &Site,
        malloc: impl FnOnce(&mut State) -> Result<usize, CachingError>,
    ) -> Result<Block, CachingError> {
        if size == 0 {
            let dangling = NonNull::new(BLOCK_ALIGN as *mut u8).expect("alignment is non-zero");
            // SAFETY: a zero-size block is never read or written through.
            return Ok(unsafe { Block::from_raw(dangling, 0, *site) });
        }
        let addr = malloc(&mut self.lock_raw())?;
        if self.shows_blocks_to_memcheck {
            memcheck::block_handed_out(addr, size);
        }
        let ptr = NonNull::new(addr as *mut u8).expect("backings never hand out address 0");
        // SAFETY: the block `[addr, addr + rounded size)` is now owned by the caller alone until
        // it is deallocated; segment bases are aligned to at least 512 bytes and block offsets
        // are multiples of 512, so the pointer is BLOCK_ALIGN-aligned. For a backing whose
        // addresses are not memory the caller must not dereference it (see the type docs).
        Ok(unsafe { Block::from_raw(ptr, size, *site) })
    }

    /// Records that `stream` (other than the block's own) uses `block`: when it is freed, its
    /// memory is not reused until the work queued on `stream` by then has completed.
    /// Returns false if the block did not come from this allocator.
    pub fn record_stream(&self, block: &Block, stream: StreamId) -> bool {
        if block.size() == 0 {
            return false;
        }
        self.lock()
            .record_stream(block.ptr().as_ptr() as usize, stream)
    }

    /// Bytes held from the backing (`reserved_bytes.all.current`).
    pub fn memory_reserved(&self) -> usize {
        self.lock_raw().reserved
    }

    /// Highest `memory_reserved` since creation or the last peak reset.
    pub fn max_memory_reserved(&self) -> usize {
        self.lock_stats().stats.reserved_bytes.all.peak.max(0) as usize
    }

    /// All statistics, typed.
    pub fn memory_stats(&self) -> MemoryStats {
        self.lock_stats().stats.clone()
    }

    /// All statistics under PyTorch's dotted key names (`allocated_bytes.all.current`, ...).
    pub fn memory_stats_map(&self) -> BTreeMap<String, i64> {
        self.lock_stats().stats.to_map()
    }

    /// Zeroes the `allocated`/`freed` totals and the event counters (`num_ooms`, ...).
    pub fn reset_accumulated_memory_stats(&self) {
        self.lock_stats().stats.reset_accumulated();
    }

    /// A 75-column table of the statistics, laid out like PyTorch's `memory_summary`.
    pub fn memory_summary(&self, abbreviated: bool) -> String {
        let title = format!(
            "strata caching allocator memory summary, device {}",
            self.backing.device_name()
        );
        summary::render(&self.lock_stats().stats, &title, abbreviated)
    }

    /// Returns every cached segment that is wholly free to the backing (after waiting for
    /// outstanding cross-stream events) and unmaps the free pages of expandable segments.
    pub fn empty_cache(&self) -> Result<(), BackingError> {
        self.lock().release_cached_blocks(&self.backing)
    }

    /// Sets (or with `None` removes) the most bytes this allocator may reserve.
    pub fn set_memory_limit(&self, bytes: Option<usize>) {
        self.lock().limit = bytes;
    }

    /// The limit on reserved bytes, if any.
    pub fn memory_limit(&self) -> Option<usize> {
        self.lock().limit
    }

    fn apply_fraction(&self, fraction: f64) {
        let (_, total) = self.backing.mem_info();
        let limit = (fraction.clamp(0.0, 1.0) * total as f64) as usize;
        self.lock().limit = Some(limit);
    }

    /// Limits reserved memory to `fraction` (in [0, 1]) of the device's total memory.
    pub fn set_per_process_memory_fraction(&self, fraction: f64) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(ConfigError {
                key: "per_process_memory_fraction".into(),
                message: format!("{fraction} is out of range; it must lie in [0.0, 1.0]"),
            });
        }
        self.apply_fraction(fraction);
        Ok(())
    }

    /// `(free, total)` bytes of the device.
    pub fn mem_get_info(&self) -> (usize, usize) {
        self.backing.mem_info()
    }

    /// Size of the largest cached free block (0 if none).
    pub fn largest_free_block(&self) -> usize {
        self.lock().largest_free_block()
    }

    /// Live bytes and blocks grouped by allocation site, largest first.
    pub fn live_allocations(&self) -> Vec<SiteUsage> {
        self.lock().live_by_site()
    }

    /// Live bytes and blocks grouped by site, scope or category, largest first.
    pub fn live_allocations_by(&self, grouping: Grouping) -> Vec<GroupUsage> {
        self.lock().live_by(grouping)
    }

    /// Starts (`enabled`) or stops recording history. While on, the newest `max_entries`
    /// events are kept (at least 1); turning it off clears them. `context` decides whether
    /// trace entries carry sites ([`RecordContext::Alloc`] and up) and whether snapshots show
    /// sites ([`RecordContext::State`] and up).
    pub fn record_memory_history(&self, enabled: bool, context: RecordContext, max_entries: usize) {
        self.lock().history.configure(enabled, context, max_entries);
    }

    /// The recorded history, oldest first.
    pub fn history(&self) -> Vec<TraceEntry> {
        self.lock().history.entries.iter().copied().collect()
    }

    /// Segments, blocks, history and settings, in the structure of PyTorch's
    /// `torch.cuda.memory._snapshot()`. Records a `snapshot` trace entry.
    pub fn snapshot(&self) -> Snapshot {
        self.lock().snapshot(self.backing.orders_by_address())
    }

    /// Every segment with its blocks, in creation order: the allocator's exact layout.
    pub fn segments(&self) -> Vec<SegmentLayout> {
        self.lock().layout()
    }

    /// The report of the most recent out-of-memory.
    pub fn last_oom_report(&self) -> Option<OomReport> {
        self.lock().last_oom.clone()
    }

    /// Checks all of the allocator's internal invariants (blocks tile their segments without
    /// overlap, free neighbours are merged, every set and statistic agrees with the blocks).
    /// A debugging aid; it walks every block.
    pub fn check_consistency(&self) -> Result<(), String> {
        self.lock().check()
    }
}

impl CachingAllocator<HostBacking> {
    /// A caching allocator over host memory, configured by `STRATA_ALLOC_CONF`.
    pub fn host() -> Result<Self, ConfigError> {
        Self::from_env(HostBacking::new())
    }
}

impl<B: Backing> Drop for CachingAllocator<B> {
    fn drop(&mut self) {
        // Give back what is cached; segments that still hold live blocks stay mapped because
        // their owners may still use them.
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        st.settle();
        let _ = st.release_cached_blocks(&self.backing);
    }
}

impl<B: Backing> fmt::Debug for CachingAllocator<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        f.debug_struct("CachingAllocator")
            .field("backing", &self.backing)
            .field("allocated", &st.stats.allocated_bytes.all.current)
            .field("reserved", &st.reserved)
            .field("limit", &st.limit)
            .finish()
    }
}

impl<B: Backing> DeviceAllocator for CachingAllocator<B> {
    fn allocate(&self, size: usize, site: &Site) -> Result<Block, AllocError> {
        self.allocate_on_stream(size, self.backing.default_stream(), site)
            .map_err(AllocError::from)
    }

    unsafe fn deallocate(&self, block: Block) {
        if block.size() == 0 {
            return;
        }
        let addr = block.ptr().as_ptr() as usize;
        if self.shows_blocks_to_memcheck {
            memcheck::block_given_back(addr);
        }
        let mut st = self.lock_raw();
        // An error here can only be the backing refusing to take a segment back (system
        // backend); the segment then stays cached, which is safe.
        if let Ok(false) = st.free(&self.backing, addr) {
            drop(st);
            panic!(
                "deallocate: the block at {addr:#x} ({} bytes) did not come from this caching \
                 allocator or was already returned",
                block.size()
            );
        }
    }

    fn memory_allocated(&self) -> usize {
        self.lock_stats().stats.allocated_bytes.all.current.max(0) as usize
    }

    fn max_memory_allocated(&self) -> usize {
        self.lock_stats().stats.allocated_bytes.all.peak.max(0) as usize
    }

    fn reset_peak_memory_stats(&self) {
        self.lock_stats().stats.reset_peak();
    }

    fn name(&self) -> &str {
        "caching"
    }

    fn allocate_as(
        &self,
        size: usize,
        site: &Site,
        category: Category,
    ) -> Result<Block, AllocError> {
        self.allocate_counted_as(size, site, category)
            .map_err(AllocError::from)
    }

    fn set_category(&self, block: &Block, category: Category) {
        if block.size() > 0 {
            self.lock_raw()
                .set_category(block.ptr().as_ptr() as usize, category);
        }
    }

    fn record_stream(&self, block: &Block, stream: StreamId) -> bool {
        CachingAllocator::record_stream(self, block, stream)
    }

    fn add_mapped_bytes(&self, bytes: usize) {
        self.lock_raw().stats.mapped_bytes.increase(bytes);
    }

    fn remove_mapped_bytes(&self, bytes: usize) {
        self.lock_raw().stats.mapped_bytes.decrease(bytes);
    }
}

#[cfg(test)]
mod tests;
