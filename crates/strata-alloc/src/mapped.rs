//! Memory that a program holds outside the allocator: files mapped for tensors. It is
//! counted in the device allocator's `mapped_bytes` statistic for as long as a
//! [`MappedBytes`] lives.

use std::sync::Arc;

use crate::DeviceAllocator;

/// Counts `bytes` in `allocator`'s `mapped_bytes` statistic from creation until it drops.
/// Whatever owns a mapping keeps one beside it, so the figure falls the moment the mapping
/// is released.
///
/// ```
/// use std::sync::Arc;
/// use strata_alloc::{DeviceAllocator, HostBacking, HostCachingAllocator, MappedBytes};
/// let a: Arc<dyn DeviceAllocator> = Arc::new(HostCachingAllocator::new(HostBacking::new()));
/// let counted = MappedBytes::new(a.clone(), 4096);
/// drop(counted);
/// ```
#[derive(Debug)]
pub struct MappedBytes {
    allocator: Arc<dyn DeviceAllocator>,
    bytes: usize,
}

impl MappedBytes {
    /// Counts `bytes` as mapped on `allocator`'s device until the value drops.
    pub fn new(allocator: Arc<dyn DeviceAllocator>, bytes: usize) -> Self {
        allocator.add_mapped_bytes(bytes);
        MappedBytes { allocator, bytes }
    }

    /// The bytes counted.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for MappedBytes {
    fn drop(&mut self) {
        self.allocator.remove_mapped_bytes(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HostAllocator, HostBacking, HostCachingAllocator};

    #[test]
    fn counted_while_alive_and_peak_kept() {
        let caching = Arc::new(HostCachingAllocator::new(HostBacking::new()));
        let a: Arc<dyn DeviceAllocator> = caching.clone();
        let first = MappedBytes::new(a.clone(), 1000);
        let second = MappedBytes::new(a.clone(), 24);
        assert_eq!(second.bytes(), 24);
        let stats = caching.memory_stats_map();
        assert_eq!(stats["mapped_bytes.current"], 1024);
        drop(first);
        let stats = caching.memory_stats_map();
        assert_eq!(stats["mapped_bytes.current"], 24);
        assert_eq!(stats["mapped_bytes.peak"], 1024);
        assert_eq!(stats["allocated_bytes.all.current"], 0);
        assert_eq!(stats["reserved_bytes.all.current"], 0);
        drop(second);
        caching.reset_peak_memory_stats();
        assert_eq!(caching.memory_stats().mapped_bytes.peak, 0);
        assert!(caching.memory_summary(true).contains("Mapped file memory"));
    }

    #[test]
    fn allocators_without_statistics_ignore_it() {
        let a: Arc<dyn DeviceAllocator> = Arc::new(HostAllocator::new());
        let counted = MappedBytes::new(a.clone(), 10);
        assert_eq!(a.memory_allocated(), 0);
        drop(counted);
    }
}
