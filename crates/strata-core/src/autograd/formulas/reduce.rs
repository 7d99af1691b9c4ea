//! Backward of the reductions and `cumsum`.

use super::{expand_back, keep_dims, record, reduced_dims, sign, take, Grads};
use crate::layout::int_arg::IntArg;
use crate::layout::wrap_dim;
use crate::op::OpContext;
use crate::{Result, Tensor};

/// Which reduction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Reduce {
    Sum,
    Mean,
    Prod,
    Amax,
    Amin,
    Logsumexp,
    Var(f64),
    Std(f64),
    Norm(f64),
}

fn name(r: Reduce) -> &'static str {
    match r {
        Reduce::Sum => "SumBackward1",
        Reduce::Mean => "MeanBackward1",
        Reduce::Prod => "ProdBackward1",
        Reduce::Amax => "AmaxBackward0",
        Reduce::Amin => "AminBackward0",
        Reduce::Logsumexp => "LogsumexpBackward0",
        Reduce::Var(_) => "VarBackward0",
        Reduce::Std(_) => "StdBackward0",
        Reduce::Norm(_) => "NormBackward1",
    }
}

/// Records `out = r(x, dims, keepdim)`.
pub(crate) fn reduction<D: IntArg>(
    ctx: &OpContext,
    r: Reduce,
    x: &Tensor,
    dims: Option<&[D]>,
    keepdim: bool,
    out: &Tensor,
) -> Result<()> {
    if !x.dtype().is_floating() {
        return Ok(());
    }
    let shape = x.shape();
    let rd = reduced_dims(dims, shape.len());
    let count: usize = rd.iter().map(|&d| shape[d]).product();
    record(ctx, name(r), &[x], out, |rec| {
        let sx = match r {
            Reduce::Sum | Reduce::Mean => None,
            _ => Some(rec.save(x)?),
        };
        let so = match r {
            Reduce::Amax | Reduce::Amin | Reduce::Logsumexp | Reduce::Std(_) | Reduce::Norm(_) => {
                Some(rec.save(out)?)
            }
            _ => None,
        };
        Ok(move |g: Tensor| -> Grads {
            let ge = expand_back(&g, &shape, &rd, keepdim)?;
            let gx = match r {
                Reduce::Sum => ge,
                Reduce::Mean => ge.div(count as f64)?,
                Reduce::Prod => prod_grad(&g, &take(&sx)?, &rd, keepdim)?,
                Reduce::Amax | Reduce::Amin => {
                    let (x, y) = (take(&sx)?, take(&so)?);
                    let hit = x.eq(&keep_dims(&y, &rd, keepdim)?)?.to(g.dtype())?;
                    let n = hit.sum_over(&rd, true)?;
                    ge.mul(&hit)?.div(&n)?
                }
                Reduce::Logsumexp => {
                    let (x, y) = (take(&sx)?, take(&so)?);
                    ge.mul(&x.sub(&keep_dims(&y, &rd, keepdim)?)?.exp()?)?
                }
                Reduce::Var(c) => {
                    let x = take(&sx)?;
                    let dev = x.sub(&x.mean_over(&rd, true)?)?;
                    ge.mul(&dev)?.mul(2.0 / (count as f64 - c))?
                }
                Reduce::Std(c) => {
                    let (x, y) = (take(&sx)?, take(&so)?);
                    let dev = x.sub(&x.mean_over(&rd, true)?)?;
                    let s = keep_dims(&y, &rd, keepdim)?;
                    ge.mul(&dev)?.div(&s.mul(count as f64 - c)?)?
                }
                Reduce::Norm(p) => {
                    let (x, y) = (take(&sx)?, take(&so)?);
                    norm_grad(&ge, &x, &keep_dims(&y, &rd, keepdim)?, p, &rd)?
                }
            };
            Ok(vec![Some(gx)])
        })
    })
}

/// d prod / d x_i = the product of the others in x_i's group: `prod / x_i` where the group
/// has no zero; at a group's only zero, the product of the rest; 0 everywhere else. The
/// same steps run whatever the values, so backward allocates alike for any data (and the
/// meta device, which has none, predicts it).
fn prod_grad(g: &Tensor, x: &Tensor, rd: &[usize], keepdim: bool) -> Result<Tensor> {
    let shape = x.shape();
    let ge = expand_back(g, &shape, rd, keepdim)?;
    let is_zero = x.eq(0i64)?;
    let zeros = is_zero.sum_over(rd, true)?.expand_to(&shape)?;
    let one = Tensor::on(x.device()).scalar(1i64, x.dtype())?;
    let nonzero = Tensor::where_cond(&is_zero, &one, x)?;
    let rest = nonzero.prod_over(rd, true)?.expand_to(&shape)?;
    let zero = super::zero(x)?;
    let at_only_zero = Tensor::where_cond(&is_zero, &rest, &zero)?;
    let others = Tensor::where_cond(
        &zeros.eq(0i64)?,
        &rest.div(&nonzero)?,
        &Tensor::where_cond(&zeros.eq(1i64)?, &at_only_zero, &zero)?,
    )?;
    ge.mul(&others)
}

fn norm_grad(ge: &Tensor, x: &Tensor, n: &Tensor, p: f64, dims: &[usize]) -> Result<Tensor> {
    // The gradient is taken as 0 where the norm is 0.
    let zero_where_norm_is_zero = |q: Tensor| -> Result<Tensor> {
        let at_zero = n.eq(0i64)?.expand_to(&x.shape())?;
        Tensor::where_cond(&at_zero, &super::zero(x)?, &q)
    };
    if p == 2.0 {
        return ge.mul(&zero_where_norm_is_zero(x.div(n)?)?);
    }
    if p == 1.0 {
        return ge.mul(&sign(x)?);
    }
    if p.is_infinite() {
        let hit = x.abs()?.eq(n)?.to(x.dtype())?;
        let count = hit.sum_over(dims, true)?;
        return ge.mul(&sign(x)?)?.mul(&hit)?.div(&count);
    }
    if p == 0.0 {
        return ge.mul(0i64);
    }
    // x |x|^(p-2) / norm^(p-1)
    let num = x.mul(&x.abs()?.pow(p - 2.0)?)?;
    ge.mul(&zero_where_norm_is_zero(num.div(&n.pow(p - 1.0)?)?)?)
}

/// Records `out = max/min(x, dim)` (the values; indices carry no gradient).
pub(crate) fn arg_reduction(
    ctx: &OpContext,
    max: bool,
    x: &Tensor,
    dim: i64,
    keepdim: bool,
    values: &Tensor,
    indices: &Tensor,
) -> Result<()> {
    if !x.dtype().is_floating() || x.dim() == 0 {
        if x.dim() == 0 {
            return super::copy::copy(ctx, "MaxBackward0", x, values);
        }
        return Ok(());
    }
    let shape = x.shape();
    let Some(d) = wrap_dim(dim, shape.len()) else {
        return Ok(());
    };
    let name = if max { "MaxBackward0" } else { "MinBackward0" };
    record(ctx, name, &[x], values, |rec| {
        let idx = rec.save(indices)?;
        Ok(move |g: Tensor| -> Grads {
            let gk = keep_dims(&g, &[d], keepdim)?;
            let ik = keep_dims(&idx.get()?, &[d], keepdim)?;
            let zeros = Tensor::on(g.device()).zeros(&shape, g.dtype())?;
            Ok(vec![Some(zeros.scatter_add(d as i64, &ik, &gk)?)])
        })
    })
}

/// Records `out = cumsum(x, dim)`.
pub(crate) fn cumsum(ctx: &OpContext, x: &Tensor, dim: i64, out: &Tensor) -> Result<()> {
    if !x.dtype().is_floating() {
        return Ok(());
    }
    record(ctx, "CumsumBackward0", &[x], out, |_| {
        Ok(move |g: Tensor| -> Grads {
            if g.dim() == 0 {
                return Ok(vec![Some(g)]);
            }
            // Element i receives the sum of g over positions >= i.
            let total = g.sum(Some(&[dim]), true)?;
            Ok(vec![Some(total.sub(&g.cumsum(dim)?)?.add(&g)?)])
        })
    })
}
