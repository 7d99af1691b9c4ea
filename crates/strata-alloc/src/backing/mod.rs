//! Backings: where the caching allocator's segments come from.
//!
//! A [`Backing`] is the "driver" under a [`CachingAllocator`](crate::CachingAllocator): it hands
//! out whole segments (PyTorch's `cudaMalloc`), reserves address space and maps pages into it for
//! expandable segments (PyTorch's `cuMemAddressReserve` / `cuMemMap`), and knows the device's
//! streams and events. The allocator never reads or writes the memory itself; it only does
//! arithmetic on addresses.
//!
//! Two backings live here:
//! * [`HostBacking`]: anonymous `mmap`'d host memory (huge pages advised for segments of 2 MiB
//!   and more). On the host, "reserved" means mapped address space: its pages become resident
//!   the first time they are touched, so reserved bytes are an upper bound of the resident set.
//! * [`VirtualBacking`]: hands out address ranges only and never touches memory, with a
//!   configurable capacity, so allocation patterns (and out-of-memory) can be simulated exactly.
//!
//! Both backings report the same capacity arithmetic, and the allocator orders free blocks by
//! segment sequence number and offset rather than by address, so the same sequence of requests
//! makes the same choices on both.

use std::fmt;

#[cfg(feature = "cuda")]
pub mod cuda;
mod host;
pub(crate) mod memcheck;
pub(crate) mod simulated;
mod virt;

#[cfg(feature = "cuda")]
pub use cuda::CudaBacking;
pub use host::HostBacking;
pub use virt::VirtualBacking;

/// A stream of work on a device. Blocks freed on one stream are reused only by allocations on
/// the same stream. Host memory has a single stream, [`StreamId::DEFAULT`].
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct StreamId(pub u64);

impl StreamId {
    /// The default stream (stream 0); the only stream of host memory.
    pub const DEFAULT: StreamId = StreamId(0);
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream {}", self.0)
    }
}

/// A marker recorded on a stream: it completes when all work queued on the stream before it
/// has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId(pub u64);

/// Why a backing operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackingError {
    /// The device has no room for the request. Recoverable: the allocator frees cached
    /// segments and tries again before it reports out-of-memory.
    #[error("the device has no room for {requested} more bytes")]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
    },
    /// The device itself failed (a bad address, an unexpected system error). Not recoverable by
    /// freeing memory.
    #[error("device failure: {0}")]
    Fatal(String),
}

/// Where segments come from, and the device's streams and events.
///
/// Addresses are plain integers: a backing may hand out addresses that are not memory (see
/// [`Backing::addresses_are_memory`]). Segment and reservation addresses must be aligned to at
/// least 512 bytes.
pub trait Backing: Send + Sync + fmt::Debug {
    /// Device name for messages (`"cpu"`, `"virtual"`).
    fn device_name(&self) -> &str;

    /// Whether the addresses handed out are readable and writable memory. `false` for
    /// [`VirtualBacking`], whose blocks must never be dereferenced.
    fn addresses_are_memory(&self) -> bool;

    /// Whether the allocator should prefer the lowest address among equal free blocks, as
    /// PyTorch does, rather than the oldest segment. `false` by default, so that the host and
    /// virtual backings make the same choices whatever addresses they get; `true` for a
    /// backing replaying a recorded run's addresses, or a device whose runs are compared with
    /// PyTorch's.
    fn orders_by_address(&self) -> bool {
        false
    }

    /// Allocates a segment of exactly `size` bytes and returns its base address.
    fn allocate_segment(&self, size: usize) -> Result<usize, BackingError>;

    /// Returns a segment.
    ///
    /// # Safety
    /// `addr` and `size` must come from one `allocate_segment` call on this backing, and no
    /// pointer into the segment may be used afterwards.
    unsafe fn free_segment(&self, addr: usize, size: usize) -> Result<(), BackingError>;

    /// Reserves `size` bytes of address space without backing it with memory (for expandable
    /// segments). Returns the base address.
    fn reserve(&self, size: usize) -> Result<usize, BackingError>;

    /// Backs `[addr, addr + size)`, which lies inside one reservation and is not mapped yet,
    /// with memory.
    fn map(&self, addr: usize, size: usize) -> Result<(), BackingError>;

    /// Removes the memory behind `[addr, addr + size)`; the address space stays reserved.
    ///
    /// # Safety
    /// The range must have been mapped with `map`, and no pointer into it may be used
    /// afterwards.
    unsafe fn unmap(&self, addr: usize, size: usize) -> Result<(), BackingError>;

    /// Gives back a whole reservation, all of it unmapped.
    ///
    /// # Safety
    /// `addr` and `size` must come from one `reserve` call, and nothing in it may be mapped.
    unsafe fn release_reservation(&self, addr: usize, size: usize) -> Result<(), BackingError>;

    /// The stream allocations use unless they name another.
    fn default_stream(&self) -> StreamId {
        StreamId::DEFAULT
    }

    /// Records an event on `stream`.
    fn record_event(&self, stream: StreamId) -> Result<EventId, BackingError>;

    /// Whether `event` has completed.
    fn query_event(&self, event: EventId) -> Result<bool, BackingError>;

    /// Waits until `event` has completed.
    fn synchronize_event(&self, event: EventId) -> Result<(), BackingError>;

    /// Gives an event back (to a pool of reusable events, for example).
    fn release_event(&self, event: EventId);

    /// Waits until all work queued on `stream` has completed.
    fn synchronize_stream(&self, stream: StreamId) -> Result<(), BackingError>;

    /// `(free, total)` bytes of the device, as PyTorch's `mem_get_info`.
    fn mem_info(&self) -> (usize, usize);
}

/// A shared backing: several allocators (or a test and its allocator) can use one backing.
impl<B: Backing + ?Sized> Backing for std::sync::Arc<B> {
    fn device_name(&self) -> &str {
        (**self).device_name()
    }
    fn addresses_are_memory(&self) -> bool {
        (**self).addresses_are_memory()
    }
    fn orders_by_address(&self) -> bool {
        (**self).orders_by_address()
    }
    fn allocate_segment(&self, size: usize) -> Result<usize, BackingError> {
        (**self).allocate_segment(size)
    }
    unsafe fn free_segment(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // SAFETY: forwarded; the caller upholds the same contract.
        unsafe { (**self).free_segment(addr, size) }
    }
    fn reserve(&self, size: usize) -> Result<usize, BackingError> {
        (**self).reserve(size)
    }
    fn map(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        (**self).map(addr, size)
    }
    unsafe fn unmap(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // SAFETY: forwarded; the caller upholds the same contract.
        unsafe { (**self).unmap(addr, size) }
    }
    unsafe fn release_reservation(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // SAFETY: forwarded; the caller upholds the same contract.
        unsafe { (**self).release_reservation(addr, size) }
    }
    fn default_stream(&self) -> StreamId {
        (**self).default_stream()
    }
    fn record_event(&self, stream: StreamId) -> Result<EventId, BackingError> {
        (**self).record_event(stream)
    }
    fn query_event(&self, event: EventId) -> Result<bool, BackingError> {
        (**self).query_event(event)
    }
    fn synchronize_event(&self, event: EventId) -> Result<(), BackingError> {
        (**self).synchronize_event(event)
    }
    fn release_event(&self, event: EventId) {
        (**self).release_event(event)
    }
    fn synchronize_stream(&self, stream: StreamId) -> Result<(), BackingError> {
        (**self).synchronize_stream(stream)
    }
    fn mem_info(&self) -> (usize, usize) {
        (**self).mem_info()
    }
}

/// Total physical memory of this machine from `/proc/meminfo`, read once.
pub(crate) fn physical_memory() -> Option<usize> {
    static RAM: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *RAM.get_or_init(|| meminfo_field("MemTotal:"))
}

/// A `/proc/meminfo` field in bytes.
pub(crate) fn meminfo_field(name: &str) -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with(name))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_order_and_print() {
        assert!(StreamId(0) < StreamId(1));
        assert_eq!(StreamId::DEFAULT, StreamId(0));
        assert_eq!(StreamId(3).to_string(), "stream 3");
        assert_eq!(serde_json::to_string(&StreamId(7)).unwrap(), "7");
    }

    #[test]
    fn errors_read_well() {
        let e = BackingError::OutOfMemory { requested: 10 };
        assert!(e.to_string().contains("no room for 10"));
        assert!(BackingError::Fatal("x".into())
            .to_string()
            .contains("device failure"));
    }
}
