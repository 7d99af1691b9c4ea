//! Backward of `roll`: the gradient rolled back by the opposite shifts. Nothing is saved.

use super::record;
use crate::layout::wrap_dim;
use crate::op::OpContext;
use crate::{Result, Tensor};

/// Records `out = roll(x, shifts, dims)`.
pub(crate) fn roll(
    ctx: &OpContext,
    shifts: &[i64],
    dims: &[i64],
    x: &Tensor,
    out: &Tensor,
) -> Result<()> {
    // Each shift reduced modulo its dimension's size first, so that negating it cannot
    // overflow (the forward has checked the dims).
    let size = |k: usize| match dims.get(k) {
        None => x.numel() as i64,
        Some(&d) => wrap_dim(d, x.dim()).map_or(0, |d| x.shape()[d] as i64),
    };
    let back: Vec<i64> = shifts
        .iter()
        .enumerate()
        .map(|(k, s)| match size(k) {
            0 => 0,
            n => -(s % n),
        })
        .collect();
    let dims = dims.to_vec();
    record(ctx, "RollBackward0", &[x], out, |_| {
        Ok(move |g: Tensor| Ok(vec![Some(g.roll(&back, &dims)?)]))
    })
}
