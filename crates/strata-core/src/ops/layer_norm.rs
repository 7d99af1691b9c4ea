//! The fused layer norm over contiguous rows of f32 or f64: the outputs are allocated here,
//! through the op, and the kernels run on the operands' backend
//! ([`crate::backend::Backend::layer_norm_forward`]). Where the backend has no fused layer
//! norm, or the dtypes are not one floating dtype, these answer `None` before allocating
//! anything, and the caller composes the result from other ops.

use crate::backend::args::{LayerNormArgs, LayerNormBackwardArgs};
use crate::backend::for_device;
use crate::layout::Layout;
use crate::op::OpContext;
use crate::storage::{lock_storages, Access, StorageGuards};
use crate::tensor::Body;
use crate::{DType, Result, Tensor};

/// Rows shorter than this are reduced with PyTorch's scalar Welford update, in its order;
/// longer rows take the mean and variance accumulated in f64 (which round differently from
/// PyTorch's vectorised Welford by an ulp at most, invisible after normalisation except in
/// rows so short that the gradient is mostly cancellation). The fused kernel and the
/// composed path both follow it.
pub(crate) const SCALAR_MOMENTS_BELOW: usize = 8;

/// Whether the fused kernels take `x` with these parameters: f32 or f64 throughout, one
/// device, a backend that has them.
fn fused(x: &Tensor, params: &[Option<&Tensor>]) -> Result<bool> {
    let (dt, dev) = (x.dtype(), x.device());
    let same = params
        .iter()
        .flatten()
        .all(|p| p.dtype() == dt && p.device() == dev);
    Ok(matches!(dt, DType::F32 | DType::F64)
        && same
        && x.numel() > 0
        && for_device(dev)?.fused_layer_norm())
}

/// A new contiguous tensor of `shape` like `x`'s dtype and device, allocated by the op.
fn fresh(ctx: &OpContext, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    Tensor::uninit_with_layout(ctx, Layout::contiguous(shape, 0), x.dtype(), x.device())
}

/// The address of `body`'s first element under `guards`.
fn read(guards: &StorageGuards<'_>, body: &Body, esize: usize) -> *const u8 {
    guards
        .read_ptr(&body.storage)
        .wrapping_add(body.layout.offset() * esize)
}

/// The writable address of `body`'s first element under `guards`.
fn write(guards: &StorageGuards<'_>, body: &Body, esize: usize) -> *mut u8 {
    guards
        .write_ptr(&body.storage)
        .wrapping_add(body.layout.offset() * esize)
}

/// `(y, mean, rstd)` of `x` normalised over its last `count` elements (`stats_shape` the
/// shape of the statistics: `x`'s with the normalised dimensions 1), or `None` when the
/// fused kernel does not take these operands.
pub(crate) fn forward(
    ctx: &OpContext,
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    count: usize,
    stats_shape: &[usize],
    eps: f64,
) -> Result<Option<(Tensor, Tensor, Tensor)>> {
    if count == 0 || !fused(x, &[weight, bias])? {
        return Ok(None);
    }
    let backend = for_device(x.device())?;
    let x = x.contiguous()?;
    let weight = weight.map(Tensor::contiguous).transpose()?;
    let bias = bias.map(Tensor::contiguous).transpose()?;
    let y = fresh(ctx, &x, &x.shape())?;
    let mean = fresh(ctx, &x, stats_shape)?;
    let rstd = fresh(ctx, &x, stats_shape)?;
    let esize = x.dtype().size();
    let (xb, yb, mb, sb) = (x.body(), y.body(), mean.body(), rstd.body());
    let (wb, bb) = (
        weight.as_ref().map(Tensor::body),
        bias.as_ref().map(Tensor::body),
    );
    let mut locks = vec![
        (&*xb.storage, Access::Read),
        (&*yb.storage, Access::Write),
        (&*mb.storage, Access::Write),
        (&*sb.storage, Access::Write),
    ];
    locks.extend(wb.iter().chain(&bb).map(|b| (&*b.storage, Access::Read)));
    let guards = lock_storages(&locks);
    let args = LayerNormArgs {
        dtype: x.dtype(),
        x: read(&guards, &xb, esize),
        weight: wb
            .as_ref()
            .map_or(std::ptr::null(), |b| read(&guards, b, esize)),
        bias: bb
            .as_ref()
            .map_or(std::ptr::null(), |b| read(&guards, b, esize)),
        y: write(&guards, &yb, esize),
        mean: write(&guards, &mb, esize),
        rstd: write(&guards, &sb, esize),
        rows: x.numel() / count,
        cols: count,
        eps,
        welford: count < SCALAR_MOMENTS_BELOW,
    };
    // SAFETY: `x` is contiguous with `rows·count` elements from its offset; `y`, `mean` and
    // `rstd` are fresh contiguous tensors of `rows·count`, `rows` and `rows` elements, which
    // nothing else holds; the weight and bias are contiguous with `count` elements each
    // (their shape is the normalised shape, checked by the caller); every storage is locked
    // until `guards` drops.
    let done = unsafe { backend.layer_norm_forward(&args) };
    drop(guards);
    Ok(done.then_some((y, mean, rstd)))
}

/// The gradients `(dx, dweight, dbias)` of a fused layer norm, each when asked for, from
/// the saved input `x`, its `mean` and `rstd`, and the output's gradient `grad` (`param_shape`
/// the normalised shape); `None` when the fused kernel does not take these operands.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward(
    ctx: &OpContext,
    x: &Tensor,
    grad: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    weight: Option<&Tensor>,
    param_shape: &[usize],
    need: [bool; 3],
) -> Result<Option<[Option<Tensor>; 3]>> {
    let count: usize = param_shape.iter().product();
    let stats = [Some(grad), Some(mean), Some(rstd), weight];
    if count == 0 || grad.shape() != x.shape() || !fused(x, &stats)? {
        return Ok(None);
    }
    let backend = for_device(x.device())?;
    let (x, grad) = (x.contiguous()?, grad.contiguous()?);
    let (mean, rstd) = (mean.contiguous()?, rstd.contiguous()?);
    let weight = weight.map(Tensor::contiguous).transpose()?;
    let dx = need[0].then(|| fresh(ctx, &x, &x.shape())).transpose()?;
    let dw = need[1].then(|| fresh(ctx, &x, param_shape)).transpose()?;
    let db = need[2].then(|| fresh(ctx, &x, param_shape)).transpose()?;
    let esize = x.dtype().size();
    let reads: Vec<Body> = [&x, &grad, &mean, &rstd]
        .into_iter()
        .chain(weight.as_ref())
        .map(Tensor::body)
        .collect();
    let writes: [Option<Body>; 3] = [&dx, &dw, &db].map(|t| t.as_ref().map(Tensor::body));
    let mut locks: Vec<_> = reads.iter().map(|b| (&*b.storage, Access::Read)).collect();
    locks.extend(
        writes
            .iter()
            .flatten()
            .map(|b| (&*b.storage, Access::Write)),
    );
    let guards = lock_storages(&locks);
    let out = |i: usize| {
        writes[i]
            .as_ref()
            .map_or(std::ptr::null_mut(), |b| write(&guards, b, esize))
    };
    let args = LayerNormBackwardArgs {
        dtype: x.dtype(),
        x: read(&guards, &reads[0], esize),
        grad: read(&guards, &reads[1], esize),
        mean: read(&guards, &reads[2], esize),
        rstd: read(&guards, &reads[3], esize),
        weight: reads
            .get(4)
            .map_or(std::ptr::null(), |b| read(&guards, b, esize)),
        dx: out(0),
        dweight: out(1),
        dbias: out(2),
        rows: x.numel() / count,
        cols: count,
    };
    // SAFETY: every operand is contiguous from its offset with the extents the kernel reads
    // (`x` and `grad` `rows·count` elements, `mean` and `rstd` `rows`, the weight `count`);
    // the outputs are fresh contiguous tensors nothing else holds; every storage is locked
    // until `guards` drops.
    let done = unsafe { backend.layer_norm_backward(&args) };
    drop(guards);
    Ok(done.then_some([dx, dw, db]))
}
