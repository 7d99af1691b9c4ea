//! `batch_norm`, as one node that saves the input, the weight and the per-channel mean and
//! reciprocal standard deviation (as PyTorch's `native_batch_norm`).

use super::check::{floating, shape};
use crate::api::entry::Entry;
use crate::api::ternary::fused_mul_add;
use crate::autograd::formulas::{record, take, Grads};
use crate::op::OpContext;
use crate::ops::batch_norm as fused_passes;
use crate::ops::copy::copy_unversioned;
use crate::{DType, Error, Result, Tensor};

/// PyTorch's `F.batch_norm`: `x` (`[N, C, ...]`) normalised per channel (dimension 1) over
/// every other dimension, then scaled by `weight` and shifted by `bias` (`[C]` each) when
/// given.
///
/// In training mode it uses the batch's mean and biased variance, and updates
/// `running_mean` and `running_var` in place (`r = (1 - momentum)·r + momentum·s`, with the
/// unbiased variance) without counting a version step, as PyTorch's CPU kernel does. In eval
/// mode it uses the running statistics, which must then be given. An f16 or bf16 input with
/// f32 weight and statistics is computed in f32 and returned in its own dtype.
///
/// ```
/// use strata_core::nn::functional::batch_norm;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 5.0], &[2, 2])?;
/// let (mean, var) = (Tensor::zeros(&[2], DType::F32)?, Tensor::ones(&[2], DType::F32)?);
/// let y = batch_norm(&x, Some(&mean), Some(&var), None, None, true, 0.5, 0.0)?;
/// for (got, want) in y.to_vec::<f32>()?.into_iter().zip([-1.0, -1.0, 1.0, 1.0]) {
///     assert!((got - want).abs() < 1e-6);
/// }
/// assert_eq!(mean.to_vec::<f32>()?, vec![1.0, 1.75]);
/// assert_eq!(var.to_vec::<f32>()?, vec![1.5, 2.75]); // unbiased: 2 and 4.5
/// assert_eq!(mean.version(), 0);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn batch_norm(
    x: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Result<Tensor> {
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let stats = Stats {
        running_mean,
        running_var,
        training,
        momentum,
        eps,
    };
    Entry::new("batch_norm", &inputs)?
        .run(
            |ctx, t| {
                let (w, b) = (has_w.then(|| t[1]), has_b.then(|| t[1 + has_w as usize]));
                forward(ctx, t[0], w, b, &stats)
            },
            |ctx, t, (out, mean, invstd)| {
                backward(ctx, t, has_w, has_b, training, (out, mean, invstd))
            },
        )
        .map(|(out, ..)| out)
}

/// The running statistics and the mode.
struct Stats<'a> {
    running_mean: Option<&'a Tensor>,
    running_var: Option<&'a Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
}

/// The dtype statistics are computed in for an input of `dtype`.
fn acc_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// Checks the operands; returns the channel count and the number of values per channel.
fn check(
    op: &'static str,
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    stats: &Stats<'_>,
) -> Result<(usize, usize)> {
    floating(op, "the input", x)?;
    let xs = x.shape().to_vec();
    if xs.len() < 2 {
        return Err(shape(
            op,
            format!("the input must be [N, C, ...], got shape {xs:?}"),
            vec![xs],
            "batch norm normalises each channel (dimension 1) over the batch",
        ));
    }
    let c = xs[1];
    let per_channel = xs.iter().product::<usize>() / c.max(1);
    let acc = acc_dtype(x.dtype());
    let params = [
        ("the weight", weight),
        ("the bias", bias),
        ("running_mean", stats.running_mean),
        ("running_var", stats.running_var),
    ];
    for (what, t) in params {
        let Some(t) = t else { continue };
        if t.dtype() != x.dtype() && t.dtype() != acc {
            return Err(Error::dtype(
                op,
                format!("{what} is {} but the input is {}", t.dtype(), x.dtype()),
                Some("keep the parameters and statistics in the input's dtype (or f32 for a half input)"),
            ));
        }
        if t.shape().as_slice() != [c] {
            return Err(shape(
                op,
                format!(
                    "{what} must have shape [{c}] (one per channel), got {:?}",
                    t.shape()
                ),
                vec![t.shape().to_vec(), xs.clone()],
                "give one value per channel of dimension 1",
            ));
        }
    }
    if !stats.training && (stats.running_mean.is_none() || stats.running_var.is_none()) {
        return Err(Error::argument(
            op,
            "eval mode needs running_mean and running_var",
            Some("pass the running statistics, or use training mode"),
        ));
    }
    if stats.training && per_channel <= 1 {
        return Err(shape(
            op,
            format!("training needs more than 1 value per channel, got input {xs:?}"),
            vec![xs],
            "use a batch of more than one sample (or eval mode)",
        ));
    }
    if !stats.eps.is_finite() || stats.eps < 0.0 || !stats.momentum.is_finite() {
        return Err(Error::argument(
            op,
            format!(
                "eps ({}) must be finite and non-negative and momentum ({}) finite",
                stats.eps, stats.momentum
            ),
            Some("the usual values are eps=1e-5 and momentum=0.1"),
        ));
    }
    Ok((c, per_channel))
}

/// The normalised `x`, and the per-channel mean and `1/sqrt(var + eps)` used (shaped
/// `[1, C, 1, ..]`, in the statistics' dtype).
fn forward(
    ctx: &OpContext,
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    stats: &Stats<'_>,
) -> Result<(Tensor, Tensor, Tensor)> {
    let op = ctx.op();
    let (c, per_channel) = check(op, x, weight, bias, stats)?;
    let acc = acc_dtype(x.dtype());
    let fused = fused_passes::fused(x, &[weight, bias, stats.running_mean, stats.running_var])?;
    let xa = x.to(acc)?;
    let dims = reduced_dims(x.dim());
    let bshape = broadcast_shape(x.dim(), c);
    let (mean, invstd) = if stats.training {
        let (mean, var) = if fused {
            let fresh = || Tensor::on(x.device()).empty(&bshape, acc);
            let (mean, var) = (fresh()?, fresh()?);
            fused_passes::moments(x, &mean, &var)?;
            (mean, var)
        } else {
            (xa.mean_over(&dims, true)?, xa.var_over(&dims, 0.0, true)?)
        };
        let invstd = var.add(stats.eps)?.rsqrt()?;
        let m = stats.momentum;
        if let Some(rm) = stats.running_mean {
            let new = rm
                .to(acc)?
                .mul(1.0 - m)?
                .add(&mean.reshape_to(&[c])?.mul(m)?)?;
            copy_unversioned(ctx, rm, &new)?;
        }
        if let Some(rv) = stats.running_var {
            let unbiased = var
                .reshape_to(&[c])?
                .mul(per_channel as f64 / (per_channel - 1) as f64)?;
            let new = rv.to(acc)?.mul(1.0 - m)?.add(&unbiased.mul(m)?)?;
            copy_unversioned(ctx, rv, &new)?;
        }
        (mean, invstd)
    } else {
        let (rm, rv) = match (stats.running_mean, stats.running_var) {
            (Some(rm), Some(rv)) => (rm, rv),
            _ => unreachable_stats(op)?,
        };
        let mean = rm.to(acc)?.reshape_to(&bshape)?;
        let invstd = rv.to(acc)?.add(stats.eps)?.rsqrt()?.reshape_to(&bshape)?;
        (mean, invstd)
    };
    // As PyTorch's kernel: y = x·alpha + beta with alpha = invstd·w, beta = b - mean·alpha.
    let alpha = match weight {
        Some(w) => invstd.mul(&w.to(acc)?.reshape_to(&bshape)?)?,
        None => invstd.clone(),
    };
    let shift = mean.mul(&alpha)?.neg()?;
    let beta = match bias {
        Some(b) => shift.add(&b.to(acc)?.reshape_to(&bshape)?)?,
        None => shift,
    };
    if fused {
        let y = Tensor::on(x.device()).empty(x.shape().as_slice(), x.dtype())?;
        fused_passes::affine(x, &alpha, &beta, None, &y)?;
        return Ok((y, mean, invstd));
    }
    let y = fused_mul_add(&xa, &alpha, &beta)?
        .to(x.dtype())?
        .contiguous()?;
    Ok((y, mean, invstd))
}

/// Eval mode without statistics is refused by `check`; this keeps the match total.
fn unreachable_stats<T>(op: &'static str) -> Result<T> {
    Err(Error::argument(
        op,
        "eval mode needs running_mean and running_var",
        None,
    ))
}

/// The most bytes of `a·b` that [`sum_of_products`] holds at once (4 MiB).
const PRODUCT_BUDGET_BYTES: usize = 4 << 20;

/// `Σ a·b` over `dims` (every dimension but 1, kept), a slice of the batch at a time so that
/// the product never needs more than [`PRODUCT_BUDGET_BYTES`] (at least one sample's worth).
fn sum_of_products(a: &Tensor, b: &Tensor, dims: &[usize]) -> Result<Tensor> {
    let n = a.shape()[0];
    let per_sample = (a.numel() / n.max(1)) * a.dtype().size();
    let step = (PRODUCT_BUDGET_BYTES / per_sample.max(1)).clamp(1, n.max(1));
    if step >= n {
        return a.mul(b)?.sum_over(dims, true);
    }
    let mut total: Option<Tensor> = None;
    for first in (0..n).step_by(step) {
        let len = step.min(n - first);
        let part = a
            .narrow(0, first as i64, len)?
            .mul(&b.narrow(0, first as i64, len)?)?
            .sum_over(dims, true)?;
        total = Some(match total {
            Some(t) => t.add(&part)?,
            None => part,
        });
    }
    match total {
        Some(t) => Ok(t),
        None => a.mul(b)?.sum_over(dims, true),
    }
}

/// Every dimension but 1.
fn reduced_dims(ndim: usize) -> Vec<usize> {
    (0..ndim).filter(|&d| d != 1).collect()
}

/// `[1, C, 1, ..]` for an input of `ndim` dimensions.
fn broadcast_shape(ndim: usize, c: usize) -> Vec<usize> {
    (0..ndim).map(|d| if d == 1 { c } else { 1 }).collect()
}

/// Records `out = batch_norm(inputs)` (the input, then the weight and the bias when given),
/// normalised with `mean` and `invstd`.
fn backward(
    ctx: &OpContext,
    inputs: &[&Tensor],
    has_w: bool,
    has_b: bool,
    training: bool,
    (out, mean, invstd): (&Tensor, &Tensor, &Tensor),
) -> Result<()> {
    let x = inputs[0];
    let weight = has_w.then(|| inputs[1]);
    let (ndim, dtype) = (x.dim(), x.dtype());
    let c = x.shape()[1];
    let count = x.numel() / c.max(1);
    let w_dtype = weight.map(|w| w.dtype());
    let b_dtype = inputs.last().map(|b| b.dtype());
    let fused = fused_passes::fused(
        x,
        &inputs[1..].iter().copied().map(Some).collect::<Vec<_>>(),
    )?;
    record(ctx, "NativeBatchNormBackward0", inputs, out, |rec| {
        let need_x = rec.needs(0);
        let need_w = has_w && rec.needs(1);
        let need_b = has_b && rec.needs(1 + has_w as usize);
        let sx = rec.save_if(need_w || (need_x && training), x)?;
        let smean = rec.save_if(need_w || (need_x && training), mean)?;
        let sinv = rec.save(invstd)?;
        let sw = match weight {
            Some(w) if need_x => Some(rec.save(w)?),
            _ => None,
        };
        Ok(move |g: Tensor| -> Grads {
            let acc = acc_dtype(dtype);
            let dims = reduced_dims(ndim);
            let bshape = broadcast_shape(ndim, c);
            let invstd = sinv.get()?;
            let w = sw.as_ref().map(|w| w.get()).transpose()?;
            // The per-channel factor of the gradient: invstd·w.
            let scale = |invstd: &Tensor| match &w {
                Some(w) => invstd.mul(&w.to(acc)?.reshape_to(&bshape)?),
                None => Ok(invstd.clone()),
            };
            if fused && (need_w || (need_x && training)) {
                return fused_backward(FusedBackward {
                    g: g.contiguous()?,
                    x: take(&sx)?,
                    mean: take(&smean)?,
                    invstd: &invstd,
                    scale: need_x.then(|| scale(&invstd)).transpose()?.as_ref(),
                    count,
                    training,
                    wanted: [need_x, need_w, need_b],
                    present: [has_w, has_b],
                });
            }
            let ga = g.to(acc)?;
            let sum_g = ga.sum_over(&dims, true)?;
            // x - mean, the one full-size temporary besides the result (it becomes the
            // result when the input needs a gradient in training mode).
            let centred = if need_w || (need_x && training) {
                Some(take(&sx)?.to(acc)?.sub(&take(&smean)?)?)
            } else {
                None
            };
            // Σ gy·(x - mean) per channel.
            let dotp = match &centred {
                Some(xmu) => Some(sum_of_products(&ga, xmu, &dims)?),
                None => None,
            };
            let mut grads = Vec::with_capacity(3);
            if need_x {
                let scale = scale(&invstd)?;
                let gx = match (&centred, &dotp) {
                    (Some(xmu), Some(dotp)) if training => {
                        // dx = (gy - Σgy/n - (x - mean)·Σgy(x - mean)·invstd²/n)·invstd·w,
                        // as (x - mean)·(-k·scale) - (Σgy/n)·scale + gy·scale, written into
                        // the centred input in place.
                        let k = dotp.mul(&invstd)?.mul(&invstd)?.div(count as f64)?;
                        let shift = sum_g.div(count as f64)?.mul(&scale)?.neg()?;
                        xmu.mul_(&k.mul(&scale)?.neg()?)?;
                        xmu.add_(&shift)?;
                        xmu.addcmul_out(&ga, &scale, 1.0, xmu)?
                    }
                    _ => ga.mul(&scale)?,
                };
                grads.push(Some(gx.to(dtype)?));
            } else {
                grads.push(None);
            }
            if let Some(w) = w_dtype {
                grads.push(match (&dotp, need_w) {
                    (Some(dotp), true) => Some(dotp.mul(&invstd)?.reshape_to(&[c])?.to(w)?),
                    _ => None,
                });
            }
            if has_b {
                grads.push(if need_b {
                    Some(sum_g.reshape_to(&[c])?.to(b_dtype.unwrap_or(acc))?)
                } else {
                    None
                });
            }
            Ok(grads)
        })
    })
}

/// What the fused backward takes.
struct FusedBackward<'a> {
    /// The output's gradient, contiguous.
    g: Tensor,
    /// The saved input and per-channel mean.
    x: Tensor,
    mean: Tensor,
    /// The per-channel `1/sqrt(var + eps)`, and `invstd·w` when the input needs a gradient.
    invstd: &'a Tensor,
    scale: Option<&'a Tensor>,
    /// Values per channel.
    count: usize,
    training: bool,
    /// Which gradients are wanted (input, weight, bias) and which parameters exist.
    wanted: [bool; 3],
    present: [bool; 2],
}

/// The backward as two fused passes: one reading the gradient and the input for each
/// channel's `Σ g` and `Σ g·(x - mean)`, one writing the input's gradient
/// `g·scale + x·p + q` (in training mode, with `p = -Σg(x - mean)·invstd²/n·scale` and
/// `q = -(Σg/n)·scale - mean·p`; in eval mode `g·scale`). Allocates the per-channel sums and
/// the input's gradient, nothing full-sized besides.
fn fused_backward(b: FusedBackward<'_>) -> Grads {
    let fresh = || Tensor::on(b.x.device()).empty(b.invstd.shape().as_slice(), b.x.dtype());
    let (sum_g, dotp) = (fresh()?, fresh()?);
    fused_passes::grad_sums(&b.g, &b.x, &b.mean, &sum_g, &dotp)?;
    let gx = match b.scale.filter(|_| b.wanted[0]) {
        Some(scale) if b.training => {
            let n = b.count as f64;
            let k = dotp.mul(b.invstd)?.mul(b.invstd)?.div(n)?;
            let p = k.mul(scale)?.neg()?;
            let q = sum_g.div(n)?.mul(scale)?.neg()?.sub(&b.mean.mul(&p)?)?;
            let gx = Tensor::on(b.x.device()).empty(b.x.shape().as_slice(), b.x.dtype())?;
            fused_passes::affine(&b.x, &p, &q, Some((&b.g, scale)), &gx)?;
            Some(gx)
        }
        Some(scale) => Some(b.g.mul(scale)?),
        None => None,
    };
    let mut grads = vec![gx];
    grads.extend(param_grads(&b, &sum_g, &dotp)?);
    Ok(grads)
}

/// The weight's and the bias's gradients (for those that exist) from the per-channel sums.
fn param_grads(b: &FusedBackward<'_>, sum_g: &Tensor, dotp: &Tensor) -> Grads {
    let [_, need_w, need_b] = b.wanted;
    let [has_w, has_b] = b.present;
    let c = b.x.shape()[1];
    let mut grads = Vec::with_capacity(2);
    if has_w {
        grads.push(
            need_w
                .then(|| dotp.mul(b.invstd)?.reshape_to(&[c]))
                .transpose()?,
        );
    }
    if has_b {
        grads.push(need_b.then(|| sum_g.reshape_to(&[c])).transpose()?);
    }
    Ok(grads)
}
