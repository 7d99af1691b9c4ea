//! Copies and fills: `copy_`, `deep_clone` (PyTorch's `clone`), `contiguous`, `to`, `fill_`,
//! `zero_`.

use crate::backend::for_device;
use crate::layout::order::infer_dense_strides;
use crate::layout::Layout;
use crate::op::OpContext;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::{DType, Device, Result, Scalar, Tensor};

/// Whether copying `src` into `x` would copy a tensor onto exactly itself (same memory,
/// layout and dtype): nothing to write, though it still counts as a write.
fn is_self_copy(x: &Tensor, src: &Tensor) -> bool {
    let (a, b) = (x.body(), src.body());
    a.storage.id() == b.storage.id() && a.layout == b.layout && x.dtype() == src.dtype()
}

/// Copies `src` (broadcast to `x`'s shape, converted to its dtype) into `x`.
pub(crate) fn copy_(ctx: &OpContext, x: &Tensor, src: &Tensor) -> Result<Tensor> {
    if is_self_copy(x, src) {
        x.bump_version(ctx.op());
        return Ok(x.clone());
    }
    let backend = for_device(x.device())?;
    let prepared = ElementwiseSpec::new(Output::Existing(x), vec![src]).infer(ctx.op())?;
    // SAFETY: `execute` locks the storages and passes a plan valid for them.
    prepared.execute(ctx, |plan| unsafe { backend.copy(plan) })
}

/// Copies `src` into `x` without counting it as a write to `x`: for buffers a kernel
/// updates on the side, as PyTorch's CPU batch norm updates its running statistics.
pub(crate) fn copy_unversioned(ctx: &OpContext, x: &Tensor, src: &Tensor) -> Result<Tensor> {
    let backend = for_device(x.device())?;
    let prepared = ElementwiseSpec::new(Output::Existing(x), vec![src])
        .infer(ctx.op())?
        .without_version_bump();
    // SAFETY: `execute` locks the storages and passes a plan valid for them.
    prepared.execute(ctx, |plan| unsafe { backend.copy(plan) })
}

/// The version a copy of `src` starts at. PyTorch makes `clone`, `contiguous` and `to` by
/// filling a new tensor with an in-place `copy_`, which the layer above the kernels normally hides.
/// For an inference tensor outside inference mode that layer is skipped, so the write counts
/// and the copy (a normal tensor) starts at version 1. Inside inference mode the copy is an
/// inference tensor, which has no version counter.
fn count_inference_copy(src: &Tensor, copy: Tensor) -> Tensor {
    if src.is_inference() && !copy.is_inference() {
        copy.bump_version("copy_");
    }
    copy
}

/// A new tensor with a copy of `x`'s data: a dense layout keeps its strides; any other
/// keeps its dimension order with dense strides.
pub(crate) fn deep_clone(ctx: &OpContext, x: &Tensor) -> Result<Tensor> {
    let l = x.layout();
    let strides = if l.is_non_overlapping_and_dense() {
        l.strides().to_vec()
    } else {
        infer_dense_strides(l.sizes(), l.strides())
    };
    let copy = x.copy_into_new(ctx, Layout::new(l.sizes().to_vec(), strides, 0), x.dtype())?;
    Ok(count_inference_copy(x, copy))
}

/// `x` itself when it is already contiguous, else a contiguous copy.
pub(crate) fn contiguous(ctx: &OpContext, x: &Tensor) -> Result<Tensor> {
    if x.is_contiguous() {
        return Ok(x.clone());
    }
    Ok(count_inference_copy(x, x.contiguous_copy(ctx)?))
}

/// `x` converted to `dtype`: itself when the dtype already matches, else a copy that keeps
/// a dense layout's strides (and any other layout's memory order).
pub(crate) fn to(ctx: &OpContext, x: &Tensor, dtype: DType) -> Result<Tensor> {
    if dtype == x.dtype() {
        return Ok(x.clone());
    }
    Ok(count_inference_copy(
        x,
        x.copy_into_new(ctx, converted_layout(x), dtype)?,
    ))
}

/// The layout of a converted copy of `x`, as PyTorch's: a dense layout's strides are kept,
/// and any other layout's memory order is kept in dense strides.
pub(crate) fn converted_layout(x: &Tensor) -> Layout {
    let l = x.layout();
    let strides = if l.is_non_overlapping_and_dense() {
        l.strides().to_vec()
    } else {
        infer_dense_strides(l.sizes(), l.strides())
    };
    Layout::new(l.sizes().to_vec(), strides, 0)
}

/// `x` moved to the meta device as `dtype`: a new meta tensor with the layout [`to`] gives a
/// converted copy. Nothing is read.
pub(crate) fn to_meta(ctx: &OpContext, x: &Tensor, dtype: DType) -> Result<Tensor> {
    Tensor::uninit_with_layout(ctx, converted_layout(x), dtype, Device::Meta)
}

/// Sets every element of `x` to `value` (converted to its dtype; a value that overflows it
/// is refused).
pub(crate) fn fill_(ctx: &OpContext, x: &Tensor, value: Scalar) -> Result<Tensor> {
    value.check_fill(ctx.op(), x.dtype(), x.numel())?;
    let backend = for_device(x.device())?;
    let prepared = ElementwiseSpec::new(Output::Existing(x), vec![]).infer_fill(ctx.op())?;
    // SAFETY: `execute` locks the storage and passes a plan valid for it.
    prepared.execute(ctx, |plan| unsafe { backend.fill(plan, value) })
}

impl Tensor {
    /// A contiguous copy of this tensor, made within op `ctx`.
    pub(crate) fn contiguous_copy(&self, ctx: &OpContext) -> Result<Tensor> {
        self.copy_into_new(ctx, Layout::contiguous(&self.shape(), 0), self.dtype())
    }

    /// A copy of this tensor with `layout` and `dtype`, made within op `ctx`.
    pub(crate) fn copy_into_new(
        &self,
        ctx: &OpContext,
        layout: Layout,
        dtype: DType,
    ) -> Result<Tensor> {
        let backend = for_device(self.device())?;
        let prepared = ElementwiseSpec::new(Output::NewWithLayout(dtype, layout), vec![self])
            .infer(ctx.op())?;
        // SAFETY: `execute` locks the storages and passes a plan valid for them.
        prepared.execute(ctx, |plan| unsafe { backend.copy(plan) })
    }
}
