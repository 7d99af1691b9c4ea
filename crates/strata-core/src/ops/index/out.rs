//! The `out=` forms of the indexed ops: `index_select_out`, `gather_out` and
//! `scatter_add_out`.
//!
//! Each runs the out-of-place op's own kernel with the output as its destination, written
//! through the output's strides: an output of the result's shape is written where it is and
//! nothing is allocated; one of another shape is resized (contiguous) first. As PyTorch, the
//! output must have the input's dtype and may share no memory with the inputs
//! (`scatter_add_out` may write into `self` itself). The output's version goes up by one and
//! the output is returned.

use super::gather::{Gather, IndexSelect, ScatterAddPlan};
use crate::backend::for_device;
use crate::op::OpContext;
use crate::ops::joining::parallel_writes;
use crate::ops::out::{check_memory, expect_dtype, Aliasing};
use crate::{Result, Tensor};

/// `x.index_select(dim, index)` written into `out`.
pub(crate) fn index_select_out(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    out: &Tensor,
) -> Result<Tensor> {
    let sel = IndexSelect::infer(ctx.op(), x, dim, index)?;
    expect_dtype(ctx.op(), out, x.dtype())?;
    check_memory(ctx.op(), out, &sel.shape, &[x, index], Aliasing::Disjoint)?;
    out.resize_for_out(ctx, &sel.shape)?;
    sel.execute(for_device(x.device())?, x, index, out, parallel_writes(out));
    out.bump_version();
    Ok(out.clone())
}

/// `x.gather(dim, index)` written into `out`.
pub(crate) fn gather_out(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    out: &Tensor,
) -> Result<Tensor> {
    let g = Gather::infer(ctx.op(), x, dim, index)?;
    expect_dtype(ctx.op(), out, x.dtype())?;
    check_memory(ctx.op(), out, &g.shape, &[x, index], Aliasing::Disjoint)?;
    out.resize_for_out(ctx, &g.shape)?;
    g.execute(for_device(x.device())?, x, index, out, parallel_writes(out));
    out.bump_version();
    Ok(out.clone())
}

/// `x.scatter_add(dim, index, src)` written into `out` (which may be `x` itself).
pub(crate) fn scatter_add_out(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    src: &Tensor,
    out: &Tensor,
) -> Result<Tensor> {
    let sc = ScatterAddPlan::infer(ctx.op(), x, dim, index, src)?;
    expect_dtype(ctx.op(), out, x.dtype())?;
    let shape = x.shape();
    check_memory(ctx.op(), out, &shape, &[index, src], Aliasing::Disjoint)?;
    check_memory(ctx.op(), out, &shape, &[x], Aliasing::Exact)?;
    out.resize_for_out(ctx, &shape)?;
    let is_self = out.storage_id() == x.storage_id() && out.layout() == x.layout();
    sc.execute(for_device(x.device())?, x, index, src, out, !is_self);
    out.bump_version();
    Ok(out.clone())
}
