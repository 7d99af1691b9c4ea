//! Devices. Every variant always exists; a build without a backend for one answers with an
//! error (`backend::check_device`).

use std::fmt;

/// Where a tensor's memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory.
    #[default]
    Cpu,
    /// A CUDA GPU, by index.
    Cuda(usize),
    /// No memory at all: layouts and allocation patterns only.
    Meta,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
            Device::Meta => f.write_str("meta"),
        }
    }
}

/// A device name that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown device `{0}`: use cpu, meta, cuda or cuda:N")]
pub struct ParseDeviceError(pub String);

/// PyTorch's device strings: `cpu`, `meta`, `cuda` (device 0) and `cuda:N`.
impl std::str::FromStr for Device {
    type Err = ParseDeviceError;

    fn from_str(s: &str) -> Result<Device, ParseDeviceError> {
        let bad = || ParseDeviceError(s.to_owned());
        match s.trim() {
            "cpu" => Ok(Device::Cpu),
            "meta" => Ok(Device::Meta),
            "cuda" => Ok(Device::Cuda(0)),
            other => {
                let index = other.strip_prefix("cuda:").ok_or_else(bad)?;
                index.parse().map(Device::Cuda).map_err(|_| bad())
            }
        }
    }
}

thread_local! {
    static DEFAULT_DEVICE: std::cell::Cell<Device> = const { std::cell::Cell::new(Device::Cpu) };
}

/// The device the plain factories (`Tensor::zeros`, `Tensor::from_vec`, ...) make tensors on
/// on this thread: the CPU unless a [`DefaultDevice`] guard says otherwise.
pub fn default_device() -> Device {
    DEFAULT_DEVICE.with(|d| d.get())
}

/// Makes `device` the default for the plain factories on this thread until dropped:
/// PyTorch's `with torch.device("meta"):`. Guards nest; dropping one restores the default
/// that was in force when it was made.
///
/// ```
/// use strata_core::{device::DefaultDevice, DType, Device, Tensor};
/// let meta = DefaultDevice::set(Device::Meta);
/// let w = Tensor::zeros(&[1024, 1024], DType::F32)?; // no memory is touched
/// assert_eq!(w.device(), Device::Meta);
/// drop(meta);
/// assert_eq!(Tensor::zeros(&[2], DType::F32)?.device(), Device::Cpu);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[must_use = "the default device reverts when the guard is dropped"]
#[derive(Debug)]
pub struct DefaultDevice {
    previous: Device,
    // Restores a thread-local: the guard must stay on the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl DefaultDevice {
    /// Makes `device` this thread's default until the guard drops.
    pub fn set(device: Device) -> DefaultDevice {
        DefaultDevice {
            previous: DEFAULT_DEVICE.with(|d| d.replace(device)),
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for DefaultDevice {
    fn drop(&mut self) {
        let previous = self.previous;
        DEFAULT_DEVICE.with(|d| d.set(previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_strings_parse_as_in_pytorch() {
        assert_eq!("cpu".parse(), Ok(Device::Cpu));
        assert_eq!("meta".parse(), Ok(Device::Meta));
        assert_eq!("cuda".parse(), Ok(Device::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(Device::Cuda(3)));
        for d in [Device::Cpu, Device::Meta, Device::Cuda(1)] {
            assert_eq!(d.to_string().parse(), Ok(d));
        }
        let e = "gpu".parse::<Device>().unwrap_err().to_string();
        assert!(
            e.contains("unknown device `gpu`") && e.contains("cuda:N"),
            "{e}"
        );
        assert!("cuda:x".parse::<Device>().is_err());
    }
}
