//! Copies and fills of device memory, queued on the calling thread's current stream of the
//! device (PyTorch's `cudaMemcpyAsync` and `cudaMemsetAsync` on `getCurrentCUDAStream()`).
//!
//! With [`Wait::Done`] a call returns once its work has finished (the stream is
//! synchronised), so host memory it read or wrote may be reused at once; with
//! [`Wait::Queued`] it returns as soon as the work is queued, and the caller keeps the host
//! memory alive and untouched until an event recorded after it ([`record_on_current`])
//! completes: the caller's part of a non-blocking copy.

use cudarc::driver::sys;

use super::driver::{check, Context, CudaError};
use super::stream::{current_stream, handle};
use super::CudaEvent;
use super::CudaStream;

/// Whether a transfer returns when its work is done or when it is queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Returns when the copy has finished.
    Done,
    /// Returns when the copy is queued on the stream.
    Queued,
}

/// A value repeated over device memory by [`fill`]: one, two or four bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// A byte.
    U8(u8),
    /// Two bytes (an f16, bf16 or i16 element).
    U16(u16),
    /// Four bytes (an f32 or i32 element).
    U32(u32),
}

/// The current stream of `device` as a driver handle, with the device's context bound.
fn current(device: usize) -> Result<sys::CUstream, CudaError> {
    Context::primary(device)?.bind()?;
    handle(device, current_stream(device))
}

/// Waits for `stream` when `wait` asks for it.
fn finish(stream: sys::CUstream, wait: Wait) -> Result<(), CudaError> {
    match wait {
        Wait::Queued => Ok(()),
        // SAFETY: a live stream of the bound context, or the default stream.
        Wait::Done => check(
            unsafe { sys::cuStreamSynchronize(stream) },
            "cuStreamSynchronize",
        ),
    }
}

/// Queues `op` (a driver call given the current stream of `device`) unless `count` says
/// there is nothing to do, then waits for it when `wait` asks.
fn queue(
    device: usize,
    count: usize,
    wait: Wait,
    call: &'static str,
    op: impl FnOnce(sys::CUstream) -> sys::CUresult,
) -> Result<(), CudaError> {
    if count == 0 {
        return Ok(());
    }
    let stream = current(device)?;
    check(op(stream), call)?;
    finish(stream, wait)
}

/// Copies `len` bytes from host memory at `src` to device address `dst` of `device`.
///
/// # Safety
/// `dst` must address `len` writable bytes of `device`'s memory and `src` `len` readable
/// host bytes; with [`Wait::Queued`], `src` must stay valid and unwritten until the copy
/// completes (page-locked memory, for the copy to be asynchronous at all).
pub unsafe fn copy_to_device(
    device: usize,
    dst: usize,
    src: *const u8,
    len: usize,
    wait: Wait,
) -> Result<(), CudaError> {
    queue(device, len, wait, "cuMemcpyHtoDAsync", |stream| {
        // SAFETY: the caller's contract; the context is bound and the stream live.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst as sys::CUdeviceptr, src.cast(), len, stream) }
    })
}

/// Copies `len` bytes from device address `src` of `device` to host memory at `dst`.
///
/// # Safety
/// `src` must address `len` readable bytes of `device`'s memory and `dst` `len` writable
/// host bytes that nothing else touches; with [`Wait::Queued`], until the copy completes.
pub unsafe fn copy_to_host(
    device: usize,
    dst: *mut u8,
    src: usize,
    len: usize,
    wait: Wait,
) -> Result<(), CudaError> {
    queue(device, len, wait, "cuMemcpyDtoHAsync", |stream| {
        // SAFETY: the caller's contract; the context is bound and the stream live.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src as sys::CUdeviceptr, len, stream) }
    })
}

/// Copies `len` bytes between two addresses of `device`'s memory.
///
/// # Safety
/// `src` must address `len` readable bytes and `dst` `len` writable bytes of `device`'s
/// memory, not overlapping.
pub unsafe fn copy_within(
    device: usize,
    dst: usize,
    src: usize,
    len: usize,
    wait: Wait,
) -> Result<(), CudaError> {
    let (d, s) = (dst as sys::CUdeviceptr, src as sys::CUdeviceptr);
    queue(device, len, wait, "cuMemcpyDtoDAsync", |stream| {
        // SAFETY: the caller's contract; the context is bound and the stream live.
        unsafe { sys::cuMemcpyDtoDAsync_v2(d, s, len, stream) }
    })
}

/// Writes `pattern` `count` times from device address `dst` of `device`.
///
/// # Safety
/// `dst` must address `count` elements of the pattern's width, writable, in `device`'s
/// memory, aligned to that width.
pub unsafe fn fill(
    device: usize,
    dst: usize,
    pattern: Pattern,
    count: usize,
    wait: Wait,
) -> Result<(), CudaError> {
    let d = dst as sys::CUdeviceptr;
    let call = match pattern {
        Pattern::U8(_) => "cuMemsetD8Async",
        Pattern::U16(_) => "cuMemsetD16Async",
        Pattern::U32(_) => "cuMemsetD32Async",
    };
    // SAFETY (the three calls below): the caller's contract; the context is bound and the
    // stream live.
    queue(device, count, wait, call, |stream| match pattern {
        // SAFETY: as above.
        Pattern::U8(v) => unsafe { sys::cuMemsetD8Async(d, v, count, stream) },
        // SAFETY: as above.
        Pattern::U16(v) => unsafe { sys::cuMemsetD16Async(d, v, count, stream) },
        // SAFETY: as above.
        Pattern::U32(v) => unsafe { sys::cuMemsetD32Async(d, v, count, stream) },
    })
}

/// A new event (without timing) recorded at the current end of `device`'s current stream on
/// this thread: it completes when the work queued there so far has.
pub fn record_on_current(device: usize) -> Result<CudaEvent, CudaError> {
    let stream = CudaStream::borrowed(device, current_stream(device))?;
    let event = CudaEvent::new(device, false)?;
    event.record(&stream)?;
    Ok(event)
}
