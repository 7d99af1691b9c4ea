//! `HostAllocator`: host memory straight from the system heap, with exact statistics and an
//! optional limit.

use std::alloc::{alloc, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::{AllocError, Block, DeviceAllocator, Site, BLOCK_ALIGN};

/// Host memory from the system allocator, 64-byte aligned, counted exactly.
///
/// Every block is freed to the system when returned; nothing is cached. A limit makes
/// out-of-memory reachable (and testable) before the machine itself runs out.
#[derive(Debug, Default)]
pub struct HostAllocator {
    counters: Mutex<Counters>,
    limit: AtomicUsize,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    allocated: usize,
    peak: usize,
}

const NO_LIMIT: usize = 0;

impl HostAllocator {
    /// An allocator with no limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// An allocator that refuses to hold more than `bytes` at once.
    pub fn with_limit(bytes: usize) -> Self {
        let a = Self::new();
        a.set_memory_limit(Some(bytes));
        a
    }

    /// Sets (or with `None` removes) the most bytes this allocator may hold at once.
    pub fn set_memory_limit(&self, bytes: Option<usize>) {
        // A limit of 0 bytes is stored as 1 so that it still refuses every non-empty request.
        let raw = match bytes {
            None => NO_LIMIT,
            Some(b) => b.max(1),
        };
        self.limit.store(raw, Ordering::Relaxed);
    }

    /// The configured limit, if any.
    pub fn memory_limit(&self) -> Option<usize> {
        match self.limit.load(Ordering::Relaxed) {
            NO_LIMIT => None,
            l => Some(l),
        }
    }

    fn counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        // The counters are plain integers updated atomically under the lock; a panic elsewhere
        // cannot leave them half-written, so a poisoned lock is still consistent.
        self.counters.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Total physical memory of this machine, read once.
fn physical_memory() -> Option<usize> {
    static RAM: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *RAM.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    })
}

impl DeviceAllocator for HostAllocator {
    fn allocate(&self, size: usize, site: &Site) -> Result<Block, AllocError> {
        if size == 0 {
            let dangling = NonNull::new(BLOCK_ALIGN as *mut u8).expect("alignment is non-zero");
            // SAFETY: a zero-size block is never read or written through.
            return Ok(unsafe { Block::from_raw(dangling, 0, *site) });
        }
        let layout = Layout::from_size_align(size, BLOCK_ALIGN).map_err(|_| {
            AllocError::Invalid(format!(
                "{size} bytes is larger than the address space allows"
            ))
        })?;
        {
            let mut c = self.counters();
            let oom = |allocated| AllocError::OutOfMemory {
                device: "cpu".into(),
                requested: size,
                allocated,
                limit: self.memory_limit(),
                report: None,
            };
            let total = c
                .allocated
                .checked_add(size)
                .ok_or_else(|| oom(c.allocated))?;
            if let Some(limit) = self.memory_limit() {
                if total > limit {
                    return Err(oom(c.allocated));
                }
            }
            // The kernel over-commits: a request larger than the machine would "succeed" and
            // then kill the process when touched. Refuse it up front instead.
            if physical_memory().is_some_and(|ram| total > ram) {
                return Err(oom(c.allocated));
            }
            c.allocated = total;
            c.peak = c.peak.max(total);
        }
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc(layout) };
        match NonNull::new(ptr) {
            // SAFETY: the system allocator returned `size` bytes aligned to BLOCK_ALIGN.
            Some(p) => Ok(unsafe { Block::from_raw(p, size, *site) }),
            None => {
                let mut c = self.counters();
                c.allocated -= size;
                Err(AllocError::OutOfMemory {
                    device: "cpu".into(),
                    requested: size,
                    allocated: c.allocated,
                    limit: self.memory_limit(),
                    report: None,
                })
            }
        }
    }

    unsafe fn deallocate(&self, block: Block) {
        if block.size() == 0 {
            return;
        }
        // SAFETY: the caller guarantees the block came from `allocate` above, which used
        // exactly this layout.
        unsafe {
            dealloc(
                block.ptr().as_ptr(),
                Layout::from_size_align_unchecked(block.size(), BLOCK_ALIGN),
            )
        };
        self.counters().allocated -= block.size();
    }

    fn memory_allocated(&self) -> usize {
        self.counters().allocated
    }

    fn max_memory_allocated(&self) -> usize {
        self.counters().peak
    }

    fn reset_peak_memory_stats(&self) {
        let mut c = self.counters();
        c.peak = c.allocated;
    }

    fn name(&self) -> &str {
        "host"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bytes_and_peak() {
        let a = HostAllocator::new();
        let s = Site::unknown("test");
        let b1 = a.allocate(100, &s).unwrap();
        let b2 = a.allocate(50, &s).unwrap();
        assert_eq!(a.memory_allocated(), 150);
        assert_eq!(b1.ptr().as_ptr() as usize % BLOCK_ALIGN, 0);
        // SAFETY: `b1` came from `a.allocate` and is not used again.
        unsafe { a.deallocate(b1) };
        assert_eq!(a.memory_allocated(), 50);
        assert_eq!(a.max_memory_allocated(), 150);
        a.reset_peak_memory_stats();
        assert_eq!(a.max_memory_allocated(), 50);
        // SAFETY: `b2` came from `a.allocate` and is not used again.
        unsafe { a.deallocate(b2) };
        assert_eq!(a.memory_allocated(), 0);
    }

    #[test]
    fn limit_refuses_and_leaves_counts_unchanged() {
        let a = HostAllocator::with_limit(1000);
        let s = Site::unknown("test");
        let b = a.allocate(600, &s).unwrap();
        let err = a.allocate(600, &s).unwrap_err();
        assert!(matches!(
            err,
            AllocError::OutOfMemory {
                requested: 600,
                allocated: 600,
                ..
            }
        ));
        assert!(err.to_string().contains("out of memory"));
        assert_eq!(a.memory_allocated(), 600);
        // SAFETY: `b` came from `a`'s `allocate` and is not used again.
        unsafe { a.deallocate(b) };
    }

    #[test]
    fn zero_size_is_free() {
        let a = HostAllocator::with_limit(0);
        let b = a.allocate(0, &Site::unknown("test")).unwrap();
        assert_eq!(a.memory_allocated(), 0);
        // SAFETY: `b` came from `a`'s `allocate` and is not used again.
        unsafe { a.deallocate(b) };
    }

    #[test]
    fn absurd_size_is_an_error_not_an_abort() {
        let a = HostAllocator::new();
        assert!(a.allocate(usize::MAX - 8, &Site::unknown("test")).is_err());
        assert!(a.allocate(1 << 50, &Site::unknown("test")).is_err());
        assert_eq!(a.memory_allocated(), 0);
    }
}
