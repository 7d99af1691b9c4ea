//! Moving values between devices with memory (the host and CUDA devices): the forward of
//! `to_device` when the devices differ. The copy has `to`'s layout (a dense layout's strides,
//! else its memory order in dense strides) and converts the dtype on the way.
//!
//! Non-blocking copies (PyTorch's `non_blocking=True`) are queued on the current stream
//! when the host side is pinned and the bytes move as they are: from a pinned source, whose
//! block is then not reused before the copy completes; to the host, into a new pinned
//! tensor, which every read waits for. Anything else waits, as in PyTorch.

use crate::op::OpContext;
use crate::{DType, Device, Error, Result, Tensor};

/// `x` (on a device with memory) copied to `device` (another one) as `dtype`.
pub(crate) fn to_other_device(
    ctx: &OpContext,
    x: &Tensor,
    device: Device,
    dtype: DType,
    non_blocking: bool,
) -> Result<Tensor> {
    match (x.device(), device) {
        #[cfg(feature = "cuda")]
        (Device::Cpu, Device::Cuda(to)) => cuda::upload(ctx, x, to, dtype, non_blocking),
        #[cfg(feature = "cuda")]
        (Device::Cuda(from), Device::Cpu) => cuda::download(ctx, x, from, dtype, non_blocking),
        #[cfg(feature = "cuda")]
        (Device::Cuda(from), Device::Cuda(to)) => {
            // Between two GPUs through host memory: no peer copies in this part.
            let host = cuda::download(ctx, x, from, x.dtype(), false)?;
            cuda::upload(ctx, &host, to, dtype, false)
        }
        (from, to) => {
            let _ = (dtype, non_blocking);
            Err(Error::Unsupported {
                op: ctx.op(),
                message: format!("cannot copy a tensor from {from} to {to}"),
            })
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use crate::backend::cuda::transfer::{self, Direction};
    use crate::ops::copy::converted_layout;
    use crate::ops::iter::{ElementwiseSpec, Output};
    use crate::routing::{pinned_host_allocator, with_device_allocator};
    use crate::storage::Storage;
    use std::sync::Arc;
    use strata_alloc::{DeviceAllocator, HostEvent};

    /// `x` (host memory) on CUDA device `index` as `dtype`.
    pub(super) fn upload(
        ctx: &OpContext,
        x: &Tensor,
        index: usize,
        dtype: DType,
        non_blocking: bool,
    ) -> Result<Tensor> {
        let out = Tensor::uninit_with_layout(ctx, converted_layout(x), dtype, Device::Cuda(index))?;
        let queued = non_blocking && x.is_pinned();
        let source = x.body().storage;
        // The pinned block is not reused until the copy reading it completes.
        copy(ctx, x, &out, index, Direction::ToDevice, queued, |e| {
            hold(&source, e)
        })?;
        Ok(out)
    }

    /// `x` (on CUDA device `index`) in host memory as `dtype`: pinned when `non_blocking`.
    pub(super) fn download(
        ctx: &OpContext,
        x: &Tensor,
        index: usize,
        dtype: DType,
        non_blocking: bool,
    ) -> Result<Tensor> {
        let layout = converted_layout(x);
        let out = if non_blocking {
            let pinned: Arc<dyn DeviceAllocator> = pinned_host_allocator().clone();
            with_device_allocator(Device::Cpu, &pinned, || {
                Tensor::uninit_with_layout(ctx, layout, dtype, Device::Cpu)
            })?
        } else {
            Tensor::uninit_with_layout(ctx, layout, dtype, Device::Cpu)?
        };
        let queued = non_blocking && out.is_pinned();
        let storage = out.body().storage;
        // Every read or write of the result waits for the copy, and its block is not
        // reused before it completes.
        copy(ctx, x, &out, index, Direction::ToHost, queued, |e| {
            hold(&storage, e.clone());
            storage.set_pending(e);
        })?;
        Ok(out)
    }

    /// Records `event` on `storage`'s pinned block, or, where its allocator keeps no host
    /// events, waits for it: the copy never runs on memory that could be reused under it.
    fn hold(storage: &Storage, event: HostEvent) {
        if !storage.record_host_event(&event) {
            if let Err(e) = event.wait() {
                crate::kernel_error::fail(Error::Unsupported {
                    op: "to",
                    message: e,
                });
            }
        }
    }

    /// Copies `x` into the new `out` across devices, `queued` where it can be (see
    /// [`transfer::copy`]); a queued copy's event goes to `attach` before anything else can
    /// fail, so the host memory it uses is always held.
    fn copy(
        ctx: &OpContext,
        x: &Tensor,
        out: &Tensor,
        index: usize,
        direction: Direction,
        queued: bool,
        attach: impl FnOnce(HostEvent),
    ) -> Result<()> {
        let mut event = None;
        let ran = ElementwiseSpec::new(Output::Existing(out), vec![x])
            .infer(ctx.op())
            .and_then(|p| {
                p.without_version_bump().execute(ctx, |plan| {
                    // SAFETY: `execute` locks both storages and passes a plan valid for
                    // them, each operand in the memory `direction` names; a queued copy's
                    // host side is pinned and held by its event (below) until the copy
                    // completes.
                    event = unsafe { transfer::copy(index, plan, direction, queued) }
                })
            });
        if let Some(e) = event {
            attach(e);
        }
        crate::kernel_error::take()?;
        ran.map(drop)
    }
}
