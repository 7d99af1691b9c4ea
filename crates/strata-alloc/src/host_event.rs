//! Completion markers for pinned host blocks: a block a queued copy reads or writes is
//! not reused before its marker completes (see [`crate::PinnedHostAllocator`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A completion marker recorded on a pinned block: the block is not reused until it
/// completes. Clones share the marker.
///
/// Made with [`HostEvent::new`] it is a flag that whoever recorded it completes
/// ([`HostEvent::complete`]); made with [`HostEvent::from_cuda`] it is a CUDA event recorded
/// after a copy that reads or writes the block, complete when the device has finished it.
#[derive(Debug, Clone)]
pub struct HostEvent(Arc<Marker>);

#[derive(Debug)]
enum Marker {
    Flag(AtomicBool),
    #[cfg(feature = "cuda")]
    Cuda(crate::backing::cuda::CudaEvent),
}

impl Default for HostEvent {
    fn default() -> HostEvent {
        HostEvent(Arc::new(Marker::Flag(AtomicBool::new(false))))
    }
}

impl HostEvent {
    /// A new, incomplete event, completed by [`HostEvent::complete`].
    pub fn new() -> HostEvent {
        HostEvent::default()
    }

    /// The marker of a recorded CUDA event: complete once the device has done the work
    /// queued before it.
    #[cfg(feature = "cuda")]
    pub fn from_cuda(event: crate::backing::cuda::CudaEvent) -> HostEvent {
        HostEvent(Arc::new(Marker::Cuda(event)))
    }

    /// Marks a flag complete (what the device does when the copy it marks is done); a CUDA
    /// event completes by itself, so for one this does nothing.
    pub fn complete(&self) {
        match &*self.0 {
            Marker::Flag(done) => done.store(true, Ordering::Release),
            #[cfg(feature = "cuda")]
            Marker::Cuda(_) => {}
        }
    }

    /// Whether it has completed. A CUDA event the driver can no longer query (the device
    /// failed) counts as complete: no copy can be running on it any more.
    pub fn is_complete(&self) -> bool {
        match &*self.0 {
            Marker::Flag(done) => done.load(Ordering::Acquire),
            #[cfg(feature = "cuda")]
            Marker::Cuda(e) => e.query().unwrap_or(true),
        }
    }

    /// Waits until it has completed: a CUDA event by the driver's synchronisation (its error,
    /// if the device failed, as text), a flag by yielding until it is completed.
    pub fn wait(&self) -> Result<(), String> {
        match &*self.0 {
            Marker::Flag(done) => {
                while !done.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Marker::Cuda(e) => e.synchronize().map_err(|e| e.to_string()),
        }
    }
}
