//! Devices. Every variant always exists; a build without a backend answers with an error.

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

impl Device {
    /// `Ok` when this build can hold tensor data on `self` (today the CPU only), else the
    /// error `op` reports: CUDA names the missing CUDA support, the meta device says it is
    /// not supported yet. Checked before anything is allocated, whatever allocator a device
    /// is routed to.
    pub(crate) fn check_backend(self, op: &'static str) -> crate::Result<()> {
        let message = match self {
            Device::Cpu => return Ok(()),
            Device::Cuda(i) => format!(
                "cannot place a tensor on cuda:{i}: strata was not compiled with CUDA support; \
                 use Device::Cpu"
            ),
            Device::Meta => {
                "tensors on the meta device are not supported yet; use Device::Cpu".to_string()
            }
        };
        Err(crate::Error::Unsupported { op, message })
    }
}
