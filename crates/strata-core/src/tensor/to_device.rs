//! Moving a tensor to another device: PyTorch's `.to(device)` and `.to(device, dtype)`.

use crate::backend::check_device;
use crate::op::OpContext;
use crate::{DType, Device, Error, Result, Tensor};

impl Tensor {
    /// This tensor on `device`: PyTorch's `t.to(device)`. On its own device it is this very
    /// tensor (the same handle, as PyTorch's `.to` returns `self`); otherwise a copy on
    /// `device`, through which gradients flow back to this tensor.
    ///
    /// A device this build cannot hold data on ([`Device::Cuda`] without CUDA support, and
    /// [`Device::Meta`] for now) is an error naming it.
    ///
    /// ```
    /// use strata_core::{DType, Device, Tensor};
    /// let x = Tensor::ones(&[2, 2], DType::F32)?;
    /// assert!(x.to_device(Device::Cpu)?.is_same(&x));
    /// assert!(x.to_device(Device::Cuda(0)).unwrap_err().to_string().contains("CUDA"));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        self.to_device_dtype(device, self.dtype())
    }

    /// This tensor on `device` with elements of `dtype`: PyTorch's `t.to(device, dtype)`.
    /// When both already match it is this very tensor; on its own device it is
    /// [`Tensor::to`]`(dtype)`; otherwise one copy that moves and converts, through which
    /// gradients flow back. Errors as [`Tensor::to_device`].
    ///
    /// ```
    /// use strata_core::{DType, Device, Tensor};
    /// let x = Tensor::arange(4, DType::I64)?;
    /// let y = x.to_device_dtype(Device::Cpu, DType::F32)?;
    /// assert_eq!((y.device(), y.dtype()), (Device::Cpu, DType::F32));
    /// assert!(x.to_device_dtype(Device::Cpu, DType::I64)?.is_same(&x));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn to_device_dtype(&self, device: Device, dtype: DType) -> Result<Tensor> {
        let from = self.device();
        if device == from {
            return self.to(dtype);
        }
        let ctx = OpContext::enter("to");
        check_device(device, ctx.op())?;
        check_device(from, ctx.op())?;
        // Two different devices that both hold data exist only once a second backend does;
        // its copy belongs here, recorded as `ToCopyBackward0` with the gradient moved back
        // to `from` and converted back to this tensor's dtype.
        Err(Error::Unsupported {
            op: ctx.op(),
            message: format!("copying a tensor from {from} to {device} is not implemented"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_device_is_the_same_handle_and_keeps_the_graph() -> Result<()> {
        let x = Tensor::ones(&[3], DType::F32)?.requires_grad_(true)?;
        let y = x.mul(2.0)?;
        let moved = y.to_device(Device::Cpu)?;
        assert!(moved.is_same(&y));
        assert_eq!(moved.grad_fn_name(), y.grad_fn_name());
        assert_eq!(x.version(), moved.version());
        Ok(())
    }

    #[test]
    fn a_dtype_change_on_the_same_device_is_a_recorded_copy() -> Result<()> {
        let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?.requires_grad_(true)?;
        let y = x.to_device_dtype(Device::Cpu, DType::F64)?;
        assert!(!y.shares_storage(&x));
        assert_eq!(y.dtype(), DType::F64);
        assert_eq!(y.grad_fn_name(), Some("ToCopyBackward0"));
        y.mul(&y)?.sum(None, false)?.backward()?;
        let g = x
            .grad()
            .expect("the gradient flows back through the conversion");
        assert_eq!(g.dtype(), DType::F32);
        assert_eq!(g.to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
        Ok(())
    }

    #[test]
    fn devices_without_a_backend_are_refused_before_anything_happens() -> Result<()> {
        let x = Tensor::ones(&[2], DType::F32)?;
        for device in [Device::Cuda(0), Device::Cuda(1), Device::Meta] {
            for r in [x.to_device(device), x.to_device_dtype(device, DType::F64)] {
                match r {
                    Err(Error::Unsupported { op: "to", message }) => {
                        assert!(message.contains(&device.to_string()), "{message}")
                    }
                    other => panic!("{device}: expected Unsupported from `to`, got {other:?}"),
                }
            }
        }
        assert_eq!(x.version(), 0);
        Ok(())
    }
}
