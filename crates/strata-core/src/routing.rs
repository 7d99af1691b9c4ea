//! Which allocator a new storage comes from: the device's default, or a thread-scoped
//! override installed with [`with_allocator`].

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use strata_alloc::{DeviceAllocator, HostAllocator};

use crate::{Device, Error, Result};

thread_local! {
    static OVERRIDES: RefCell<Vec<Arc<dyn DeviceAllocator>>> = const { RefCell::new(Vec::new()) };
}

/// The process-wide default allocator for host memory.
pub fn default_host_allocator() -> &'static Arc<dyn DeviceAllocator> {
    static HOST: OnceLock<Arc<dyn DeviceAllocator>> = OnceLock::new();
    HOST.get_or_init(|| Arc::new(HostAllocator::new()))
}

/// The allocator a new storage on `device` takes its memory from on this thread.
pub fn current_allocator(device: Device) -> Result<Arc<dyn DeviceAllocator>> {
    match device {
        Device::Cpu => Ok(OVERRIDES
            .with(|o| o.borrow().last().cloned())
            .unwrap_or_else(|| default_host_allocator().clone())),
        other => Err(no_allocator(other)),
    }
}

fn no_allocator(device: Device) -> Error {
    let message = match device {
        Device::Cuda(_) => "strata was not compiled with CUDA support; use Device::Cpu",
        _ => "the meta device holds no data; use Device::Cpu",
    };
    Error::Unsupported {
        op: "allocate",
        message: message.into(),
    }
}

/// Runs `f` with every host allocation on this thread routed to `allocator`. Overrides nest;
/// storages always return their memory to the allocator they came from, whenever and on
/// whichever thread they are dropped.
///
/// ```
/// use std::sync::Arc;
/// use strata_core::{with_allocator, Tensor, DType};
/// use strata_alloc::{DeviceAllocator, HostAllocator};
/// let mine: Arc<dyn DeviceAllocator> = Arc::new(HostAllocator::new());
/// let t = with_allocator(&mine, || Tensor::zeros(&[256], DType::F32)).unwrap();
/// assert_eq!(mine.memory_allocated(), 1024);
/// drop(t);
/// assert_eq!(mine.memory_allocated(), 0);
/// ```
pub fn with_allocator<R>(allocator: &Arc<dyn DeviceAllocator>, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            OVERRIDES.with(|o| o.borrow_mut().pop());
        }
    }
    OVERRIDES.with(|o| o.borrow_mut().push(allocator.clone()));
    let _pop = Pop;
    f()
}

/// Bytes allocated to live tensors on `device` by its default allocator.
pub fn memory_allocated(device: Device) -> Result<usize> {
    Ok(default_allocator(device)?.memory_allocated())
}

/// The peak of [`memory_allocated`] since start or the last reset.
pub fn max_memory_allocated(device: Device) -> Result<usize> {
    Ok(default_allocator(device)?.max_memory_allocated())
}

/// Restarts peak tracking on `device`'s default allocator.
pub fn reset_peak_memory_stats(device: Device) -> Result<()> {
    default_allocator(device)?.reset_peak_memory_stats();
    Ok(())
}

fn default_allocator(device: Device) -> Result<&'static Arc<dyn DeviceAllocator>> {
    match device {
        Device::Cpu => Ok(default_host_allocator()),
        other => Err(no_allocator(other)),
    }
}
