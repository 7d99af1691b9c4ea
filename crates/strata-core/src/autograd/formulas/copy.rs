//! Backward of copies and conversions (`clone`, `contiguous`, `to`).

use super::{record, Grads};
use crate::op::OpContext;
use crate::{Result, Tensor};

/// Records a copy of `x` (`clone`, `contiguous`, `to`): the gradient passes through.
pub(crate) fn copy(ctx: &OpContext, name: &'static str, x: &Tensor, out: &Tensor) -> Result<()> {
    record(ctx, name, &[x], out, |_| {
        Ok(|g: Tensor| -> Grads { Ok(vec![Some(g)]) })
    })
}
