//! Backward of `softmax` and `log_softmax`.

use super::{record, Grads};
use crate::op::OpContext;
use crate::{Result, Tensor};

/// Records `out = softmax(x, dim)` or `log_softmax`.
pub(crate) fn softmax(
    ctx: &OpContext,
    log: bool,
    x: &Tensor,
    dim: i64,
    out: &Tensor,
) -> Result<()> {
    let name = if log {
        "LogSoftmaxBackward0"
    } else {
        "SoftmaxBackward0"
    };
    record(ctx, name, &[x], out, |rec| {
        let y = rec.save(out)?;
        Ok(move |g: Tensor| -> Grads {
            let y = y.get()?;
            let dims = [dim];
            let gx = if log {
                g.sub(&y.exp()?.mul(&g.sum(Some(&dims), true)?)?)?
            } else {
                let gy = g.mul(&y)?;
                gy.sub(&y.mul(&gy.sum(Some(&dims), true)?)?)?
            };
            Ok(vec![Some(gx)])
        })
    })
}
