//! Backward of the joining ops: `cat` and `stack`.

use super::{record, Grads};
use crate::op::OpContext;
use crate::{Result, Tensor};

/// Records `out = cat(inputs, dim)` (`stack` when `stacked`).
pub(crate) fn cat(
    ctx: &OpContext,
    inputs: &[&Tensor],
    dim: i64,
    stacked: bool,
    out: &Tensor,
) -> Result<()> {
    let sizes: Vec<usize> = inputs
        .iter()
        .map(|t| {
            let n = t.dim() as i64;
            let d = if dim < 0 { dim + n } else { dim };
            if stacked || t.dim() == 0 {
                1
            } else {
                t.shape().get(d.max(0) as usize).copied().unwrap_or(0)
            }
        })
        .collect();
    let name = if stacked {
        "StackBackward0"
    } else {
        "CatBackward0"
    };
    record(ctx, name, inputs, out, |_| {
        Ok(move |g: Tensor| -> Grads {
            let n = g.dim() as i64;
            let d = if dim < 0 { dim + n } else { dim };
            let mut start = 0i64;
            let mut grads = Vec::with_capacity(sizes.len());
            for &s in &sizes {
                let part = if stacked {
                    g.select(d, start)?
                } else {
                    g.narrow(d, start, s)?
                };
                grads.push(Some(part));
                start += s as i64;
            }
            Ok(grads)
        })
    })
}
