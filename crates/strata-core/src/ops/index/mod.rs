//! Masked and indexed writes: `masked_fill` (also in place and into a given tensor) and
//! `index_add_`; and, in `gather`, the indexed reads `index_select`, `gather` and
//! `scatter_add` (with their `out=` forms in `out`).

pub(crate) mod gather;
pub(crate) mod out;
#[cfg(test)]
mod tests;

use crate::backend::kernel::TernaryOp;
use crate::backend::{for_device, Backend, Plan};
use crate::dtype::cast;
use crate::layout::broadcast::broadcast_shapes;
use crate::layout::Layout;
use crate::op::OpContext;
use crate::ops::binary::{binary_inplace, BinaryOp, Other};
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::ops::out::expect_dtype;
use crate::ops::views::dim_arg;
use crate::tensor::{index_elements, ViewCreation};
use crate::{DType, Error, Result, Scalar, Tensor};

/// `value` where the mask is set, else the input: operands (out, input, mask), in `dtype`.
fn masked_fill_kernel(backend: &dyn Backend, plan: &Plan, value: Scalar, dtype: DType) {
    // SAFETY: `plan` comes from `Prepared::execute`, which holds the locks.
    unsafe { backend.ternary(plan, TernaryOp::MaskedFill(value), dtype) }
}

fn check_mask(op: &'static str, mask: &Tensor) -> Result<()> {
    if mask.dtype() != DType::Bool {
        return Err(Error::dtype(
            op,
            format!("the mask must be a bool tensor, got {}", mask.dtype()),
            Some("build the mask with a comparison (x.gt(0)) or convert with .to(DType::Bool)"),
        ));
    }
    Ok(())
}

/// The integer indices of an index tensor, checked against a dimension's size.
fn indices(op: &'static str, index: &Tensor, dim: usize, size: usize) -> Result<Vec<usize>> {
    if !matches!(index.dtype(), DType::I64 | DType::I32) {
        return Err(Error::dtype(
            op,
            format!("indices must be i64 or i32, got {}", index.dtype()),
            Some("convert the index with .to(DType::I64)"),
        ));
    }
    if index.dim() > 1 {
        return Err(Error::shape(
            op,
            format!(
                "the index must be 0-d or 1-d, got shape {:?}",
                index.shape()
            ),
            vec![index.shape().to_vec()],
        ));
    }
    index_elements(op, index)?
        .into_iter()
        .map(|i| {
            // As PyTorch, negative indices do not count from the end here.
            let j = i;
            if j < 0 || j >= size as i64 {
                Err(Error::Index {
                    op,
                    index: i,
                    dim,
                    size,
                })
            } else {
                Ok(j as usize)
            }
        })
        .collect()
}

/// `x.masked_fill(mask, value)` into a new contiguous tensor.
pub(crate) fn masked_fill(
    ctx: &OpContext,
    x: &Tensor,
    mask: &Tensor,
    value: Scalar,
) -> Result<Tensor> {
    check_mask(ctx.op(), mask)?;
    let backend = for_device(x.device())?;
    value.check_fits(ctx.op(), x.dtype())?;
    // As PyTorch: broadcast both, copy x contiguously, then fill in place (an internal write:
    // the result's version stays 0, as in PyTorch).
    let shape = broadcast_shapes(&x.shape(), &mask.shape()).map_err(|m| {
        Error::shape(
            ctx.op(),
            m.describe(),
            vec![x.shape().to_vec(), mask.shape().to_vec()],
        )
    })?;
    let result = x.expand_to(&shape)?.contiguous_copy(ctx)?;
    ElementwiseSpec::new(Output::Existing(&result), vec![&result, mask])
        .infer(ctx.op())?
        .without_version_bump()
        .execute(ctx, |plan| {
            masked_fill_kernel(backend, plan, value, x.dtype())
        })
}

/// `x.masked_fill(mask, value)` written into `out`, which must have `x`'s dtype.
pub(crate) fn masked_fill_out(
    ctx: &OpContext,
    x: &Tensor,
    mask: &Tensor,
    value: Scalar,
    out: &Tensor,
) -> Result<Tensor> {
    check_mask(ctx.op(), mask)?;
    let backend = for_device(x.device())?;
    expect_dtype(ctx.op(), out, x.dtype())?;
    ElementwiseSpec::new(Output::Out(out), vec![x, mask])
        .infer(ctx.op())?
        .execute(ctx, |plan| {
            masked_fill_kernel(backend, plan, value, x.dtype())
        })
}

/// `value` written into `x` where `mask` is true, in place.
pub(crate) fn masked_fill_(
    ctx: &OpContext,
    x: &Tensor,
    mask: &Tensor,
    value: Scalar,
) -> Result<Tensor> {
    check_mask(ctx.op(), mask)?;
    let backend = for_device(x.device())?;
    value.check_fits(ctx.op(), x.dtype())?;
    // As PyTorch, an expanded (self-overlapping) tensor may be filled: the elements sharing
    // memory are written in order.
    ElementwiseSpec::new(Output::Existing(x), vec![x, mask])
        .infer_fill(ctx.op())?
        .execute(ctx, |plan| {
            masked_fill_kernel(backend, plan, value, x.dtype())
        })
}

/// `x[index[i]] += alpha * source[i]` along `dim`, in place.
pub(crate) fn index_add_(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    source: &Tensor,
    alpha: Scalar,
) -> Result<Tensor> {
    let op = ctx.op();
    let ndim = x.dim();
    let d = dim_arg(op, dim, ndim)?;
    if source.dtype() != x.dtype() {
        return Err(Error::dtype(
            op,
            format!("self is {} but source is {}", x.dtype(), source.dtype()),
            Some("convert source with .to(self.dtype())"),
        ));
    }
    let (shape, src_shape) = (x.shape().to_vec(), source.shape().to_vec());
    let self_size = if ndim == 0 { 1 } else { shape[d] };
    let idx = indices(op, index, d, self_size)?;
    let src_len = if src_shape.is_empty() {
        1
    } else {
        src_shape[d.min(src_shape.len() - 1)]
    };
    let same_rank = src_shape.len() == ndim || (ndim <= 1 && src_shape.len() <= 1);
    let others_match = (0..ndim).all(|k| k == d || src_shape.get(k) == shape.get(k));
    if !same_rank || !others_match || src_len != idx.len() {
        return Err(Error::shape(
            op,
            format!(
                "source of shape {src_shape:?} does not fit self of shape {shape:?} with {} \
                 indices along dimension {d}",
                idx.len()
            ),
            vec![shape.clone(), src_shape.clone()],
        )
        .with_hint("source must match self in every dimension except dim, where its size is the number of indices"));
    }
    if !alpha_fits(alpha, x.dtype()) {
        return Err(Error::dtype(
            op,
            format!("alpha {} does not fit dtype {}", alpha.to_f64(), x.dtype()),
            Some("use an integer alpha for integer tensors"),
        ));
    }
    // Validate the destination once (overlap) before writing anything.
    ElementwiseSpec::new(Output::Existing(x), vec![]).infer(op)?;
    index_add_rows(ctx, x, d, &idx, source, alpha)?;
    // One op, one version step, however many rows were written.
    x.bump_version(ctx.op());
    Ok(x.clone())
}

/// Adds `alpha * source`'s slice `i` along `d` to `x`'s slice `idx[i]`, for every `i`,
/// without counting the writes as version steps.
fn index_add_rows(
    ctx: &OpContext,
    x: &Tensor,
    d: usize,
    idx: &[usize],
    source: &Tensor,
    alpha: Scalar,
) -> Result<()> {
    let (op, ndim) = (ctx.op(), x.dim());
    for (i, &j) in idx.iter().enumerate() {
        let (dst, src) = if ndim == 0 {
            (x.clone(), source.clone())
        } else {
            let dst_l = x.layout();
            let src_l = source.layout();
            (
                x.make_view(op, select_layout(&dst_l, d, j), ViewCreation::Plain),
                source.make_view(op, select_layout(&src_l, d, i), ViewCreation::Plain),
            )
        };
        binary_inplace(ctx, &dst, Other::Tensor(&src), BinaryOp::Add(alpha), false)?;
    }
    Ok(())
}

fn alpha_fits(alpha: Scalar, dtype: DType) -> bool {
    dtype.is_floating() || !matches!(alpha, Scalar::Float(f) if cast::<f64, i64>(f) as f64 != f)
}

fn select_layout(l: &Layout, d: usize, i: usize) -> Layout {
    let mut sizes = l.sizes().to_vec();
    let mut strides = l.strides().to_vec();
    let offset = l.offset() + i * strides[d];
    sizes.remove(d);
    strides.remove(d);
    Layout::new(sizes, strides, offset)
}
