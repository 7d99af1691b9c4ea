//! Backends: where kernels run, and the interface through which ops reach them.
//!
//! An op's forward resolves its operands before it asks for a kernel: it validates them
//! (infer), allocates its outputs through its [`crate::OpContext`] on the operands' device,
//! locks every storage it touches (`storage::lock_storages`) and describes the loop as a
//! [`Plan`]: raw addresses with byte strides over a common shape, or contiguous slabs with
//! their sizes. It then asks the backend of the operands' device ([`for_device`]) for the
//! kernel by a descriptor from [`kernel`], which names *what* to compute. The backend decides
//! *how*: [`cpu`] runs loops over host memory on strata's thread pool.
//!
//! Kernels never see a `Tensor`, a lock or an allocator, and nothing outside this module and
//! `storage` touches raw host pointers. A new device (the meta device, CUDA later) is a
//! sibling of [`cpu`] implementing [`Backend`], not an edit to op files.
//!
//! The trait grows one method per kernel family as op families are moved behind it; the
//! kernels not yet behind it are called in [`cpu`] directly (see `docs/ARCHITECTURE.md`).

pub(crate) mod cpu;
pub(crate) mod kernel;

pub(crate) use cpu::Plan;

use crate::{DType, Device, Error, Result};
use kernel::{FloatOp, SameOp};

/// The kernels of one device.
pub(crate) trait Backend: Sync {
    /// The device whose memory these kernels read and write.
    #[cfg_attr(not(test), allow(dead_code))]
    fn device(&self) -> Device;

    /// `out = f(x)` over `plan` (operand 0 the output, operand 1 the input), computed in the
    /// floating dtype `compute`.
    ///
    /// # Safety
    /// The plan's addresses must be valid for the loop on this backend's device and their
    /// storages locked: operand 0 writable, operand 1 readable.
    unsafe fn float_unary(&self, plan: &Plan, f: FloatOp, compute: DType);

    /// `out = s(x)` over `plan`, computed in `compute`.
    ///
    /// # Safety
    /// As for [`Backend::float_unary`].
    unsafe fn same_unary(&self, plan: &Plan, s: SameOp, compute: DType);

    /// Sums `outer` contiguous `[len, inner]` blocks of f32 or f64 starting at `base` over
    /// their `len` dimension into `[outer, inner]` f64 values; `None` when this backend has no
    /// such fast path for `dtype`.
    ///
    /// # Safety
    /// `base` must address `outer·len·inner` readable elements of `dtype` that nothing writes
    /// during the call.
    unsafe fn dense_sum(
        &self,
        dtype: DType,
        base: *const u8,
        outer: usize,
        len: usize,
        inner: usize,
    ) -> Option<Vec<f64>>;
}

/// The backend whose kernels run on `device`'s memory.
pub(crate) fn for_device(device: Device) -> Result<&'static dyn Backend> {
    match device {
        Device::Cpu => Ok(&cpu::Cpu),
        Device::Cuda(_) => Err(Error::Unsupported {
            op: "backend",
            message: "strata was not compiled with CUDA support; use Device::Cpu".into(),
        }),
        Device::Meta => Err(Error::Unsupported {
            op: "backend",
            message: "the meta device runs no kernels yet; use Device::Cpu".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_device_finds_its_backend_or_a_clear_error() {
        assert_eq!(
            for_device(Device::Cpu).map(|b| b.device()).ok(),
            Some(Device::Cpu)
        );
        let cuda = for_device(Device::Cuda(0)).err().map(|e| e.to_string());
        assert!(cuda.is_some_and(|m| m.contains("not compiled with CUDA")));
        assert!(for_device(Device::Meta).is_err());
    }
}
