//! `layer_norm`, as one node that saves the input, the mean and the reciprocal standard
//! deviation (as PyTorch's `native_layer_norm`).

use super::check::{dtype_is, floating, shape};
use super::layer_norm_params::half_param_grads;
use crate::api::entry::Entry;
use crate::api::ternary::fused_mul_add;
use crate::autograd::formulas::{record, take, Grads};
use crate::op::OpContext;
use crate::ops::layer_norm::{self as layer_norm_kernel, SCALAR_MOMENTS_BELOW};
use crate::{DType, Result, Tensor};

/// Normalises `x` over its last dimensions, `normalized_shape`, to zero mean and unit
/// variance (biased, with `eps` added to it), then scales by `weight` and shifts by `bias`
/// (both of shape `normalized_shape`) when given (PyTorch's `F.layer_norm`). f16 and bf16
/// are computed in f32, and may come with f32 weight and bias; the result has the input's
/// dtype and is contiguous.
///
/// ```
/// use strata_core::nn::functional::layer_norm;
/// use strata_core::Tensor;
/// let x = Tensor::from_vec(vec![1.0f32, 3.0, 10.0, 20.0], &[2, 2])?;
/// let y = layer_norm(&x, &[2], None, None, 0.0)?;
/// for (got, want) in y.to_vec::<f32>()?.into_iter().zip([-1.0, 1.0, -1.0, 1.0]) {
///     assert!((got - want).abs() < 1e-6);
/// }
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn layer_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    Entry::new("layer_norm", &inputs)?
        .run(
            |ctx, t| {
                let (w, b) = (has_w.then(|| t[1]), has_b.then(|| t[1 + has_w as usize]));
                forward(ctx, t[0], normalized_shape, w, b, eps)
            },
            |ctx, t, (out, mean, rstd)| {
                backward(ctx, t, normalized_shape, has_w, has_b, (out, mean, rstd))
            },
        )
        .map(|(out, ..)| out)
}

/// The normalised `x`, and the mean and reciprocal standard deviation of its rows (in the
/// dtype the statistics are computed in, kept as size-1 dimensions).
fn forward(
    ctx: &OpContext,
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let op = ctx.op();
    floating(op, "the input", x)?;
    let xs = x.shape().to_vec();
    let k = normalized_shape.len();
    if k == 0 || k > xs.len() || xs[xs.len() - k..] != *normalized_shape {
        return Err(shape(
            op,
            format!("normalized_shape {normalized_shape:?} must be the last dimensions of the input {xs:?}"),
            vec![xs, normalized_shape.to_vec()],
            "pass the sizes of the trailing dimensions to normalise over, e.g. [hidden]",
        ));
    }
    for (what, t) in [("the weight", weight), ("the bias", bias)] {
        if let Some(t) = t {
            // A half-precision input may have f32 parameters (as in PyTorch, so that a
            // bf16-autocast model keeps f32 weights).
            let half_with_f32 =
                matches!(x.dtype(), DType::F16 | DType::BF16) && t.dtype() == DType::F32;
            if !half_with_f32 {
                dtype_is(op, what, t, x.dtype())?;
            }
            if t.shape().as_slice() != normalized_shape {
                return Err(shape(
                    op,
                    format!(
                        "{what} must have shape normalized_shape {normalized_shape:?}, got {:?}",
                        t.shape()
                    ),
                    vec![t.shape().to_vec(), normalized_shape.to_vec()],
                    "give one value per normalised element",
                ));
            }
        }
    }
    if !eps.is_finite() || eps < 0.0 {
        return Err(crate::Error::argument(
            op,
            format!("eps must be a finite non-negative number, got {eps}"),
            Some("the usual value is 1e-5"),
        ));
    }
    let dims: Vec<usize> = (xs.len() - k..xs.len()).collect();
    let count: usize = normalized_shape.iter().product();
    let mut stats_shape = xs.clone();
    stats_shape[xs.len() - k..].iter_mut().for_each(|s| *s = 1);
    // f32 and f64 on a backend with the fused kernel: one pass, rounded as below.
    if let Some(fused) = layer_norm_kernel::forward(ctx, x, weight, bias, count, &stats_shape, eps)?
    {
        return Ok(fused);
    }
    let xa = in_acc(x)?;
    let (mean, rstd) = moments(&xa, &dims, count, eps)?;
    // As PyTorch's kernel rounds it: (x - mean)·rstd, then one fused multiply-add for the
    // affine part.
    let t = xa.sub(&mean)?.mul(&rstd)?;
    let y = match (weight, bias) {
        (Some(w), Some(b)) => fused_mul_add(&t, w, b)?,
        (Some(w), None) => t.mul(w)?,
        (None, Some(b)) => t.add(b)?,
        (None, None) => t,
    };
    // PyTorch's result is always contiguous, whatever the input's layout.
    Ok((y.to(x.dtype())?.contiguous()?, mean, rstd))
}

/// Records `out = layer_norm(inputs)` (the input, then the weight and the bias when given),
/// whose rows had `mean` and `rstd`.
fn backward(
    ctx: &OpContext,
    inputs: &[&Tensor],
    normalized_shape: &[usize],
    has_w: bool,
    has_b: bool,
    (out, mean, rstd): (&Tensor, &Tensor, &Tensor),
) -> Result<()> {
    let x = inputs[0];
    let weight = has_w.then(|| inputs[1]);
    let w_dtype = weight.map(|w| w.dtype());
    let b_dtype = has_b.then(|| inputs[1 + has_w as usize].dtype());
    let xs = x.shape();
    let k = normalized_shape.len();
    let dims: Vec<usize> = (xs.len() - k..xs.len()).collect();
    let lead: Vec<usize> = (0..xs.len() - k).collect();
    let count: usize = normalized_shape.iter().product();
    record(ctx, "NativeLayerNormBackward0", inputs, out, |rec| {
        let need_x = rec.needs(0);
        let need_w = has_w && rec.needs(1);
        let need_b = has_b && rec.needs(1 + has_w as usize);
        let sx = rec.save_if(need_x || need_w, x)?;
        let smean = rec.save_if(need_x || need_w, mean)?;
        let srstd = rec.save_if(need_x || need_w, rstd)?;
        let x_dtype = x.dtype();
        let normalized_shape = normalized_shape.to_vec();
        let sw = match weight {
            Some(w) if need_x => Some(rec.save(w)?),
            _ => None,
        };
        Ok(move |g: Tensor| -> Grads {
            if need_x || need_w {
                let ctx = OpContext::enter("native_layer_norm_backward");
                let w = sw.as_ref().map(|w| w.get()).transpose()?;
                let (xs, mean, rstd) = (take(&sx)?, take(&smean)?, take(&srstd)?);
                let need = [need_x, need_w, need_b];
                if let Some(fused) = layer_norm_kernel::backward(
                    &ctx,
                    &xs,
                    &g,
                    &mean,
                    &rstd,
                    w.as_ref(),
                    &normalized_shape,
                    need,
                )? {
                    let [dx, dw, db] = fused;
                    let mut grads = vec![dx];
                    if has_w {
                        grads.push(dw);
                    }
                    if has_b {
                        grads.push(db);
                    }
                    return Ok(grads);
                }
            }
            let ga = in_acc(&g)?;
            let mut grads = Vec::with_capacity(3);
            if need_x {
                // PyTorch's CPU formula, rounded as its compiled kernel rounds (the gradient
                // of a row with few elements is mostly cancellation, so the rounding shows):
                // ds = Σ(dy·x)·w, db = Σdy·w, b = fma(db, mean, -ds)·rstd³/n,
                // c = fma(-b, mean, -db·rstd/n), dx = fma(b, x, rstd·dy·w) + c.
                let (xa, mean, rstd) = (in_acc(&take(&sx)?)?, take(&smean)?, take(&srstd)?);
                let w = sw.as_ref().map(|w| w.get()).transpose()?;
                let times_w = |t: Tensor| match &w {
                    Some(w) => t.mul(w),
                    None => Ok(t),
                };
                let ds = times_w(ga.mul(&xa)?)?.sum_over(&dims, true)?;
                let db = times_w(ga.clone())?.sum_over(&dims, true)?;
                let scale = 1.0 / count as f64;
                let b = fused_mul_add(&db, &mean, &ds.neg()?)?
                    .mul(&rstd)?
                    .mul(&rstd)?
                    .mul(&rstd)?
                    .mul(scale)?;
                let db_scaled = db.mul(&rstd)?.mul(scale)?.neg()?;
                let c = fused_mul_add(&b.neg()?, &mean, &db_scaled)?;
                let gx = fused_mul_add(&b, &xa, &times_w(rstd.mul(&ga)?)?)?.add(&c)?;
                grads.push(Some(gx));
            } else {
                grads.push(None);
            }
            let half = matches!(x_dtype, DType::F16 | DType::BF16);
            if half && (need_w || need_b) {
                // PyTorch accumulates these in buffers of the input's dtype, per thread.
                let xhat = if need_w {
                    let (mean, rstd) = (take(&smean)?, take(&srstd)?);
                    normalized(&take(&sx)?, &mean, &rstd)?
                } else {
                    ga.clone()
                };
                let rows = [-1, count as i64];
                let (dw, db) =
                    half_param_grads(&ga.reshape(&rows)?, &xhat.reshape(&rows)?, x_dtype)?;
                let param = |t: Tensor, p: Option<DType>| -> Result<Tensor> {
                    t.reshape_to(&normalized_shape)?.to(p.unwrap_or(x_dtype))
                };
                if has_w {
                    grads.push(if need_w {
                        Some(param(dw, w_dtype)?)
                    } else {
                        None
                    });
                }
                if has_b {
                    grads.push(if need_b {
                        Some(param(db, b_dtype)?)
                    } else {
                        None
                    });
                }
                return Ok(grads);
            }
            if has_w {
                grads.push(if need_w {
                    let (mean, rstd) = (take(&smean)?, take(&srstd)?);
                    Some(sum_lead(
                        &ga.mul(&normalized(&take(&sx)?, &mean, &rstd)?)?,
                        &lead,
                    )?)
                } else {
                    None
                });
            }
            if has_b {
                grads.push(if need_b {
                    Some(sum_lead(&ga, &lead)?)
                } else {
                    None
                });
            }
            Ok(grads)
        })
    })
}

/// `x̂ = fma(rstd, x, -rstd·mean)` in the statistics' dtype, as PyTorch's kernel rounds it.
fn normalized(x: &Tensor, mean: &Tensor, rstd: &Tensor) -> Result<Tensor> {
    let shift = rstd.neg()?.mul(mean)?;
    fused_mul_add(rstd, &in_acc(x)?, &shift)
}

/// The mean and `1/sqrt(var + eps)` (biased variance) over `dims`, kept as size-1 dims.
fn moments(xa: &Tensor, dims: &[usize], count: usize, eps: f64) -> Result<(Tensor, Tensor)> {
    if count >= SCALAR_MOMENTS_BELOW {
        let mean = xa.mean_over(dims, true)?;
        let rstd = xa.var_over(dims, 0.0, true)?.add(eps)?.rsqrt()?;
        return Ok((mean, rstd));
    }
    let mut kept = xa.shape();
    let lead = kept.len() - dims.len();
    kept[lead..].iter_mut().for_each(|s| *s = 1);
    let rows = xa.reshape(&[-1, count as i64])?;
    let m = rows.shape()[0];
    let mut m1 = Tensor::on(xa.device()).zeros(&[m, 1], xa.dtype())?;
    let mut m2 = Tensor::on(xa.device()).zeros(&[m, 1], xa.dtype())?;
    for k in 0..count {
        let xk = rows.narrow(1, k as i64, 1)?;
        let delta = xk.sub(&m1)?;
        m1 = m1.add(&delta.div((k + 1) as f64)?)?;
        m2 = m2.add(&delta.mul(&xk.sub(&m1)?)?)?;
    }
    let rstd = m2.div(count as f64)?.add(eps)?.rsqrt()?;
    Ok((m1.reshape_to(&kept)?, rstd.reshape_to(&kept)?))
}

/// `t` in the dtype the statistics are computed in (f32 for f16 and bf16).
fn in_acc(t: &Tensor) -> Result<Tensor> {
    match t.dtype() {
        DType::F16 | DType::BF16 => t.to(DType::F32),
        _ => Ok(t.clone()),
    }
}

/// `t` summed over the leading (batch) dimensions `lead`, if any.
fn sum_lead(t: &Tensor, lead: &[usize]) -> Result<Tensor> {
    if lead.is_empty() {
        Ok(t.clone())
    } else {
        t.sum_over(lead, false)
    }
}
