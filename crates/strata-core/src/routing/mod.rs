//! Which allocator a new storage comes from: the device's default, or a thread-scoped
//! override for that device installed with [`with_device_allocator`] (or [`with_allocator`]
//! for the CPU).

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(feature = "cuda")]
use std::sync::Mutex;
use std::sync::{Arc, OnceLock};

use strata_alloc::caching::ENV_VAR;
use strata_alloc::{
    ConfigError, DeviceAllocator, HostCachingAllocator, PinnedHostAllocator, VirtualBacking,
    VirtualCachingAllocator,
};

use crate::{Device, Error, Result};

mod category;

pub use category::allocating_as;
pub(crate) use category::scoped_category;

#[cfg(feature = "cuda")]
use strata_alloc::{caching::CUDA_ENV_VARS, AllocatorConfig, CachingAllocator, CudaBacking};

/// PyTorch's caching allocator over a CUDA device's memory.
#[cfg(feature = "cuda")]
pub type CudaCachingAllocator = CachingAllocator<CudaBacking>;

thread_local! {
    // Innermost last; a device's override is the last entry for that device.
    static OVERRIDES: RefCell<Vec<(Device, Arc<dyn DeviceAllocator>)>> =
        const { RefCell::new(Vec::new()) };
}

/// Overrides installed on any thread: while there are none (a program that never routes),
/// finding an allocator skips the thread-local list. A thread's own override is counted
/// before its first allocation under it, in program order, so `Relaxed` suffices.
static OVERRIDDEN: AtomicUsize = AtomicUsize::new(0);

/// The process-wide default host allocator: PyTorch's caching algorithm over mmap'd host
/// memory, configured by `STRATA_ALLOC_CONF` when it is first used.
///
/// An invalid `STRATA_ALLOC_CONF` is an error (naming the key) from every host allocation and
/// memory query, rather than a silently ignored setting.
#[inline]
pub fn default_host_allocator() -> Result<&'static Arc<HostCachingAllocator>> {
    static HOST: OnceLock<std::result::Result<Arc<HostCachingAllocator>, ConfigError>> =
        OnceLock::new();
    HOST.get_or_init(|| HostCachingAllocator::host().map(Arc::new))
        .as_ref()
        .map_err(config_error)
}

/// The process-wide pinned host allocator (PyTorch's `CachingHostAllocator`): where
/// [`Tensor::pin_memory`](crate::Tensor::pin_memory) and the data loader's pinned batches
/// take their memory: page-locked by the CUDA driver where a device is there, else ordinary
/// host memory.
pub fn pinned_host_allocator() -> &'static Arc<PinnedHostAllocator> {
    static PINNED: OnceLock<Arc<PinnedHostAllocator>> = OnceLock::new();
    PINNED.get_or_init(|| Arc::new(PinnedHostAllocator::new()))
}

/// Bytes the meta device can "hold" at once: far beyond any real device, so predictions are
/// never cut short by the simulation itself (a limit set with `memory::set_memory_limit`
/// still applies).
pub const META_CAPACITY: usize = 1 << 50;

/// The meta device's default allocator: the same caching algorithm and settings
/// (`STRATA_ALLOC_CONF`) as the host's, over address ranges that are never mapped, with its
/// own statistics, history and snapshots.
pub fn default_meta_allocator() -> Result<&'static Arc<VirtualCachingAllocator>> {
    static META: OnceLock<std::result::Result<Arc<VirtualCachingAllocator>, ConfigError>> =
        OnceLock::new();
    META.get_or_init(|| {
        VirtualCachingAllocator::from_env(VirtualBacking::new(META_CAPACITY).named("meta"))
            .map(Arc::new)
    })
    .as_ref()
    .map_err(config_error)
}

/// The default allocator of CUDA device `index`: PyTorch's caching algorithm over the
/// device's memory, made when first used and kept for the process, configured by
/// `STRATA_ALLOC_CONF`, else `PYTORCH_ALLOC_CONF`, else `PYTORCH_CUDA_ALLOC_CONF` (so a
/// PyTorch user's settings carry over). Without the driver, or without device `index`, a
/// clear error.
#[cfg(feature = "cuda")]
pub fn default_cuda_allocator(index: usize) -> Result<&'static Arc<CudaCachingAllocator>> {
    type Known = Vec<(usize, &'static Arc<CudaCachingAllocator>)>;
    static CUDA: Mutex<Known> = Mutex::new(Vec::new());
    let mut known = CUDA.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, a)) = known.iter().find(|(i, _)| *i == index) {
        return Ok(a);
    }
    let backing = CudaBacking::new(index).map_err(|e| cuda_error("allocate", &e))?;
    let config = AllocatorConfig::from_env_vars(&CUDA_ENV_VARS).map_err(|e| Error::Argument {
        op: "allocate",
        message: e.to_string(),
        hint: Some("fix or unset the variable it names".into()),
    })?;
    // Leaked once per device: the allocator lives as long as the process, as PyTorch's does.
    let a: &'static Arc<CudaCachingAllocator> = Box::leak(Box::new(Arc::new(
        CachingAllocator::with_config(backing, config),
    )));
    known.push((index, a));
    Ok(a)
}

/// A CUDA driver error as `op`'s error.
#[cfg(feature = "cuda")]
pub(crate) fn cuda_error(op: &'static str, e: &strata_alloc::backing::cuda::CudaError) -> Error {
    Error::Unsupported {
        op,
        message: e.to_string(),
    }
}

fn config_error(e: &ConfigError) -> Error {
    Error::Argument {
        op: "allocate",
        message: format!("{ENV_VAR}: {e}"),
        hint: Some(format!(
            "fix or unset {ENV_VAR} (for example `expandable_segments:True,max_split_size_mb:128`)"
        )),
    }
}

/// The allocator a new storage on `device` takes its memory from on this thread: the
/// innermost override for `device`, else the device's default.
#[inline]
pub fn current_allocator(device: Device) -> Result<Arc<dyn DeviceAllocator>> {
    allocator_for(device).map(ChosenAllocator::into_arc)
}

/// The allocator [`current_allocator`] names, borrowed when it is the device's process-wide
/// default: an op's allocation then takes no new handle to it (and a refilled spare storage,
/// already holding one, keeps its own).
pub(crate) enum ChosenAllocator {
    /// The device's default, which lives as long as the process.
    Default(&'static Arc<dyn DeviceAllocator>),
    /// A thread's override, or a default that is not kept as a shared handle.
    Routed(Arc<dyn DeviceAllocator>),
}

impl ChosenAllocator {
    /// The allocator.
    #[inline]
    pub(crate) fn get(&self) -> &Arc<dyn DeviceAllocator> {
        match self {
            ChosenAllocator::Default(a) => a,
            ChosenAllocator::Routed(a) => a,
        }
    }

    /// An owned handle to the allocator.
    #[inline]
    pub(crate) fn into_arc(self) -> Arc<dyn DeviceAllocator> {
        match self {
            ChosenAllocator::Default(a) => a.clone(),
            ChosenAllocator::Routed(a) => a,
        }
    }
}

/// [`current_allocator`] without cloning the handle of a device's default.
#[inline]
pub(crate) fn allocator_for(device: Device) -> Result<ChosenAllocator> {
    if OVERRIDDEN.load(Ordering::Relaxed) != 0 {
        if let Some(a) = routed_for(device) {
            return Ok(ChosenAllocator::Routed(a));
        }
    }
    match device {
        Device::Cpu => {
            static HOST: OnceLock<Arc<dyn DeviceAllocator>> = OnceLock::new();
            shared_handle(&HOST, default_host_allocator).map(ChosenAllocator::Default)
        }
        Device::Meta => {
            static META: OnceLock<Arc<dyn DeviceAllocator>> = OnceLock::new();
            shared_handle(&META, default_meta_allocator).map(ChosenAllocator::Default)
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => Ok(ChosenAllocator::Routed(default_cuda_allocator(i)?.clone())),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(no_allocator()),
    }
}

/// This thread's innermost override for `device`, if any (kept out of line: a program that
/// never routes does not come here).
#[inline(never)]
fn routed_for(device: Device) -> Option<Arc<dyn DeviceAllocator>> {
    OVERRIDES.with(|o| {
        let o = o.borrow();
        o.iter()
            .rev()
            .find(|(d, _)| *d == device)
            .map(|(_, a)| a.clone())
    })
}

/// A device's default allocator (`default()`) as a handle of the trait object, kept in
/// `cell` (the same allocator, so that a handle is lent rather than cloned).
#[inline]
fn shared_handle<A: DeviceAllocator + 'static>(
    cell: &'static OnceLock<Arc<dyn DeviceAllocator>>,
    default: fn() -> Result<&'static Arc<A>>,
) -> Result<&'static Arc<dyn DeviceAllocator>> {
    match cell.get() {
        Some(a) => Ok(a),
        None => first_handle(cell, default),
    }
}

/// [`shared_handle`] the first time: makes the default and keeps its handle.
#[cold]
#[inline(never)]
fn first_handle<A: DeviceAllocator + 'static>(
    cell: &'static OnceLock<Arc<dyn DeviceAllocator>>,
    default: fn() -> Result<&'static Arc<A>>,
) -> Result<&'static Arc<dyn DeviceAllocator>> {
    let a = default()?;
    Ok(cell.get_or_init(|| a.clone()))
}

#[cfg(not(feature = "cuda"))]
pub(crate) fn no_allocator() -> Error {
    Error::Unsupported {
        op: "allocate",
        message: "strata was not compiled with CUDA support; use Device::Cpu or Device::Meta"
            .into(),
    }
}

/// Runs `f` with every host allocation on this thread routed to `allocator`:
/// [`with_device_allocator`] for [`Device::Cpu`]. Overrides nest; storages always return
/// their memory to the allocator they came from, whenever and on whichever thread they are
/// dropped.
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
    with_device_allocator(Device::Cpu, allocator, f)
}

/// Runs `f` with every allocation for `device` on this thread routed to `allocator`;
/// allocations for other devices keep their own routing. Overrides nest (the innermost one
/// for a device applies) and end when `f` returns or unwinds. Storages always return their
/// memory to the allocator they came from, whenever and on whichever thread they are dropped.
///
/// Routing decides where bytes come from, not what a device can do: a device without a
/// backend in this build (CUDA) still refuses to make tensors.
///
/// ```
/// use std::sync::Arc;
/// use strata_core::{with_device_allocator, DType, Device, Tensor};
/// use strata_alloc::{DeviceAllocator, HostAllocator};
/// let host: Arc<dyn DeviceAllocator> = Arc::new(HostAllocator::new());
/// let t = with_device_allocator(Device::Cpu, &host, || Tensor::ones(&[64], DType::F64))?;
/// assert_eq!(host.memory_allocated(), 512);
/// drop(t);
/// assert_eq!(host.memory_allocated(), 0);
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn with_device_allocator<R>(
    device: Device,
    allocator: &Arc<dyn DeviceAllocator>,
    f: impl FnOnce() -> R,
) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            OVERRIDES.with(|o| o.borrow_mut().pop());
            OVERRIDDEN.fetch_sub(1, Ordering::Relaxed);
        }
    }
    OVERRIDDEN.fetch_add(1, Ordering::Relaxed);
    OVERRIDES.with(|o| o.borrow_mut().push((device, allocator.clone())));
    let _pop = Pop;
    f()
}

/// The default caching allocator of a device: over host memory, over the virtual backing
/// for meta, over device memory for CUDA.
#[derive(Clone, Copy)]
pub(crate) enum DefaultAllocator {
    /// The CPU's.
    Host(&'static Arc<HostCachingAllocator>),
    /// The meta device's.
    Meta(&'static Arc<VirtualCachingAllocator>),
    /// A CUDA device's.
    #[cfg(feature = "cuda")]
    Cuda(&'static Arc<CudaCachingAllocator>),
}

/// The default caching allocator of `device`.
pub(crate) fn device_allocator(device: Device) -> Result<DefaultAllocator> {
    match device {
        Device::Cpu => default_host_allocator().map(DefaultAllocator::Host),
        Device::Meta => default_meta_allocator().map(DefaultAllocator::Meta),
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => default_cuda_allocator(i).map(DefaultAllocator::Cuda),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(no_allocator()),
    }
}

#[cfg(test)]
mod tests;
