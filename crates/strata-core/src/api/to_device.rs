//! Moving a tensor to another device: PyTorch's `.to(device)` and `.to(device, dtype)`.

use super::entry::Entry;
use crate::autograd::formulas::copy as grad;
use crate::backend::check_device;
use crate::op::OpContext;
use crate::ops::copy as fwd;
use crate::ops::transfer;
use crate::routing::{pinned_host_allocator, with_device_allocator};
use crate::{DType, Device, Error, Result, Tensor};
use std::sync::Arc;
use strata_alloc::DeviceAllocator;

impl Tensor {
    /// This tensor in pinned host memory: PyTorch's `t.pin_memory()`. A pinned tensor is
    /// returned as it is; another CPU tensor is copied ([`Tensor::deep_clone`]'s layout) into
    /// memory from [`routing::pinned_host_allocator`](crate::routing::pinned_host_allocator),
    /// from which device copies can run without waiting. Only CPU tensors can be pinned.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::ones(&[256], DType::F32)?;
    /// let p = x.pin_memory()?;
    /// assert!(p.is_pinned() && !x.is_pinned());
    /// assert!(p.pin_memory()?.is_same(&p));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn pin_memory(&self) -> Result<Tensor> {
        if self.is_pinned() {
            return Ok(self.clone());
        }
        if self.device() != Device::Cpu {
            return Err(Error::argument(
                "pin_memory",
                format!(
                    "only CPU tensors can be pinned; this one is on {}",
                    self.device()
                ),
                Some("pin a CPU tensor (pinned memory is host memory)"),
            ));
        }
        let pinned: Arc<dyn DeviceAllocator> = pinned_host_allocator().clone();
        with_device_allocator(Device::Cpu, &pinned, || self.deep_clone())
    }

    /// Whether this tensor's memory is pinned host memory (PyTorch's `t.is_pinned()`).
    pub fn is_pinned(&self) -> bool {
        self.body()
            .storage
            .allocator()
            .is_some_and(|a| a.is_pinned())
    }

    /// This tensor on `device`: PyTorch's `t.to(device)`. On its own device it is this very
    /// tensor (the same handle, as PyTorch's `.to` returns `self`); otherwise a copy on
    /// `device`, through which gradients flow back to this tensor.
    ///
    /// Any tensor can move to [`Device::Meta`] (keeping its layout rules, reading nothing);
    /// a meta tensor cannot move anywhere else, having no values. Between the host and a
    /// CUDA device the copy waits until it is done (see
    /// [`Tensor::to_device_non_blocking`]); a device this build or machine cannot use
    /// ([`Device::Cuda`] without a driver or GPU) is an error saying why.
    ///
    /// ```
    /// use strata_core::{DType, Device, Tensor};
    /// let x = Tensor::ones(&[2, 2], DType::F32)?;
    /// assert!(x.to_device(Device::Cpu)?.is_same(&x));
    /// if !strata_core::cuda::is_available() {
    ///     assert!(x.to_device(Device::Cuda(0)).unwrap_err().to_string().contains("CUDA"));
    /// }
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
        self.moved(device, dtype, false)
    }

    /// This tensor on `device` without waiting for the copy where that is safe: PyTorch's
    /// `t.to(device, non_blocking=True)`.
    ///
    /// - From pinned host memory ([`Tensor::pin_memory`]) to a CUDA device, the copy is
    ///   queued on the current stream ([`crate::cuda::current_stream`]) and this returns at
    ///   once; the pinned block is not reused until the copy has read it, even if the source
    ///   is dropped. Writing the source before then races with the copy, as in PyTorch.
    /// - From a CUDA device to the host, the result is a new pinned tensor, filled by a
    ///   queued copy; anything that reads or writes it waits for the copy first.
    /// - Otherwise (pageable host memory, a conversion, meta) it is [`Tensor::to_device`].
    ///
    /// ```
    /// use strata_core::{DType, Device, Tensor};
    /// let x = Tensor::ones(&[4], DType::F32)?.pin_memory()?;
    /// // On the same device, the tensor itself.
    /// assert!(x.to_device_non_blocking(Device::Cpu)?.is_same(&x));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn to_device_non_blocking(&self, device: Device) -> Result<Tensor> {
        self.moved(device, self.dtype(), true)
    }

    /// This tensor in host memory: PyTorch's `t.cpu()` ([`Tensor::to_device`] to
    /// [`Device::Cpu`]; a CPU tensor is returned as it is).
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::ones(&[2], DType::F32)?;
    /// assert!(x.cpu()?.is_same(&x));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn cpu(&self) -> Result<Tensor> {
        self.to_device(Device::Cpu)
    }

    /// The move behind [`Tensor::to_device_dtype`] and
    /// [`Tensor::to_device_non_blocking`].
    #[track_caller]
    fn moved(&self, device: Device, dtype: DType, non_blocking: bool) -> Result<Tensor> {
        let from = self.device();
        if device == from {
            return self.to(dtype);
        }
        let ctx = OpContext::enter("to");
        check_device(device, ctx.op())?;
        check_device(from, ctx.op())?;
        if from == Device::Meta {
            return Err(Error::Unsupported {
                op: ctx.op(),
                message: format!(
                    "cannot copy a meta tensor to {device}: it has no values (shape {:?})",
                    self.shape()
                ),
            });
        }
        drop(ctx);
        if device == Device::Meta {
            // To meta from a device with data: a tensor of the same layout rules as a copy,
            // recorded as `ToCopyBackward0`; nothing is read.
            return Entry::new("to", &[self])?.run(
                |ctx, x| fwd::to_meta(ctx, x[0], dtype),
                |ctx, x, out| grad::copy(ctx, "ToCopyBackward0", x[0], out),
            );
        }
        // Between devices with memory: the gradient goes back to this tensor's device.
        Entry::new("to", &[self])?.run(
            |ctx, x| transfer::to_other_device(ctx, x[0], device, dtype, non_blocking),
            |ctx, x, out| grad::to_device(ctx, x[0], out),
        )
    }

    /// Marks this CUDA tensor's memory as used by `stream` (PyTorch's
    /// `t.record_stream(s)`): when the tensor is freed, its block is not reused until the
    /// work queued on `stream` by then has completed, so a stream other than the one it was
    /// allocated on may keep reading it. Without this, a block freed while a side stream
    /// still reads it can be handed to the next allocation of its own stream at once.
    ///
    /// An error for a tensor that is not on `stream`'s device, or whose memory is not from
    /// the device's caching allocator.
    #[cfg(feature = "cuda")]
    pub fn record_stream(&self, stream: &crate::cuda::Stream) -> Result<()> {
        let storage = self.body().storage;
        let refuse = |why: String| {
            Err(Error::argument(
                "record_stream",
                why,
                Some("record a stream of the tensor's own CUDA device"),
            ))
        };
        if storage.device() != stream.device() {
            return refuse(format!(
                "the tensor is on {}, the stream on {}",
                storage.device(),
                stream.device()
            ));
        }
        if storage.nbytes() == 0 {
            return Ok(());
        }
        match storage.record_stream(stream.id()) {
            true => Ok(()),
            false => refuse(format!(
                "the tensor's memory on {} does not come from a caching allocator with streams",
                storage.device()
            )),
        }
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
        for device in [Device::Cuda(0), Device::Cuda(1)] {
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

    #[test]
    fn to_meta_keeps_layout_and_graph_and_meta_cannot_come_back() -> Result<()> {
        let x = Tensor::ones(&[2, 3], DType::F32)?.requires_grad_(true)?;
        let m = x.t()?.to_device(Device::Meta)?;
        assert_eq!((m.device(), m.shape().to_vec()), (Device::Meta, vec![3, 2]));
        assert_eq!(m.stride(), vec![1, 3]);
        assert_eq!(m.grad_fn_name(), Some("ToCopyBackward0"));
        let h = m.to_device_dtype(Device::Meta, DType::F16)?;
        assert_eq!(h.dtype(), DType::F16);
        for r in [
            m.to_device(Device::Cpu),
            m.to_device_dtype(Device::Cpu, DType::F64),
        ] {
            assert!(matches!(r, Err(Error::Unsupported { op: "to", .. })));
        }
        assert!(m.to_vec::<f32>().is_err() && m.item::<f32>().is_err());
        Ok(())
    }
}
