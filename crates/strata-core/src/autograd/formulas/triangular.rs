//! Backward of `triu` and `tril`: the same triangle of the gradient. Nothing is saved.

use super::record;
use crate::op::OpContext;
use crate::{Result, Tensor};

/// `Tensor::triu` or `Tensor::tril`: a tensor and a diagonal offset to the kept triangle.
pub(crate) type KeepTriangle = fn(&Tensor, i64) -> Result<Tensor>;

/// Records `out = keep(x, diagonal)` under the node `name`, where `keep` is `Tensor::triu`
/// or `Tensor::tril`: the gradient is `keep(g, diagonal)`.
pub(crate) fn triangle(
    ctx: &OpContext,
    name: &'static str,
    keep: KeepTriangle,
    diagonal: i64,
    x: &Tensor,
    out: &Tensor,
) -> Result<()> {
    record(ctx, name, &[x], out, |_| {
        Ok(move |g: Tensor| Ok(vec![Some(keep(&g, diagonal)?)]))
    })
}
