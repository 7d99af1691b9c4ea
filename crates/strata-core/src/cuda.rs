//! NVIDIA GPUs: whether one can be used, and how many there are (PyTorch's
//! `torch.cuda.is_available()` and `device_count()`).
//!
//! With the `cuda` feature (on by default) the CUDA driver is loaded at run time, so a build
//! needs no CUDA and a machine without the driver gets a clear answer rather than a crash.
//! A CUDA device's memory goes through PyTorch's caching allocator
//! ([`memory::memory_allocated`](crate::memory::memory_allocated) and every other `memory::`
//! function take `Device::Cuda(i)`); kernels, and so tensors on the device, are not built yet.
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
/// error a factory gives there: no driver, no such device, or no CUDA kernels yet.
pub fn check(index: usize) -> Result<()> {
    crate::backend::check_device(crate::Device::Cuda(index), "cuda::check")
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
        // Tensors cannot live on a GPU in this build, whatever the machine.
        let e = check(0).unwrap_err().to_string();
        assert!(e.contains("cannot place a tensor on cuda:0"), "{e}");
    }
}
