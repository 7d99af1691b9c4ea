//! Pinned host memory with PyTorch's host caching algorithm (`CachingHostAllocator`): sizes
//! rounded up to a power of two, one free list per size, no splitting, and a freed block
//! reused only once every event recorded on it has completed (a device copy that reads the
//! block may still be running until then).
//!
//! Where a CUDA device is there (feature `cuda`, a driver and a device), blocks are
//! page-locked memory from the driver (`cuMemHostAlloc`, as PyTorch's `cudaHostAlloc`);
//! otherwise ordinary host memory ([`PinnedHostAllocator::is_page_locked`] says which). An
//! event is a CUDA event recorded after the copy that uses the block (`HostEvent::from_cuda`,
//! what strata's non-blocking copies record), or a flag its recorder completes
//! ([`HostEvent::complete`]); the accounting and the reuse rule are PyTorch's either way. The statistics carry PyTorch's
//! `host_memory_stats` keys.

use std::alloc::{alloc, dealloc, Layout};
use std::collections::{BTreeMap, HashMap};
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::allocator::{Block, DeviceAllocator, BLOCK_ALIGN};
use crate::caching::Stat;
use crate::error::AllocError;
use crate::host_event::HostEvent;
use crate::site::Site;

/// Alignment of pinned blocks: a page, as page-locked memory comes.
const PAGE: usize = 4096;

/// Where a pinned block stands.
#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Handed out.
    InUse,
    /// Freed by its owner, waiting for its events.
    Pending,
    /// In its size's free list.
    Cached,
}

/// One block the allocator owns.
#[derive(Debug)]
struct Rec {
    size: usize,
    state: State,
    events: Vec<HostEvent>,
    source: Source,
}

/// Where a block's memory came from, and so where it goes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The heap: ordinary, pageable memory.
    Heap,
    /// The CUDA driver: page-locked memory.
    #[cfg(feature = "cuda")]
    Cuda,
}

impl Source {
    /// Page-locked memory from the driver where a CUDA device is there, else the heap;
    /// decided once.
    fn for_new_blocks() -> Source {
        #[cfg(feature = "cuda")]
        {
            static CUDA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            if *CUDA.get_or_init(crate::backing::cuda::is_available) {
                return Source::Cuda;
            }
        }
        Source::Heap
    }

    /// `size` bytes (a power of two), or null.
    fn alloc(self, size: usize) -> *mut u8 {
        match self {
            Source::Heap => match layout(size) {
                // SAFETY: the layout has a non-zero size.
                Some(lay) => unsafe { alloc(lay) },
                None => std::ptr::null_mut(),
            },
            #[cfg(feature = "cuda")]
            Source::Cuda => crate::backing::cuda::host_alloc(size).unwrap_or(std::ptr::null_mut()),
        }
    }

    /// Gives back `size` bytes at `addr`.
    ///
    /// # Safety
    /// `addr` must come from `alloc` of this source with this size, unused from now on.
    unsafe fn free(self, addr: usize, size: usize) {
        match self {
            Source::Heap => {
                if let Some(lay) = layout(size) {
                    // SAFETY: allocated with this layout (the caller's contract).
                    unsafe { dealloc(addr as *mut u8, lay) };
                }
            }
            #[cfg(feature = "cuda")]
            Source::Cuda => {
                // SAFETY: the caller's contract. A failure leaves the memory to the process.
                let _ = unsafe { crate::backing::cuda::host_free(addr as *mut u8) };
            }
        }
    }
}

/// Timing of the backing's allocation or free calls, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timing {
    /// Sum of all calls.
    pub total: f64,
    /// Longest call.
    pub max: f64,
    /// Shortest call.
    pub min: f64,
    /// Calls.
    pub count: i64,
}

impl Timing {
    fn add(&mut self, us: f64) {
        self.min = if self.count == 0 {
            us
        } else {
            self.min.min(us)
        };
        self.max = self.max.max(us);
        self.total += us;
        self.count += 1;
    }

    fn put(&self, map: &mut BTreeMap<String, i64>, prefix: &str) {
        let avg = if self.count == 0 {
            0.0
        } else {
            self.total / self.count as f64
        };
        map.insert(format!("{prefix}.total"), self.total as i64);
        map.insert(format!("{prefix}.max"), self.max as i64);
        map.insert(format!("{prefix}.min"), self.min as i64);
        map.insert(format!("{prefix}.count"), self.count);
        map.insert(format!("{prefix}.avg"), avg as i64);
    }
}

/// The pinned allocator's statistics, as PyTorch's `host_memory_stats` defines them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostStats {
    /// Blocks the allocator owns (in use, pending and cached).
    pub allocations: Stat,
    /// Their bytes (power-of-two sizes).
    pub allocated_bytes: Stat,
    /// Blocks handed out and not yet reusable (in use, or freed with events pending).
    pub active_requests: Stat,
    /// Their bytes.
    pub active_bytes: Stat,
    /// Blocks obtained from the backing.
    pub num_host_alloc: i64,
    /// Blocks returned to the backing.
    pub num_host_free: i64,
    /// Time in the backing's allocation calls.
    pub host_alloc_time: Timing,
    /// Time in the backing's free calls.
    pub host_free_time: Timing,
}

impl HostStats {
    /// The statistics under PyTorch's `torch.cuda.host_memory_stats()` keys.
    pub fn to_map(&self) -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        self.allocations.put(&mut m, "allocations");
        self.allocated_bytes.put(&mut m, "allocated_bytes");
        self.active_requests.put(&mut m, "active_requests");
        self.active_bytes.put(&mut m, "active_bytes");
        m.insert("num_host_alloc".into(), self.num_host_alloc);
        m.insert("num_host_free".into(), self.num_host_free);
        self.host_alloc_time.put(&mut m, "host_alloc_time");
        self.host_free_time.put(&mut m, "host_free_time");
        m
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Every block the allocator owns, by address.
    blocks: HashMap<usize, Rec>,
    /// Cached blocks by size: addresses, the most recently freed last.
    free: BTreeMap<usize, Vec<usize>>,
    stats: HostStats,
}

/// Pinned host memory with PyTorch's host caching algorithm (see the module docs).
#[derive(Debug, Default)]
pub struct PinnedHostAllocator {
    inner: Mutex<Inner>,
}

impl PinnedHostAllocator {
    /// An empty allocator.
    pub fn new() -> PinnedHostAllocator {
        PinnedHostAllocator::default()
    }

    /// Whether new blocks are page-locked memory from the CUDA driver (a device is there),
    /// rather than ordinary host memory.
    pub fn is_page_locked(&self) -> bool {
        Source::for_new_blocks() != Source::Heap
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state is consistent between statements; a panic elsewhere cannot poison it
        // half-way, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `event` on the live block that starts at `ptr` (a copy reading it has been
    /// queued): once freed, the block is reused only after the event completes. False when
    /// `ptr` is not the start of a block of this allocator in use.
    pub fn record_event(&self, ptr: *const u8, event: &HostEvent) -> bool {
        let mut inner = self.lock();
        match inner.blocks.get_mut(&(ptr as usize)) {
            Some(rec) if rec.state == State::InUse => {
                rec.events.push(event.clone());
                true
            }
            _ => false,
        }
    }

    /// Moves freed blocks whose events have all completed to their free lists.
    fn process_pending(inner: &mut Inner) {
        let ready: Vec<usize> = inner
            .blocks
            .iter()
            .filter(|(_, r)| {
                r.state == State::Pending && r.events.iter().all(HostEvent::is_complete)
            })
            .map(|(&a, _)| a)
            .collect();
        for addr in ready {
            Self::make_reusable(inner, addr);
        }
    }

    /// Puts the freed block at `addr` in its free list.
    fn make_reusable(inner: &mut Inner, addr: usize) {
        let Some(rec) = inner.blocks.get_mut(&addr) else {
            return;
        };
        rec.state = State::Cached;
        rec.events.clear();
        let size = rec.size;
        inner.free.entry(size).or_default().push(addr);
        inner.stats.active_requests.decrease(1);
        inner.stats.active_bytes.decrease(size);
    }

    /// Returns every cached block to the backing (blocks in use or waiting for events
    /// stay).
    pub fn empty_cache(&self) {
        let mut inner = self.lock();
        Self::process_pending(&mut inner);
        let free = std::mem::take(&mut inner.free);
        for (size, addrs) in free {
            for addr in addrs {
                let Some(rec) = inner.blocks.remove(&addr) else {
                    continue;
                };
                let start = Instant::now();
                // SAFETY: `addr` came from this source with this size and is cached, so
                // nothing uses it.
                unsafe { rec.source.free(addr, size) };
                let s = &mut inner.stats;
                s.host_free_time.add(start.elapsed().as_secs_f64() * 1e6);
                s.num_host_free += 1;
                s.allocations.decrease(1);
                s.allocated_bytes.decrease(size);
            }
        }
    }

    /// The statistics (freed blocks whose events have completed count as reusable).
    pub fn stats(&self) -> HostStats {
        let mut inner = self.lock();
        Self::process_pending(&mut inner);
        inner.stats
    }

    /// The statistics under PyTorch's `host_memory_stats` keys.
    pub fn host_memory_stats(&self) -> BTreeMap<String, i64> {
        self.stats().to_map()
    }

    /// Restarts every peak from its current value.
    pub fn reset_peak_host_memory_stats(&self) {
        let mut inner = self.lock();
        let s = &mut inner.stats;
        for stat in [
            &mut s.allocations,
            &mut s.allocated_bytes,
            &mut s.active_requests,
            &mut s.active_bytes,
        ] {
            stat.reset_peak();
        }
    }
}

/// The layout of a block of `size` bytes (a power of two).
fn layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size, PAGE.min(size).max(BLOCK_ALIGN)).ok()
}

impl DeviceAllocator for PinnedHostAllocator {
    fn allocate(&self, size: usize, site: &Site) -> Result<Block, AllocError> {
        if size == 0 {
            let dangling = NonNull::new(PAGE as *mut u8).expect("alignment is non-zero");
            // SAFETY: a zero-size block is never read or written through.
            return Ok(unsafe { Block::from_raw(dangling, 0, *site) });
        }
        let too_big = || {
            AllocError::Invalid(format!(
                "{size} bytes of pinned memory is larger than the address space allows"
            ))
        };
        let class = size.checked_next_power_of_two().ok_or_else(too_big)?;
        let mut inner = self.lock();
        Self::process_pending(&mut inner);
        let reused = inner.free.get_mut(&class).and_then(Vec::pop);
        let addr = match reused {
            Some(addr) => addr,
            None => {
                layout(class).ok_or_else(too_big)?;
                let source = Source::for_new_blocks();
                let start = Instant::now();
                let ptr = source.alloc(class);
                if ptr.is_null() {
                    return Err(AllocError::OutOfMemory {
                        device: "pinned".into(),
                        requested: class,
                        allocated: inner.stats.allocated_bytes.current as usize,
                        limit: None,
                        report: None,
                    });
                }
                let s = &mut inner.stats;
                s.host_alloc_time.add(start.elapsed().as_secs_f64() * 1e6);
                s.num_host_alloc += 1;
                s.allocations.increase(1);
                s.allocated_bytes.increase(class);
                inner.blocks.insert(
                    ptr as usize,
                    Rec {
                        size: class,
                        state: State::Cached,
                        events: Vec::new(),
                        source,
                    },
                );
                ptr as usize
            }
        };
        if let Some(rec) = inner.blocks.get_mut(&addr) {
            rec.state = State::InUse;
        }
        inner.stats.active_requests.increase(1);
        inner.stats.active_bytes.increase(class);
        let ptr = NonNull::new(addr as *mut u8).expect("allocated blocks are not null");
        // SAFETY: the block holds `class` ≥ `size` bytes aligned to at least BLOCK_ALIGN, owned
        // by this allocator until the block comes back.
        Ok(unsafe { Block::from_raw(ptr, size, *site) })
    }

    unsafe fn deallocate(&self, block: Block) {
        if block.size() == 0 {
            return;
        }
        let addr = block.ptr().as_ptr() as usize;
        let mut inner = self.lock();
        let ready = match inner.blocks.get_mut(&addr) {
            Some(rec) if rec.state == State::InUse => {
                rec.state = State::Pending;
                rec.events.iter().all(HostEvent::is_complete)
            }
            // Not a block in use of this allocator: the caller broke the contract; keeping
            // the memory is the only safe answer.
            _ => return,
        };
        if ready {
            Self::make_reusable(&mut inner, addr);
        }
    }

    fn record_host_event(&self, block: &Block, event: &HostEvent) -> bool {
        block.size() > 0 && self.record_event(block.ptr().as_ptr(), event)
    }

    fn memory_allocated(&self) -> usize {
        self.stats().active_bytes.current as usize
    }

    fn max_memory_allocated(&self) -> usize {
        self.stats().active_bytes.peak as usize
    }

    fn reset_peak_memory_stats(&self) {
        self.reset_peak_host_memory_stats();
    }

    fn name(&self) -> &str {
        "pinned"
    }

    fn is_pinned(&self) -> bool {
        true
    }
}

impl Drop for PinnedHostAllocator {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        for (&addr, rec) in &inner.blocks {
            if rec.state != State::Cached {
                // A block in use outlives its allocator only through a leaked storage, and a
                // freed one may still be read by a copy its events mark: leave their memory
                // alone.
                continue;
            }
            // SAFETY: the block came from its source with this size and nothing uses it.
            unsafe { rec.source.free(addr, rec.size) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Site {
        Site::unknown("test")
    }

    #[test]
    fn blocks_are_page_locked_exactly_where_a_cuda_device_is() {
        #[cfg(feature = "cuda")]
        let device = crate::backing::cuda::is_available();
        #[cfg(not(feature = "cuda"))]
        let device = false;
        assert_eq!(PinnedHostAllocator::new().is_page_locked(), device);
    }

    #[test]
    fn sizes_round_to_powers_of_two_and_blocks_are_reused_whole() {
        let a = PinnedHostAllocator::new();
        let b = a.allocate(3000, &site()).unwrap();
        let p = b.ptr();
        let s = a.stats();
        assert_eq!(
            (s.allocated_bytes.current, s.active_bytes.current),
            (4096, 4096)
        );
        // SAFETY: the block came from `a`.
        unsafe { a.deallocate(b) };
        assert_eq!(a.stats().active_requests.current, 0);
        // A different size class gets a new block; the same class reuses the cached one.
        let other = a.allocate(5000, &site()).unwrap();
        let again = a.allocate(4096, &site()).unwrap();
        assert_eq!(again.ptr(), p);
        let s = a.stats();
        assert_eq!(s.num_host_alloc, 2);
        assert_eq!(s.allocated_bytes.current, 4096 + 8192);
        // SAFETY: both came from `a`.
        unsafe {
            a.deallocate(other);
            a.deallocate(again);
        }
        a.empty_cache();
        let m = a.host_memory_stats();
        assert_eq!(m["allocations.current"], 0);
        assert_eq!(m["num_host_free"], 2);
        assert_eq!(m["allocated_bytes.peak"], 4096 + 8192);
        assert_eq!(m["host_alloc_time.count"], 2);
    }

    #[test]
    fn a_block_is_reused_only_after_its_events_complete() {
        let a = PinnedHostAllocator::new();
        let b = a.allocate(1 << 20, &site()).unwrap();
        let p = b.ptr();
        let copy = HostEvent::new();
        assert!(a.record_event(p.as_ptr(), &copy));
        // SAFETY: the block came from `a`.
        unsafe { a.deallocate(b) };
        // Still active: the copy may be reading it.
        assert_eq!(a.stats().active_requests.current, 1);
        let other = a.allocate(1 << 20, &site()).unwrap();
        assert_ne!(
            other.ptr(),
            p,
            "a block with a pending event is not handed out"
        );
        a.empty_cache();
        assert_eq!(a.stats().allocations.current, 2, "nor freed");
        copy.complete();
        assert_eq!(a.stats().active_requests.current, 1);
        let third = a.allocate(1 << 20, &site()).unwrap();
        assert_eq!(third.ptr(), p, "reused once the event completed");
        assert!(!a.record_event(std::ptr::null(), &copy));
        // SAFETY: both came from `a`.
        unsafe {
            a.deallocate(other);
            a.deallocate(third);
        }
    }
}
