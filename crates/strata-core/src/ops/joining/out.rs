//! The `out=` forms of the joining ops: `cat_out` and `stack_out`.
//!
//! Each runs the out-of-place op's own copies with the output as their destination, written
//! through the output's strides: an output of the result's shape is written where it is and
//! nothing is allocated; one of another shape is resized first (contiguous, or channels-last
//! for a `cat` of channels-last inputs, as PyTorch does). As PyTorch, the output may share no
//! memory with the inputs, and the promoted result is converted to any dtype that can hold
//! it. The output's version goes up by one and the output is returned.

use super::{check_addressable, check_stack, copy_regions, parallel_writes, Cat};
use crate::backend::for_device;
use crate::op::OpContext;
use crate::ops::out::{written, Aliasing, OutDType, OutTarget};
use crate::ops::promote::{result_type, Arg};
use crate::{Result, Tensor};

/// `cat(tensors, dim)` written into `out`.
pub(crate) fn cat_out(
    ctx: &OpContext,
    tensors: &[&Tensor],
    dim: i64,
    out: &Tensor,
) -> Result<Tensor> {
    let c = Cat::infer(ctx.op(), tensors, dim)?;
    let dtype = OutDType::CastFrom(c.dtype);
    // A resized output takes the strides a new result would have, as PyTorch's does.
    let out = OutTarget::check(ctx.op(), out, &c.sizes, dtype, tensors, Aliasing::Disjoint)?
        .resize_strided(ctx, c.strides.clone())?;
    copy_regions(
        for_device(out.device())?,
        tensors,
        &out,
        &c.regions(&out.stride()),
        parallel_writes(&out),
    );
    Ok(written(ctx.op(), &out))
}

/// `stack(tensors, dim)` written into `out`: each input copied into its slice along `dim`.
pub(crate) fn stack_out(
    ctx: &OpContext,
    tensors: &[&Tensor],
    dim: i64,
    out: &Tensor,
) -> Result<Tensor> {
    let (shape, d) = check_stack(ctx.op(), tensors, dim)?;
    let dtype = result_type(&tensors.iter().map(|t| Arg::Tensor(t)).collect::<Vec<_>>());
    OutDType::CastFrom(dtype).check(ctx.op(), out)?;
    let mut sizes = shape;
    sizes.insert(d, tensors.len());
    check_addressable(ctx.op(), &sizes, dtype)?;
    let out = OutTarget::check(
        ctx.op(),
        out,
        &sizes,
        OutDType::Any,
        tensors,
        Aliasing::Disjoint,
    )?
    .resize(ctx)?;
    let mut strides = out.stride();
    let step = strides.remove(d);
    let regions: Vec<(usize, usize, Vec<usize>)> = (0..tensors.len())
        .map(|i| (i, i * step, strides.clone()))
        .collect();
    copy_regions(
        for_device(out.device())?,
        tensors,
        &out,
        &regions,
        parallel_writes(&out),
    );
    Ok(written(ctx.op(), &out))
}
