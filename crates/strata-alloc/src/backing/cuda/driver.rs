//! The CUDA driver, loaded at run time: whether it is there, how many devices it sees, its
//! errors, and binding a device's primary context to the calling thread.
//!
//! cudarc loads `libcuda.so.1` on first use and panics when it cannot; every entry point here
//! checks that the library is present (once, cached) before the first driver call, so a
//! machine without the driver gets [`CudaError::NoDriver`], never a panic.

use std::ffi::CStr;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys;

/// Why the CUDA driver cannot do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// The driver library is not on this machine.
    #[error(
        "no CUDA driver found: libcuda.so.1 is not on this machine's library path; install \
         the NVIDIA driver, or use Device::Cpu"
    )]
    NoDriver,
    /// The device index is out of range.
    #[error("no CUDA device {index}: this machine has {count}")]
    NoDevice {
        /// The index asked for.
        index: usize,
        /// Devices the driver sees.
        count: usize,
    },
    /// A driver call failed.
    #[error("CUDA driver call {call} failed: {name} ({description})")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// The error's name (`CUDA_ERROR_OUT_OF_MEMORY`).
        name: String,
        /// The driver's description of it.
        description: String,
        /// The raw result code.
        code: u32,
    },
}

impl CudaError {
    /// Whether this is the driver's out-of-memory error.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, CudaError::Driver { code, .. }
            if *code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY as u32)
    }

    /// The error strata raises itself, before or instead of a driver call, with the driver's
    /// code for it (`CUDA_ERROR_INVALID_VALUE`, ...) and what is wrong.
    pub(crate) fn refused(
        call: &'static str,
        code: sys::CUresult,
        description: impl Into<String>,
    ) -> CudaError {
        CudaError::Driver {
            call,
            name: format!("{code:?}"),
            description: description.into(),
            code: code as u32,
        }
    }
}

/// A query's answer: `Ok(false)` for `CUDA_ERROR_NOT_READY` (work still queued), `Ok(true)`
/// for success, else the error naming `call`.
pub(crate) fn ready(result: sys::CUresult, call: &'static str) -> Result<bool, CudaError> {
    if result == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check(result, call).map(|()| true)
}

/// Turns a driver result into `Ok` or the error naming `call`.
pub(crate) fn check(result: sys::CUresult, call: &'static str) -> Result<(), CudaError> {
    if result == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let text = |f: unsafe fn(sys::CUresult, *mut *const std::ffi::c_char) -> sys::CUresult| {
        let mut p: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: the library is loaded (every caller got here through `loaded()`), and the
        // driver writes a pointer to a static, NUL-terminated string or leaves it null.
        let ok = unsafe { f(result, &mut p) } == sys::CUresult::CUDA_SUCCESS;
        if ok && !p.is_null() {
            // SAFETY: see above: a static C string owned by the driver.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        } else {
            format!("{result:?}")
        }
    };
    Err(CudaError::Driver {
        call,
        name: text(sys::cuGetErrorName),
        description: text(sys::cuGetErrorString),
        code: result as u32,
    })
}

/// `Ok` once the driver library is loaded and initialised; checked once per process.
pub(crate) fn loaded() -> Result<(), CudaError> {
    static INIT: OnceLock<Result<(), CudaError>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: only tries to open the library; no driver function is called.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaError::NoDriver);
        }
        // SAFETY: the library is present, so cudarc loads it rather than panicking.
        check(unsafe { sys::cuInit(0) }, "cuInit")
    })
    .clone()
}

/// How many CUDA devices this machine has: `Err(NoDriver)` without the driver, `Ok(0)` with
/// a driver and no device (`CUDA_ERROR_NO_DEVICE`).
pub fn device_count() -> Result<usize, CudaError> {
    match loaded() {
        Ok(()) => {}
        Err(CudaError::Driver { code, .. })
            if code == sys::CUresult::CUDA_ERROR_NO_DEVICE as u32 =>
        {
            return Ok(0)
        }
        Err(e) => return Err(e),
    }
    let mut n = 0;
    // SAFETY: the driver is loaded and initialised; `n` is a valid out-pointer.
    check(unsafe { sys::cuDeviceGetCount(&mut n) }, "cuDeviceGetCount")?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Whether a CUDA device can be used: a driver and at least one device.
pub fn is_available() -> bool {
    device_count().is_ok_and(|n| n > 0)
}

/// The driver's CUDA version (`12080` for 12.8), once it is loaded.
pub(crate) fn driver_version() -> Result<i32, CudaError> {
    loaded()?;
    let mut v = 0;
    check(
        // SAFETY: the driver is loaded; `v` is a valid out-pointer.
        unsafe { sys::cuDriverGetVersion(&mut v) },
        "cuDriverGetVersion",
    )?;
    Ok(v)
}

/// Waits until all work queued on device `index`, on every stream, has finished
/// (`cuCtxSynchronize`).
pub fn synchronize_device(index: usize) -> Result<(), CudaError> {
    Context::primary(index)?.bind()?;
    // SAFETY: the device's primary context is current on this thread.
    check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
}

/// A device's primary context, retained for the life of the process (PyTorch's rule).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context {
    /// The `CUcontext`, as an integer so the type is `Send + Sync`.
    raw: usize,
    /// The `CUdevice`.
    pub device: sys::CUdevice,
}

impl Context {
    /// The primary context of device `index`, retained on first use.
    pub fn primary(index: usize) -> Result<Context, CudaError> {
        static CONTEXTS: Mutex<Vec<(usize, Context)>> = Mutex::new(Vec::new());
        let count = device_count()?;
        if index >= count {
            return Err(CudaError::NoDevice { index, count });
        }
        let mut known = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&(_, c)) = known.iter().find(|(i, _)| *i == index) {
            return Ok(c);
        }
        let mut device = 0;
        let ordinal = i32::try_from(index).map_err(|_| CudaError::NoDevice { index, count })?;
        check(
            // SAFETY: the driver is loaded (device_count succeeded); out-pointers are valid.
            unsafe { sys::cuDeviceGet(&mut device, ordinal) },
            "cuDeviceGet",
        )?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        check(
            // SAFETY: as above; the retained context is never released, so it outlives every use.
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, device) },
            "cuDevicePrimaryCtxRetain",
        )?;
        let c = Context {
            raw: ctx as usize,
            device,
        };
        known.push((index, c));
        Ok(c)
    }

    /// Makes this context current on the calling thread (the driver binds contexts per
    /// thread, so every thread that calls it must do this first).
    pub fn bind(&self) -> Result<(), CudaError> {
        check(
            // SAFETY: the context was retained and is never released.
            unsafe { sys::cuCtxSetCurrent(self.raw as sys::CUcontext) },
            "cuCtxSetCurrent",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_is_missing_and_what_to_do() {
        let e = CudaError::NoDriver.to_string();
        assert!(
            e.contains("no CUDA driver found") && e.contains("Device::Cpu"),
            "{e}"
        );
        let e = CudaError::NoDevice { index: 1, count: 1 }.to_string();
        assert_eq!(e, "no CUDA device 1: this machine has 1");
    }

    #[test]
    fn strata_s_own_refusals_read_as_the_driver_s_and_queries_answer() {
        let e = CudaError::refused(
            "cuMemMap",
            sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            "not a whole page",
        );
        assert_eq!(
            e.to_string(),
            "CUDA driver call cuMemMap failed: CUDA_ERROR_INVALID_VALUE (not a whole page)"
        );
        assert!(!e.is_out_of_memory());
        // Neither answer calls into the driver.
        assert_eq!(
            ready(sys::CUresult::CUDA_ERROR_NOT_READY, "q").ok(),
            Some(false)
        );
        assert_eq!(ready(sys::CUresult::CUDA_SUCCESS, "q").ok(), Some(true));
    }

    #[test]
    fn without_a_driver_every_question_is_an_answer_not_a_panic() {
        // On a machine without the driver (every CI machine) this is the path; on a GPU
        // machine the driver's own answers.
        // SAFETY: only tries to open the library.
        let present = unsafe { sys::is_culib_present() };
        match device_count() {
            Err(CudaError::NoDriver) => {
                assert!(!present);
                assert!(!is_available());
                assert!(matches!(Context::primary(0), Err(CudaError::NoDriver)));
            }
            Ok(n) => {
                assert!(present);
                assert_eq!(is_available(), n > 0);
                assert!(matches!(
                    Context::primary(n),
                    Err(CudaError::NoDevice { index, count }) if index == n && count == n
                ));
            }
            // A driver library that cannot start here (a container without the device
            // files, a stub library, a driver older than the library): no device, said so.
            Err(e @ CudaError::Driver { .. }) => {
                assert!(present);
                assert!(!is_available());
                assert!(e.to_string().contains("cuInit"), "{e}");
            }
            Err(e) => panic!("unexpected: {e}"),
        }
    }
}
