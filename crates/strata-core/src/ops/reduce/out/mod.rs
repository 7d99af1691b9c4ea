//! The `out=` forms of the reductions, with PyTorch's dtype rules: `sum`, `prod` and
//! `cumsum` compute in the output's dtype (each element converted to it first), `mean`,
//! `var`, `std` and `logsumexp` write any floating dtype the result may be cast to, and the
//! others require the result's dtype exactly.
//!
//! Each is the out-of-place reduction with its destination swapped: the same folds fill the
//! same per-result accumulators, which are then written through the output's strides. An
//! output of the result's shape is written where it is and nothing is allocated; one of
//! another shape is resized first. The output's version goes up by one (each of the two
//! outputs of `max_dim_out`/`min_dim_out` by one), and the returned tensor is the output.
//!
//! These are the forms' infer and forward; the public methods are in `api/reduce_out.rs`,
//! whose entry refuses them when a gradient would have to be recorded.

use crate::op::OpContext;
use crate::ops::out::OutDType;
use crate::ops::reduce;
use crate::{DType, Error, Result, Tensor};

/// `sum` into `out`, computed in `out`'s dtype.
pub(crate) fn sum(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    out: &Tensor,
) -> Result<Tensor> {
    reduce::sum(ctx, x, dims, keepdim, Some(out))
}

/// `mean` into `out`, which must be floating (computed in its dtype).
pub(crate) fn mean(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    out: &Tensor,
) -> Result<Tensor> {
    OutDType::CastFrom(x.dtype()).check(ctx.op(), out)?;
    reduce::mean(ctx, x, dims, keepdim, Some(out))
}

/// `prod` into `out`, computed in `out`'s dtype.
pub(crate) fn prod(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    out: &Tensor,
) -> Result<Tensor> {
    reduce::prod(ctx, x, dims, keepdim, Some(out))
}

/// `amax` (`max`) or `amin` into `out`, which must have `x`'s dtype.
pub(crate) fn amax(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    max: bool,
    out: &Tensor,
) -> Result<Tensor> {
    OutDType::Exact(x.dtype()).check(ctx.op(), out)?;
    reduce::amax(ctx, x, dims, keepdim, max, Some(out))
}

/// `max_dim` (`max`) or `min_dim` into `values` (of `x`'s dtype) and `indices` (i64).
pub(crate) fn max_dim(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    keepdim: bool,
    max: bool,
    (values, indices): (&Tensor, &Tensor),
) -> Result<(Tensor, Tensor)> {
    OutDType::Exact(x.dtype()).check(ctx.op(), values)?;
    OutDType::Exact(DType::I64).check(ctx.op(), indices)?;
    reduce::max_dim(ctx, x, dim, keepdim, max, Some((values, indices)))
}

/// `argmax` (`max`) or `argmin` into `out`, which must be i64.
pub(crate) fn arg_index(
    ctx: &OpContext,
    x: &Tensor,
    dim: Option<i64>,
    keepdim: bool,
    max: bool,
    out: &Tensor,
) -> Result<Tensor> {
    OutDType::Exact(DType::I64).check(ctx.op(), out)?;
    reduce::arg_index(ctx, x, dim, keepdim, max, Some(out))
}

/// `var` (or `std` with `sqrt`) into `out`, which must be floating.
pub(crate) fn var(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[i64]>,
    correction: f64,
    keepdim: bool,
    sqrt: bool,
    out: &Tensor,
) -> Result<Tensor> {
    OutDType::CastFrom(x.dtype()).check(ctx.op(), out)?;
    reduce::var(ctx, x, dims, correction, keepdim, sqrt, Some(out))
}

/// `norm` into `out`, which must have `x`'s dtype.
pub(crate) fn norm(
    ctx: &OpContext,
    x: &Tensor,
    p: f64,
    dims: Option<&[i64]>,
    keepdim: bool,
    out: &Tensor,
) -> Result<Tensor> {
    OutDType::Exact(x.dtype()).check(ctx.op(), out)?;
    reduce::norm(ctx, x, p, dims, keepdim, Some(out))
}

/// `logsumexp` into `out`, which may have any floating dtype.
pub(crate) fn logsumexp(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    out: &Tensor,
) -> Result<Tensor> {
    if !out.dtype().is_floating() {
        return Err(Error::dtype(
            ctx.op(),
            format!(
                "the output must be floating to hold a logsumexp, got {}",
                out.dtype()
            ),
            Some("pass an f32 or f64 output"),
        ));
    }
    reduce::logsumexp(ctx, x, dims, keepdim, Some(out))
}

/// `cumsum` into `out` (of `x`'s shape), computed in `out`'s dtype.
pub(crate) fn cumsum(ctx: &OpContext, x: &Tensor, dim: i64, out: &Tensor) -> Result<Tensor> {
    reduce::cumsum(ctx, x, dim, Some(out))
}

#[cfg(test)]
mod tests;
