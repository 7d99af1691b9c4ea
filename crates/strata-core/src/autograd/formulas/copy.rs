//! Backward of copies and conversions (`clone`, `contiguous`, `to`) and of the in-place
//! writes `copy_`, `fill_` and `zero_`.

use super::index::{overwrite_begin, overwrite_finish, Overwrite};
use super::{record, Grads};
use crate::autograd::record::InplaceRecorder;
use crate::op::OpContext;
use crate::{Result, Tensor};

/// Records a copy of `x` (`clone`, `contiguous`, `to`): the gradient passes through.
pub(crate) fn copy(ctx: &OpContext, name: &'static str, x: &Tensor, out: &Tensor) -> Result<()> {
    record(ctx, name, &[x], out, |_| {
        Ok(|g: Tensor| -> Grads { Ok(vec![Some(g)]) })
    })
}

/// Records a move of `x` to another device with memory (`ToCopyBackward0`): the gradient
/// goes back to `x`'s device.
pub(crate) fn to_device(ctx: &OpContext, x: &Tensor, out: &Tensor) -> Result<()> {
    let device = x.device();
    record(ctx, "ToCopyBackward0", &[x], out, move |_| {
        Ok(move |g: Tensor| -> Grads { Ok(vec![Some(g.to_device(device)?)]) })
    })
}

/// Validates the write of `src` into `x` (`copy_`) and returns the recorder to finish
/// after it.
pub(crate) fn copy_inplace_begin(
    ctx: &OpContext,
    x: &Tensor,
    src: &Tensor,
) -> Result<Option<InplaceRecorder>> {
    overwrite_begin(ctx, x, &Overwrite::Copy(src))
}

/// Records the `copy_` of `src` that just happened: `src` gets the gradient, the old value
/// a zero one.
pub(crate) fn copy_inplace_finish(rec: InplaceRecorder, src: &Tensor) -> Result<()> {
    overwrite_finish(rec, Overwrite::Copy(src))
}

/// Validates the fill of `x` (`fill_`, `zero_`) and returns the recorder to finish after it.
pub(crate) fn fill_inplace_begin(ctx: &OpContext, x: &Tensor) -> Result<Option<InplaceRecorder>> {
    overwrite_begin(ctx, x, &Overwrite::Fill)
}

/// Records the fill that just happened: the old value gets a zero gradient.
pub(crate) fn fill_inplace_finish(rec: InplaceRecorder) -> Result<()> {
    overwrite_finish(rec, Overwrite::Fill)
}
