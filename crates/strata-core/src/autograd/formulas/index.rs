//! Backward of the indexed ops: `index_select`, `gather`, `scatter_add`, `masked_fill`,
//! `index_add_`, and of the in-place writes `copy_`, `fill_`, `zero_`.

use super::{record, Grads};
use crate::autograd::record::InplaceRecorder;
use crate::op::OpContext;
use crate::{Result, Scalar, Tensor};

/// Records `out = x.index_select(dim, index)`.
pub(crate) fn index_select(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    out: &Tensor,
) -> Result<()> {
    let shape = x.shape();
    record(ctx, "IndexSelectBackward0", &[x], out, |rec| {
        let idx = rec.save(index)?;
        Ok(move |g: Tensor| -> Grads {
            let z = Tensor::on(g.device()).zeros(&shape, g.dtype())?;
            let g = if g.dim() == 0 { g.reshape(&[1])? } else { g };
            let idx = idx.get()?.reshape(&[-1])?;
            if z.dim() == 0 {
                return Ok(vec![Some(g.reshape_to(&[])?)]);
            }
            z.index_add_(dim, &idx, &g, 1i64)?;
            Ok(vec![Some(z)])
        })
    })
}

/// Records `out = x.gather(dim, index)`.
pub(crate) fn gather(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    out: &Tensor,
) -> Result<()> {
    let shape = x.shape();
    record(ctx, "GatherBackward0", &[x], out, |rec| {
        let idx = rec.save(index)?;
        Ok(move |g: Tensor| -> Grads {
            let z = Tensor::on(g.device()).zeros(&shape, g.dtype())?;
            Ok(vec![Some(z.scatter_add(dim, &idx.get()?, &g)?)])
        })
    })
}

/// Records `out = x.scatter_add(dim, index, src)`.
pub(crate) fn scatter_add(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    src: &Tensor,
    out: &Tensor,
) -> Result<()> {
    record(ctx, "ScatterAddBackward0", &[x, src], out, |rec| {
        let nsrc = rec.needs(1);
        let idx = rec.save_if(nsrc, index)?;
        Ok(move |g: Tensor| -> Grads {
            let gs = if nsrc {
                Some(g.gather(dim, &super::take(&idx)?)?)
            } else {
                None
            };
            Ok(vec![Some(g), gs])
        })
    })
}

/// Records `out = x.masked_fill(mask, value)`.
pub(crate) fn masked_fill(ctx: &OpContext, x: &Tensor, mask: &Tensor, out: &Tensor) -> Result<()> {
    record(ctx, "MaskedFillBackward0", &[x], out, |rec| {
        let m = rec.save(mask)?;
        Ok(move |g: Tensor| -> Grads { Ok(vec![Some(g.masked_fill(&m.get()?, 0i64)?)]) })
    })
}

/// Prepares an in-place write that replaces `x`'s values without reading them (`fill_`,
/// `zero_`, `copy_(src)`, `masked_fill_`, `index_add_`).
pub(crate) enum Overwrite<'a> {
    /// Every element replaced by a constant.
    Fill,
    /// Every element replaced by `src`, broadcast.
    Copy(&'a Tensor),
    /// The masked elements replaced by a constant.
    MaskedFill(&'a Tensor),
    /// `alpha * src` added at `index` along `dim`.
    IndexAdd(i64, &'a Tensor, &'a Tensor, Scalar),
}

/// Validates the write and returns the recorder to finish after it.
pub(crate) fn overwrite_begin(
    ctx: &OpContext,
    x: &Tensor,
    w: &Overwrite<'_>,
) -> Result<Option<InplaceRecorder>> {
    let (name, others): (&'static str, Vec<&Tensor>) = match w {
        Overwrite::Fill => ("FillBackward0", vec![]),
        Overwrite::Copy(src) => ("CopyBackwards", vec![*src]),
        Overwrite::MaskedFill(_) => ("MaskedFillBackward0", vec![]),
        Overwrite::IndexAdd(_, _, src, _) => ("IndexAddBackward0", vec![*src]),
    };
    InplaceRecorder::begin(ctx, name, x, &others)
}

/// Records the write that just happened.
pub(crate) fn overwrite_finish(mut rec: InplaceRecorder, w: Overwrite<'_>) -> Result<()> {
    match w {
        // The overwritten values get a zero gradient (not none), as in PyTorch, so the
        // nodes that made them are still visited: their saved tensors are checked and freed.
        Overwrite::Fill => rec.finish(|g: Tensor| -> Grads {
            Ok(vec![Some(
                Tensor::on(g.device()).zeros(&g.shape(), g.dtype())?,
            )])
        }),
        Overwrite::Copy(_) => rec.finish(|g: Tensor| -> Grads {
            Ok(vec![
                Some(Tensor::on(g.device()).zeros(&g.shape(), g.dtype())?),
                Some(g),
            ])
        }),
        Overwrite::MaskedFill(mask) => {
            let m = rec.save(mask)?;
            rec.finish(move |g: Tensor| -> Grads {
                Ok(vec![Some(g.masked_fill(&m.get()?, 0i64)?)])
            })
        }
        Overwrite::IndexAdd(dim, index, _, alpha) => {
            let nsrc = rec.needs(1);
            let idx = rec.save_if(nsrc, index)?;
            rec.finish(move |g: Tensor| -> Grads {
                let gs = if nsrc {
                    let sel = if g.dim() == 0 {
                        g.clone()
                    } else {
                        g.index_select(dim, &super::take(&idx)?)?
                    };
                    Some(sel.mul(alpha)?)
                } else {
                    None
                };
                Ok(vec![Some(g), gs])
            })
        }
    }
    Ok(())
}
