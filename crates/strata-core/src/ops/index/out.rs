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
use crate::ops::out::{written, Aliasing, OutDType, OutTarget};
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
    let dtype = OutDType::Exact(x.dtype());
    let out = OutTarget::check(
        ctx.op(),
        out,
        &sel.shape,
        dtype,
        &[x, index],
        Aliasing::Disjoint,
    )?
    .resize(ctx)?;
    sel.execute(
        for_device(x.device())?,
        x,
        index,
        &out,
        parallel_writes(&out),
    );
    Ok(written(ctx.op(), &out))
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
    let dtype = OutDType::Exact(x.dtype());
    let out = OutTarget::check(
        ctx.op(),
        out,
        &g.shape,
        dtype,
        &[x, index],
        Aliasing::Disjoint,
    )?
    .resize(ctx)?;
    g.execute(
        for_device(x.device())?,
        x,
        index,
        &out,
        parallel_writes(&out),
    );
    Ok(written(ctx.op(), &out))
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
    let dtype = OutDType::Exact(x.dtype());
    let out = OutTarget::check(
        ctx.op(),
        out,
        &x.shape(),
        dtype,
        &[index, src],
        Aliasing::Disjoint,
    )?
    .and_inputs(ctx.op(), &[x], Aliasing::Exact)?
    .resize(ctx)?;
    let is_self = out.storage_id() == x.storage_id() && out.layout() == x.layout();
    sc.execute(for_device(x.device())?, x, index, src, &out, !is_self);
    Ok(written(ctx.op(), &out))
}
