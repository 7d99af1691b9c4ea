//! Which allocator a new storage comes from: the device's default, or a thread-scoped
//! override installed with [`with_allocator`].

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use strata_alloc::caching::ENV_VAR;
use strata_alloc::{ConfigError, DeviceAllocator, HostCachingAllocator};

use crate::{Device, Error, Result};

thread_local! {
    static OVERRIDES: RefCell<Vec<Arc<dyn DeviceAllocator>>> = const { RefCell::new(Vec::new()) };
}

/// The process-wide default host allocator: PyTorch's caching algorithm over mmap'd host
/// memory, configured by `STRATA_ALLOC_CONF` when it is first used.
///
/// An invalid `STRATA_ALLOC_CONF` is an error (naming the key) from every host allocation and
/// memory query, rather than a silently ignored setting.
pub fn default_host_allocator() -> Result<&'static Arc<HostCachingAllocator>> {
    static HOST: OnceLock<std::result::Result<Arc<HostCachingAllocator>, ConfigError>> =
        OnceLock::new();
    HOST.get_or_init(|| HostCachingAllocator::host().map(Arc::new))
        .as_ref()
        .map_err(|e| Error::Argument {
            op: "allocate",
            message: format!("{ENV_VAR}: {e}"),
            hint: Some(format!(
                "fix or unset {ENV_VAR} (for example `expandable_segments:True,max_split_size_mb:128`)"
            )),
        })
}

/// The allocator a new storage on `device` takes its memory from on this thread.
pub fn current_allocator(device: Device) -> Result<Arc<dyn DeviceAllocator>> {
    match device {
        Device::Cpu => Ok(OVERRIDES.with(|o| o.borrow().last().cloned()).map_or_else(
            || default_host_allocator().map(|a| a.clone() as Arc<dyn DeviceAllocator>),
            Ok,
        )?),
        other => Err(no_allocator(other)),
    }
}

pub(crate) fn no_allocator(device: Device) -> Error {
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

/// The default caching allocator of `device`.
pub(crate) fn device_allocator(device: Device) -> Result<&'static Arc<HostCachingAllocator>> {
    match device {
        Device::Cpu => default_host_allocator(),
        other => Err(no_allocator(other)),
    }
}
