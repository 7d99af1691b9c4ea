//! NVIDIA GPUs: whether one can be used, and how many there are (PyTorch's
//! `torch.cuda.is_available()` and `device_count()`).
//!
//! With the `cuda` feature (on by default) the CUDA driver is loaded at run time, so a build
//! needs no CUDA and a machine without the driver gets a clear answer rather than a crash.
//! A CUDA device's memory goes through PyTorch's caching allocator
//! ([`memory::memory_allocated`](crate::memory::memory_allocated) and every other `memory::`
//! function take `Device::Cuda(i)`). Tensors live there with factories, views, copies, fills
//! and transfers (blocking, or non-blocking through pinned memory); the other ops' CUDA
//! kernels are not built yet, and running one on a CUDA tensor is an error that names it.
//!
//! ```
//! use strata_core::cuda;
//! if !cuda::is_available() {
//!     // No driver or no device: a count of zero or the reason, never a panic.
//!     assert!(cuda::device_count().map_or(true, |n| n == 0));
//! }
//! ```

use crate::Result;

/// Whether a CUDA device can be used: the driver is there and sees at least one device.
pub fn is_available() -> bool {
    device_count().is_ok_and(|n| n > 0)
}

/// How many CUDA devices this machine has; an error when there is no driver ("no CUDA driver
/// found") or the build has no CUDA support.
#[cfg(feature = "cuda")]
pub fn device_count() -> Result<usize> {
    strata_alloc::backing::cuda::device_count()
        .map_err(|e| crate::routing::cuda_error("device_count", &e))
}

/// How many CUDA devices this machine has; an error when there is no driver ("no CUDA driver
/// found") or the build has no CUDA support.
#[cfg(not(feature = "cuda"))]
pub fn device_count() -> Result<usize> {
    Err(crate::Error::Unsupported {
        op: "device_count",
        message: "strata was not compiled with CUDA support (feature `cuda`)".into(),
    })
}

/// `Ok` when tensors can be made on `cuda:index` in this build on this machine, else the
/// error a factory gives there: no driver, or no such device.
pub fn check(index: usize) -> Result<()> {
    crate::backend::check_device(crate::Device::Cuda(index), "cuda::check")
}

#[cfg(feature = "cuda")]
pub use streams::{current_stream, synchronize, with_stream, Event, Stream};

/// Streams and events (PyTorch's `torch.cuda.Stream`, `Event`, `stream()` and
/// `current_stream()`).
#[cfg(feature = "cuda")]
mod streams {
    use strata_alloc::backing::cuda::{self as driver, CudaEvent, CudaStream};

    use crate::routing::cuda_error;
    use crate::{Device, Result};

    /// A stream of work on one CUDA device. Made with [`Stream::new`] it is a new stream
    /// (non-blocking, as PyTorch's), destroyed when dropped; from [`current_stream`] it is a
    /// handle to the thread's current one.
    ///
    /// ```
    /// use strata_core::cuda::Stream;
    /// // Without a driver, the reason (never a panic).
    /// if !strata_core::cuda::is_available() {
    ///     assert!(Stream::new(0).is_err());
    /// }
    /// ```
    #[derive(Debug)]
    pub struct Stream(CudaStream);

    impl Stream {
        /// A new stream on CUDA device `index`.
        pub fn new(index: usize) -> Result<Stream> {
            CudaStream::new(index)
                .map(Stream)
                .map_err(|e| cuda_error("Stream::new", &e))
        }

        /// The device's default stream.
        pub fn default_stream(index: usize) -> Result<Stream> {
            CudaStream::borrowed(index, strata_alloc::StreamId::DEFAULT)
                .map(Stream)
                .map_err(|e| cuda_error("default_stream", &e))
        }

        /// The stream's device.
        pub fn device(&self) -> Device {
            Device::Cuda(self.0.device())
        }

        /// The stream as the allocator and snapshots name it (its handle; 0 for the
        /// default stream).
        pub fn id(&self) -> strata_alloc::StreamId {
            self.0.id()
        }

        /// Waits until everything queued on the stream has finished.
        pub fn synchronize(&self) -> Result<()> {
            self.0
                .synchronize()
                .map_err(|e| cuda_error("Stream::synchronize", &e))
        }

        /// Whether everything queued on the stream has finished.
        pub fn query(&self) -> Result<bool> {
            self.0.query().map_err(|e| cuda_error("Stream::query", &e))
        }

        /// Makes work queued here from now on wait for everything queued on `other` so far.
        pub fn wait_stream(&self, other: &Stream) -> Result<()> {
            self.0
                .wait_stream(&other.0)
                .map_err(|e| cuda_error("wait_stream", &e))
        }

        /// Makes work queued here from now on wait for `event`.
        pub fn wait_event(&self, event: &Event) -> Result<()> {
            self.0
                .wait_event(&event.0)
                .map_err(|e| cuda_error("wait_event", &e))
        }

        /// Records a new event (without timing) at the current end of the stream's work.
        pub fn record_event(&self) -> Result<Event> {
            let e = Event::new(self.0.device(), false)?;
            e.record(self)?;
            Ok(e)
        }
    }

    /// A marker in a stream's work: it completes when the work queued before it has.
    #[derive(Debug)]
    pub struct Event(CudaEvent);

    impl Event {
        /// A new event on CUDA device `index`; with `enable_timing`,
        /// [`elapsed_time`](Self::elapsed_time) measures between two of them.
        pub fn new(index: usize, enable_timing: bool) -> Result<Event> {
            CudaEvent::new(index, enable_timing)
                .map(Event)
                .map_err(|e| cuda_error("Event::new", &e))
        }

        /// Records the event at the current end of `stream`'s work.
        pub fn record(&self, stream: &Stream) -> Result<()> {
            self.0
                .record(&stream.0)
                .map_err(|e| cuda_error("Event::record", &e))
        }

        /// Makes work queued on `stream` from now on wait for this event.
        pub fn wait(&self, stream: &Stream) -> Result<()> {
            stream.wait_event(self)
        }

        /// Whether the work before the event has finished.
        pub fn query(&self) -> Result<bool> {
            self.0.query().map_err(|e| cuda_error("Event::query", &e))
        }

        /// Waits until the work before the event has finished.
        pub fn synchronize(&self) -> Result<()> {
            self.0
                .synchronize()
                .map_err(|e| cuda_error("Event::synchronize", &e))
        }

        /// Milliseconds from this event to `end` (both with timing, both completed).
        pub fn elapsed_time(&self, end: &Event) -> Result<f32> {
            self.0
                .elapsed_ms(&end.0)
                .map_err(|e| cuda_error("elapsed_time", &e))
        }
    }

    /// The current stream of CUDA device `index` on this thread (the default stream unless
    /// inside [`with_stream`]); allocations on the device come from its pool.
    pub fn current_stream(index: usize) -> Result<Stream> {
        CudaStream::borrowed(index, driver::current_stream(index))
            .map(Stream)
            .map_err(|e| cuda_error("current_stream", &e))
    }

    /// Runs `f` with `stream` as its device's current stream on this thread (PyTorch's
    /// `with torch.cuda.stream(s):`); the previous one comes back when `f` returns or
    /// unwinds.
    pub fn with_stream<R>(stream: &Stream, f: impl FnOnce() -> R) -> R {
        struct Restore(usize, strata_alloc::StreamId);
        impl Drop for Restore {
            fn drop(&mut self) {
                driver::set_current_stream(self.0, self.1);
            }
        }
        let device = stream.0.device();
        let _restore = Restore(device, driver::set_current_stream(device, stream.id()));
        f()
    }

    /// Waits until all work on every stream of CUDA device `index` has finished.
    pub fn synchronize(index: usize) -> Result<()> {
        driver::synchronize_device(index).map_err(|e| cuda_error("synchronize", &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answers_agree() {
        match device_count() {
            Ok(n) => assert_eq!(is_available(), n > 0),
            Err(e) => {
                assert!(!is_available());
                let m = e.to_string();
                assert!(m.contains("CUDA"), "{m}");
            }
        }
        // Tensors live on a GPU exactly where the driver sees one.
        match check(0) {
            Ok(()) => assert!(is_available()),
            Err(e) => {
                assert!(!is_available());
                let m = e.to_string();
                assert!(m.contains("cannot place a tensor on cuda:0"), "{m}");
            }
        }
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn with_stream_scopes_the_current_stream() {
        // Without a driver a stream cannot be made; the scoping itself is checked on the
        // GPU. Either way nothing panics.
        match Stream::new(0) {
            Ok(s) => {
                with_stream(&s, || {
                    assert_eq!(current_stream(0).map(|c| c.id()).ok(), Some(s.id()));
                });
                assert_eq!(
                    current_stream(0).map(|c| c.id()).ok(),
                    Some(strata_alloc::StreamId::DEFAULT)
                );
            }
            Err(e) => assert!(e.to_string().contains("CUDA"), "{e}"),
        }
    }
}
