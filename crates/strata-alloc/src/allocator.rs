//! The interface every device allocator implements.

use std::fmt;
use std::ptr::NonNull;

use crate::{AllocError, Category, HostEvent, Site, StreamId};

/// Alignment of every block handed out, in bytes (enough for AVX-512 loads of any dtype).
pub const BLOCK_ALIGN: usize = 64;

/// A block of device memory owned by whoever holds this value.
///
/// A `Block` is not `Clone`: exactly one owner returns it, once, to the allocator that made it.
#[derive(Debug)]
pub struct Block {
    ptr: NonNull<u8>,
    size: usize,
    site: Site,
}

// SAFETY: a Block is a unique owner of its bytes; moving it between threads moves that
// ownership. Access to the bytes is synchronised by the storage that holds the block.
unsafe impl Send for Block {}
// SAFETY: `&Block` only exposes the address and size, never the bytes.
unsafe impl Sync for Block {}

impl Block {
    /// Wraps memory an allocator produced.
    ///
    /// # Safety
    /// `ptr` must point to `size` bytes aligned to [`BLOCK_ALIGN`] that stay valid until the
    /// block is passed back to the allocator that created it.
    pub unsafe fn from_raw(ptr: NonNull<u8>, size: usize, site: Site) -> Self {
        Block { ptr, size, site }
    }

    /// Start of the block.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Size in bytes, as requested.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Where the block was requested from.
    pub fn site(&self) -> Site {
        self.site
    }
}

/// An allocator for one device. Storages keep the allocator they came from and return their
/// block to it when their last handle drops.
pub trait DeviceAllocator: Send + Sync + fmt::Debug {
    /// Allocates `size` bytes (zero is allowed and costs nothing), recording `site`.
    fn allocate(&self, size: usize, site: &Site) -> Result<Block, AllocError>;

    /// Returns a block.
    ///
    /// # Safety
    /// `block` must have been returned by `allocate` on this same allocator, and no pointer
    /// into it may be used afterwards.
    unsafe fn deallocate(&self, block: Block);

    /// Bytes currently handed out to live blocks.
    fn memory_allocated(&self) -> usize;

    /// The highest `memory_allocated` since creation or the last `reset_peak_memory_stats`.
    fn max_memory_allocated(&self) -> usize;

    /// Restarts peak tracking from the current value.
    fn reset_peak_memory_stats(&self);

    /// A short name for messages (`"host"`, `"caching"`).
    fn name(&self) -> &str;

    /// Whether its memory is pinned (page-locked) host memory, from which device copies can
    /// run without waiting.
    fn is_pinned(&self) -> bool {
        false
    }

    /// Counts `block` (live, from this allocator) under `category` from now on. Allocators
    /// that keep no categories ignore it.
    fn set_category(&self, block: &Block, category: Category) {
        let _ = (block, category);
    }

    /// Allocates `size` bytes counted under `category` from the start, so that no reading
    /// of the statistics, on any thread, sees them as anything else (an input batch made on
    /// a loader's worker is never a temporary for a moment). The default allocates, then
    /// calls [`set_category`](DeviceAllocator::set_category); allocators that keep
    /// categories do both at once.
    fn allocate_as(
        &self,
        size: usize,
        site: &Site,
        category: Category,
    ) -> Result<Block, AllocError> {
        let block = self.allocate(size, site)?;
        self.set_category(&block, category);
        Ok(block)
    }

    /// Records that `stream` (of this allocator's device, other than the block's own) uses
    /// `block` (live, from this allocator): once freed, its memory is not reused until the
    /// work queued on `stream` by then has completed (PyTorch's `record_stream`). False when
    /// the allocator has no streams or the block is not its own.
    fn record_stream(&self, block: &Block, stream: StreamId) -> bool {
        let _ = (block, stream);
        false
    }

    /// Records `event` on `block` (live, from this allocator): a copy that uses the block's
    /// host memory has been queued, so once freed the block is reused only after the event
    /// completes (PyTorch's `CachingHostAllocator` rule). False when the allocator keeps no
    /// such events (its memory is not pinned).
    fn record_host_event(&self, block: &Block, event: &HostEvent) -> bool {
        let _ = (block, event);
        false
    }

    /// Counts `bytes` more of a file mapped into memory for this device's tensors (the
    /// `mapped_bytes` statistic; see [`MappedBytes`](crate::MappedBytes), which pairs this
    /// with [`remove_mapped_bytes`](DeviceAllocator::remove_mapped_bytes)). The bytes are not
    /// the allocator's: allocated and reserved bytes are unchanged. Allocators that keep no
    /// statistics ignore it.
    fn add_mapped_bytes(&self, bytes: usize) {
        let _ = bytes;
    }

    /// Counts `bytes` fewer mapped bytes: a mapping counted with
    /// [`add_mapped_bytes`](DeviceAllocator::add_mapped_bytes) was released.
    fn remove_mapped_bytes(&self, bytes: usize) {
        let _ = bytes;
    }
}
