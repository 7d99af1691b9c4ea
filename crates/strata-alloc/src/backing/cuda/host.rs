//! Page-locked host memory from the CUDA driver, for the pinned host allocator: what lets a
//! host-to-device copy run asynchronously.

use cudarc::driver::sys;

use super::driver::{check, Context, CudaError};

/// `size` bytes of page-locked host memory (`cuMemHostAlloc`, flags 0, as PyTorch's
/// `cudaHostAlloc`), allocated in device 0's primary context.
pub(crate) fn host_alloc(size: usize) -> Result<*mut u8, CudaError> {
    Context::primary(0)?.bind()?;
    let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
    check(
        // SAFETY: the context is current; `p` is a valid out-pointer.
        unsafe { sys::cuMemHostAlloc(&mut p, size, 0) },
        "cuMemHostAlloc",
    )?;
    Ok(p.cast())
}

/// Gives back memory from [`host_alloc`].
///
/// # Safety
/// `ptr` must come from `host_alloc` and nothing may use it afterwards.
pub(crate) unsafe fn host_free(ptr: *mut u8) -> Result<(), CudaError> {
    Context::primary(0)?.bind()?;
    // SAFETY: the caller's contract.
    check(unsafe { sys::cuMemFreeHost(ptr.cast()) }, "cuMemFreeHost")
}
