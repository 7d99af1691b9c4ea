//! `CudaBacking`: the caching allocator's segments in NVIDIA device memory.
//!
//! Segments come from `cuMemAlloc`/`cuMemFree`; expandable segments from the driver's
//! virtual-memory API ([`vmm`]); streams are the driver's (a [`StreamId`] is the `CUstream`
//! handle as an integer, 0 the legacy default stream, as PyTorch's traces record them);
//! events are driver events without timing, pooled for reuse. Every call first binds the
//! device's primary context to the calling thread.
//!
//! The driver is loaded at run time ([`driver`]): building needs no CUDA, and a machine
//! without the driver gets [`CudaError::NoDriver`] from [`CudaBacking::new`].

mod driver;
mod host;
mod stream;
pub mod transfer;
mod vmm;

use std::sync::Mutex;

use cudarc::driver::sys;

use super::{Backing, BackingError, EventId, StreamId};
pub(crate) use driver::check;
use driver::ready;
use driver::Context;
pub use driver::{device_count, is_available, synchronize_device, CudaError};
pub(crate) use host::{host_alloc, host_free};
pub use stream::{current_stream, live_streams, set_current_stream, CudaEvent, CudaStream};
use vmm::Vmm;

/// Device memory of one CUDA device, for a [`CachingAllocator`](crate::CachingAllocator).
///
/// Its addresses are device addresses: the host must never dereference them
/// ([`Backing::addresses_are_memory`] is false). Ties between equal free blocks go to the
/// lowest address, as in PyTorch, so its runs compare with PyTorch's
/// ([`Backing::orders_by_address`]).
#[derive(Debug)]
pub struct CudaBacking {
    index: usize,
    name: String,
    ctx: Context,
    vmm: Vmm,
    /// Created events not in use, as integers (`CUevent` handles).
    events: Mutex<Vec<usize>>,
}

impl CudaBacking {
    /// The backing of CUDA device `index`: [`CudaError::NoDriver`] without the driver,
    /// [`CudaError::NoDevice`] when the machine has no such device.
    pub fn new(index: usize) -> Result<CudaBacking, CudaError> {
        let ctx = Context::primary(index)?;
        let vmm = Vmm::new(ctx)?;
        Ok(CudaBacking {
            index,
            name: format!("cuda:{index}"),
            ctx,
            vmm,
            events: Mutex::new(Vec::new()),
        })
    }

    /// The device's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The device's allocation granularity for mapped pages (2 MiB on current GPUs), or the
    /// error saying the device has no virtual-memory API (no expandable segments there).
    pub fn granularity(&self) -> Result<usize, CudaError> {
        self.vmm.granularity()
    }

    /// Makes the device's primary context current on this thread: every thread that calls
    /// the driver for this device (a kernel pool, a loader worker) does this first.
    pub fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind()
    }

    /// `(free, total)` bytes of the device, from `cuMemGetInfo`.
    pub fn try_mem_info(&self) -> Result<(usize, usize), CudaError> {
        self.ctx.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        check(
            // SAFETY: the context is current; both are valid out-pointers.
            unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
            "cuMemGetInfo",
        )?;
        Ok((free, total))
    }

    /// `s` as a driver handle: the default stream or a live stream of this device, else an
    /// error (no integer reaches the driver as a stream unless it is one).
    fn stream(&self, s: StreamId) -> Result<sys::CUstream, BackingError> {
        stream::handle(self.index, s).map_err(|e| BackingError::Fatal(e.to_string()))
    }

    fn event(e: EventId) -> sys::CUevent {
        e.0 as usize as sys::CUevent
    }
}

impl Drop for CudaBacking {
    fn drop(&mut self) {
        let events = std::mem::take(self.events.get_mut().unwrap_or_else(|p| p.into_inner()));
        if self.ctx.bind().is_err() {
            return;
        }
        for e in events {
            // SAFETY: each pooled event was created by `record_event` in this context and is
            // in use nowhere (it was released to the pool).
            unsafe { sys::cuEventDestroy_v2(e as sys::CUevent) };
        }
    }
}

/// A driver error as a backing error: the driver's out-of-memory is recoverable.
fn backing(e: CudaError, requested: usize) -> BackingError {
    if e.is_out_of_memory() {
        BackingError::OutOfMemory { requested }
    } else {
        BackingError::Fatal(e.to_string())
    }
}

impl Backing for CudaBacking {
    fn device_name(&self) -> &str {
        &self.name
    }

    fn addresses_are_memory(&self) -> bool {
        false
    }

    fn orders_by_address(&self) -> bool {
        true
    }

    /// This thread's current stream of the device: requests through the
    /// [`DeviceAllocator`](crate::DeviceAllocator) trait come from its pool.
    fn default_stream(&self) -> StreamId {
        current_stream(self.index)
    }

    fn allocate_segment(&self, size: usize) -> Result<usize, BackingError> {
        self.ctx.bind().map_err(|e| backing(e, size))?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the context is current; `ptr` is a valid out-pointer.
        check(unsafe { sys::cuMemAlloc_v2(&mut ptr, size) }, "cuMemAlloc")
            .map_err(|e| backing(e, size))?;
        Ok(ptr as usize)
    }

    unsafe fn free_segment(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        self.ctx.bind().map_err(|e| backing(e, size))?;
        check(
            // SAFETY: `addr` came from `cuMemAlloc` in `allocate_segment` (the caller's contract).
            unsafe { sys::cuMemFree_v2(addr as sys::CUdeviceptr) },
            "cuMemFree",
        )
        .map_err(|e| backing(e, size))
    }

    fn reserve(&self, size: usize) -> Result<usize, BackingError> {
        self.vmm.reserve(size).map_err(|e| backing(e, size))
    }

    fn map(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        self.vmm.map(addr, size).map_err(|e| backing(e, size))
    }

    unsafe fn unmap(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // SAFETY: forwarded; the caller upholds the same contract.
        unsafe { self.vmm.unmap(addr, size) }.map_err(|e| backing(e, size))
    }

    unsafe fn release_reservation(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // SAFETY: forwarded; the caller upholds the same contract.
        unsafe { self.vmm.release(addr, size) }.map_err(|e| backing(e, size))
    }

    fn record_event(&self, stream: StreamId) -> Result<EventId, BackingError> {
        let handle = self.stream(stream)?;
        self.ctx.bind().map_err(|e| backing(e, 0))?;
        let pooled = self.events.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let event = match pooled {
            Some(e) => e as sys::CUevent,
            None => {
                let mut e: sys::CUevent = std::ptr::null_mut();
                let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
                check(
                    // SAFETY: the context is current; `e` is a valid out-pointer.
                    unsafe { sys::cuEventCreate(&mut e, flags) },
                    "cuEventCreate",
                )
                .map_err(|err| backing(err, 0))?;
                e
            }
        };
        let recorded = check(
            // SAFETY: `event` is a live event of this context; `handle` is a live stream of
            // this device or the default stream.
            unsafe { sys::cuEventRecord(event, handle) },
            "cuEventRecord",
        );
        if let Err(e) = recorded {
            // SAFETY: the event is this backing's and recorded nowhere.
            unsafe { sys::cuEventDestroy_v2(event) };
            return Err(backing(e, 0));
        }
        Ok(EventId(event as usize as u64))
    }

    fn query_event(&self, event: EventId) -> Result<bool, BackingError> {
        self.ctx.bind().map_err(|e| backing(e, 0))?;
        // SAFETY: the event came from `record_event` and was not released.
        ready(
            unsafe { sys::cuEventQuery(Self::event(event)) },
            "cuEventQuery",
        )
        .map_err(|e| backing(e, 0))
    }

    fn synchronize_event(&self, event: EventId) -> Result<(), BackingError> {
        self.ctx.bind().map_err(|e| backing(e, 0))?;
        check(
            // SAFETY: the event came from `record_event` and was not released.
            unsafe { sys::cuEventSynchronize(Self::event(event)) },
            "cuEventSynchronize",
        )
        .map_err(|e| backing(e, 0))
    }

    fn release_event(&self, event: EventId) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event.0 as usize);
    }

    fn synchronize_stream(&self, stream: StreamId) -> Result<(), BackingError> {
        let handle = self.stream(stream)?;
        self.ctx.bind().map_err(|e| backing(e, 0))?;
        check(
            // SAFETY: a live stream of this device, or the default stream.
            unsafe { sys::cuStreamSynchronize(handle) },
            "cuStreamSynchronize",
        )
        .map_err(|e| backing(e, 0))
    }

    fn mem_info(&self) -> (usize, usize) {
        self.try_mem_info().unwrap_or((0, 0))
    }
}
