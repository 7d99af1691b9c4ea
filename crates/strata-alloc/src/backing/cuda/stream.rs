//! CUDA streams and events, and the current stream of each thread and device.
//!
//! Streams are created non-blocking, as PyTorch's are: they do not wait for the legacy
//! default stream. The current stream (PyTorch's `torch.cuda.current_stream()`) is per thread
//! and device, the default stream (0) unless set; the device's caching allocator serves
//! requests from the current stream's pool ([`CudaBacking`](super::CudaBacking)'s
//! `default_stream`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Mutex;

use cudarc::driver::sys;

use super::driver::{check, driver_version, ready, Context, CudaError};
use crate::backing::StreamId;

/// The streams alive now (made by [`CudaStream::new`], not yet dropped), as `(device,
/// handle)`: a [`StreamId`] reaches the driver only if it is one of these or the default
/// stream, so no integer can pass for a stream handle.
static LIVE: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<(usize, u64)>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `stream` can be handed to the driver for `device`: the default stream, or a
/// stream alive now.
pub(crate) fn is_live(device: usize, stream: StreamId) -> bool {
    stream == StreamId::DEFAULT || live().contains(&(device, stream.0))
}

/// The streams alive now on `device` (for tests and diagnostics).
pub fn live_streams(device: usize) -> HashSet<StreamId> {
    live()
        .iter()
        .filter(|(d, _)| *d == device)
        .map(|&(_, s)| StreamId(s))
        .collect()
}

/// `stream` as a driver handle for `device`, or the error saying it is not a live stream.
pub(crate) fn handle(device: usize, stream: StreamId) -> Result<sys::CUstream, CudaError> {
    if is_live(device, stream) {
        return Ok(stream.0 as usize as sys::CUstream);
    }
    Err(CudaError::refused(
        "stream",
        sys::CUresult::CUDA_ERROR_INVALID_HANDLE,
        format!(
            "{stream} is not a live stream of cuda:{device} (dropped, or never made by \
             Stream::new)"
        ),
    ))
}

thread_local! {
    /// This thread's current stream per device, where one is set.
    static CURRENT: RefCell<Vec<(usize, StreamId)>> = const { RefCell::new(Vec::new()) };
}

/// The current stream of `device` on this thread: the default stream unless
/// [`set_current_stream`] chose another.
pub fn current_stream(device: usize) -> StreamId {
    CURRENT.with(|c| {
        c.borrow()
            .iter()
            .find(|(d, _)| *d == device)
            .map_or(StreamId::DEFAULT, |(_, s)| *s)
    })
}

/// Makes `stream` the current stream of `device` on this thread and returns the one before.
/// The stream must stay alive while it is current (`strata::cuda::with_stream` scopes this).
pub fn set_current_stream(device: usize, stream: StreamId) -> StreamId {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        match c.iter_mut().find(|(d, _)| *d == device) {
            Some(entry) => std::mem::replace(&mut entry.1, stream),
            None => {
                c.push((device, stream));
                StreamId::DEFAULT
            }
        }
    })
}

/// A stream of work on one CUDA device.
#[derive(Debug)]
pub struct CudaStream {
    device: usize,
    ctx: Context,
    /// The `CUstream` as an integer (0: the legacy default stream).
    raw: usize,
    /// Whether dropping this handle destroys the stream.
    owned: bool,
}

impl CudaStream {
    /// A new stream on `device`.
    pub fn new(device: usize) -> Result<CudaStream, CudaError> {
        let ctx = Context::primary(device)?;
        ctx.bind()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        check(
            // SAFETY: the device's context is current; `raw` is a valid out-pointer.
            unsafe { sys::cuStreamCreate(&mut raw, flags) },
            "cuStreamCreate",
        )?;
        live().push((device, raw as usize as u64));
        Ok(CudaStream {
            device,
            ctx,
            raw: raw as usize,
            owned: true,
        })
    }

    /// A handle to `id` on `device` that does not own it: the default stream (0), or a
    /// stream alive now (the current stream); any other id is an error. Its owner must keep
    /// it alive while the handle is used.
    pub fn borrowed(device: usize, id: StreamId) -> Result<CudaStream, CudaError> {
        let ctx = Context::primary(device)?;
        let raw = handle(device, id)? as usize;
        Ok(CudaStream {
            device,
            ctx,
            raw,
            owned: false,
        })
    }

    /// The device's index.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The stream as the allocator names it (the handle; 0 for the default stream).
    pub fn id(&self) -> StreamId {
        StreamId(self.raw as u64)
    }

    fn handle(&self) -> sys::CUstream {
        self.raw as sys::CUstream
    }

    /// Waits until everything queued on the stream has finished.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.ctx.bind()?;
        check(
            // SAFETY: the stream is alive (owned, or kept alive by its owner).
            unsafe { sys::cuStreamSynchronize(self.handle()) },
            "cuStreamSynchronize",
        )
    }

    /// Whether everything queued on the stream has finished.
    pub fn query(&self) -> Result<bool, CudaError> {
        self.ctx.bind()?;
        // SAFETY: as in `synchronize`.
        ready(
            unsafe { sys::cuStreamQuery(self.handle()) },
            "cuStreamQuery",
        )
    }

    /// Makes work queued on this stream from now on wait for `event`.
    pub fn wait_event(&self, event: &CudaEvent) -> Result<(), CudaError> {
        self.ctx.bind()?;
        check(
            // SAFETY: both handles are alive.
            unsafe { sys::cuStreamWaitEvent(self.handle(), event.handle(), 0) },
            "cuStreamWaitEvent",
        )
    }

    /// Makes work queued on this stream from now on wait for everything queued on `other`
    /// so far (PyTorch's `wait_stream`).
    pub fn wait_stream(&self, other: &CudaStream) -> Result<(), CudaError> {
        let event = CudaEvent::new(other.device, false)?;
        event.record(other)?;
        self.wait_event(&event)
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        live().retain(|&e| e != (self.device, self.raw as u64));
        if self.ctx.bind().is_ok() {
            // SAFETY: the stream was created by `new` and this is its only owner. Its work
            // finishes first, so that a new stream the driver gives the same handle never
            // meets blocks cached for this one while they are still in use.
            unsafe {
                sys::cuStreamSynchronize(self.handle());
                sys::cuStreamDestroy_v2(self.handle());
            }
        }
    }
}

// SAFETY: a `CUstream` may be used from any thread once its context is bound there, which
// every method does first.
unsafe impl Send for CudaStream {}
// SAFETY: as above; the driver serialises calls on one stream.
unsafe impl Sync for CudaStream {}

/// A marker recorded on a stream: it completes when the work queued before it has.
#[derive(Debug)]
pub struct CudaEvent {
    ctx: Context,
    raw: usize,
    timing: bool,
}

impl CudaEvent {
    /// A new event on `device`; with `timing`, [`elapsed_ms`](Self::elapsed_ms) can measure
    /// between two of them (PyTorch's `Event(enable_timing=True)`).
    pub fn new(device: usize, timing: bool) -> Result<CudaEvent, CudaError> {
        let ctx = Context::primary(device)?;
        ctx.bind()?;
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        } as u32;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        check(
            // SAFETY: the context is current; `raw` is a valid out-pointer.
            unsafe { sys::cuEventCreate(&mut raw, flags) },
            "cuEventCreate",
        )?;
        Ok(CudaEvent {
            ctx,
            raw: raw as usize,
            timing,
        })
    }

    fn handle(&self) -> sys::CUevent {
        self.raw as sys::CUevent
    }

    /// Records the event at the current end of `stream`'s work.
    pub fn record(&self, stream: &CudaStream) -> Result<(), CudaError> {
        self.ctx.bind()?;
        check(
            // SAFETY: both handles are alive and belong to this context.
            unsafe { sys::cuEventRecord(self.handle(), stream.handle()) },
            "cuEventRecord",
        )
    }

    /// Whether the work before the event has finished (true for an event never recorded).
    pub fn query(&self) -> Result<bool, CudaError> {
        self.ctx.bind()?;
        // SAFETY: the event is alive.
        ready(unsafe { sys::cuEventQuery(self.handle()) }, "cuEventQuery")
    }

    /// Waits until the work before the event has finished.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.ctx.bind()?;
        check(
            // SAFETY: the event is alive.
            unsafe { sys::cuEventSynchronize(self.handle()) },
            "cuEventSynchronize",
        )
    }

    /// Milliseconds between this event and `end`, both recorded with timing and completed.
    pub fn elapsed_ms(&self, end: &CudaEvent) -> Result<f32, CudaError> {
        if !self.timing || !end.timing {
            return Err(CudaError::refused(
                "cuEventElapsedTime",
                sys::CUresult::CUDA_ERROR_INVALID_HANDLE,
                "both events must be created with timing enabled",
            ));
        }
        // The only timing call the CUDA 13 bindings load appeared in CUDA 12.8; an older
        // driver lacks it (and loading it would abort).
        let version = driver_version()?;
        if version < 12080 {
            return Err(CudaError::refused(
                "cuEventElapsedTime",
                sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
                format!(
                    "the driver supports CUDA {}.{}; event timing needs 12.8 or newer",
                    version / 1000,
                    version % 1000 / 10
                ),
            ));
        }
        self.ctx.bind()?;
        let mut ms = 0f32;
        check(
            // SAFETY: both events are alive; `ms` is a valid out-pointer.
            unsafe { sys::cuEventElapsedTime_v2(&mut ms, self.handle(), end.handle()) },
            "cuEventElapsedTime",
        )?;
        Ok(ms)
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: the event was created by `new` and this is its only owner.
            unsafe { sys::cuEventDestroy_v2(self.handle()) };
        }
    }
}

// SAFETY: as for `CudaStream`: every method binds the context first.
unsafe impl Send for CudaEvent {}
// SAFETY: as above.
unsafe impl Sync for CudaEvent {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_stream_is_per_thread_and_device() {
        assert_eq!(current_stream(0), StreamId::DEFAULT);
        assert_eq!(set_current_stream(0, StreamId(77)), StreamId::DEFAULT);
        assert_eq!(current_stream(0), StreamId(77));
        assert_eq!(current_stream(1), StreamId::DEFAULT);
        std::thread::spawn(|| assert_eq!(current_stream(0), StreamId::DEFAULT))
            .join()
            .expect("joined");
        assert_eq!(set_current_stream(0, StreamId::DEFAULT), StreamId(77));
    }

    #[test]
    fn without_a_driver_streams_and_events_are_errors() {
        if super::super::device_count().is_err() {
            assert!(matches!(CudaStream::new(0), Err(CudaError::NoDriver)));
            assert!(matches!(CudaEvent::new(0, true), Err(CudaError::NoDriver)));
        }
    }
}
