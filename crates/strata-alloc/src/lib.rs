//! Where strata's tensor bytes come from.
//!
//! This crate knows bytes only, never tensors. A [`DeviceAllocator`] hands out blocks of
//! memory for one device and takes them back; every block carries the [`Site`] (the user's
//! `file:line` and the op) that asked for it, so memory can always be traced to the code that
//! holds it. [`HostAllocator`] serves host memory from the system heap and keeps exact
//! statistics; [`CachingAllocator`] (PyTorch's caching algorithm over a [`Backing`]: host
//! memory or virtual address ranges) implements the same trait and adds PyTorch's statistics,
//! `empty_cache`, limits, history, snapshots and out-of-memory reports.
//!
//! ```
//! use strata_alloc::{DeviceAllocator, HostAllocator, Site};
//! let host = HostAllocator::new();
//! let block = host.allocate(1024, &Site::unknown("example")).unwrap();
//! assert_eq!(host.memory_allocated(), 1024);
//! // SAFETY: the block came from `host` and is no longer used.
//! unsafe { host.deallocate(block) };
//! assert_eq!(host.memory_allocated(), 0);
//! ```

mod allocator;
pub mod backing;
pub mod caching;
mod category;
mod error;
mod host;
mod host_event;
mod mapped;
pub mod offline;
mod pinned;
mod site;
mod size;
pub mod trace;

pub use allocator::{Block, DeviceAllocator, BLOCK_ALIGN};
pub use backing::memcheck::running_on_valgrind;
#[cfg(feature = "cuda")]
pub use backing::CudaBacking;
pub use backing::{Backing, BackingError, EventId, HostBacking, StreamId, VirtualBacking};
pub use caching::{
    AllocatorConfig, CachingAllocator, CachingError, CategoryBytes, CategoryMix, ConfigError,
    HostCachingAllocator, MemoryStats, RecordContext, Snapshot, Stat, VirtualCachingAllocator,
};
pub use category::Category;
pub use error::{AllocError, OomReport};
pub use host::HostAllocator;
pub use host_event::HostEvent;
pub use mapped::MappedBytes;
pub use offline::SnapshotReadError;
pub use pinned::{HostStats, PinnedHostAllocator, Timing};
pub use site::{GroupUsage, Grouping, Site, SiteUsage};
