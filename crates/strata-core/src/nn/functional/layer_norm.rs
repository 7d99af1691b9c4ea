//! `layer_norm`, as one node that saves the input, the mean and the reciprocal standard
//! deviation (as PyTorch's `native_layer_norm`).

use super::check::{dtype_is, floating, shape};
use crate::autograd::formulas::{record, take, Grads};
use crate::autograd::mode::internal;
use crate::op::OpContext;
use crate::{DType, Result, Tensor};

/// Normalises `x` over its last dimensions, `normalized_shape`, to zero mean and unit
/// variance (biased, with `eps` added to it), then scales by `weight` and shifts by `bias`
/// (both of shape `normalized_shape`) when given (PyTorch's `F.layer_norm`). f16 and bf16
/// are computed in f32.
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
    let ctx = OpContext::enter("layer_norm");
    let op = ctx.op();
    floating(op, "the input", x)?;
    let xs = x.shape();
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
            dtype_is(op, what, t, x.dtype())?;
            if t.shape() != normalized_shape {
                return Err(shape(
                    op,
                    format!(
                        "{what} must have shape normalized_shape {normalized_shape:?}, got {:?}",
                        t.shape()
                    ),
                    vec![t.shape(), normalized_shape.to_vec()],
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
    let dims: Vec<i64> = (xs.len() - k..xs.len()).map(|d| d as i64).collect();
    let lead: Vec<i64> = (0..xs.len() - k).map(|d| d as i64).collect();
    let count: usize = normalized_shape.iter().product();
    let (out, mean, rstd) = internal(|| -> Result<(Tensor, Tensor, Tensor)> {
        let xa = in_acc(x)?;
        let mean = xa.mean(Some(&dims), true)?;
        let rstd = xa.var(Some(&dims), 0.0, true)?.add(eps)?.rsqrt()?;
        // As PyTorch: x·rstd + (-rstd·mean), then the affine part.
        let mut y = xa.mul(&rstd)?.add(&rstd.mul(&mean)?.neg()?)?;
        if let Some(w) = weight {
            y = y.mul(w)?;
        }
        if let Some(b) = bias {
            y = y.add(b)?;
        }
        Ok((y.to(x.dtype())?, mean, rstd))
    })?;
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    record(&ctx, "NativeLayerNormBackward0", &inputs, &out, |rec| {
        let need_x = rec.needs(0);
        let need_w = has_w && rec.needs(1);
        let need_b = has_b && rec.needs(1 + has_w as usize);
        let sx = rec.save_if(need_x || need_w, x)?;
        let smean = rec.save_if(need_x || need_w, &mean)?;
        let srstd = rec.save_if(need_x || need_w, &rstd)?;
        let sw = match weight {
            Some(w) if need_x => Some(rec.save(w)?),
            _ => None,
        };
        Ok(move |g: Tensor| -> Grads {
            let ga = in_acc(&g)?;
            let mut grads = Vec::with_capacity(3);
            if need_x {
                // PyTorch's CPU formula, in the same order (the gradient of a row with few
                // elements is mostly cancellation, so the order shows):
                // dx = rstd·dy·w + b·x + c with b = (Σdy·w·mean - Σdy·w·x)·rstd³/n and
                // c = -b·mean - Σdy·w·rstd/n.
                let (xa, mean, rstd) = (in_acc(&take(&sx)?)?, take(&smean)?, take(&srstd)?);
                let w = sw.as_ref().map(|w| w.get()).transpose()?;
                let times_w = |t: Tensor| match &w {
                    Some(w) => t.mul(w),
                    None => Ok(t),
                };
                let dyw = times_w(ga.clone())?;
                let ds = dyw.mul(&xa)?.sum(Some(&dims), true)?;
                let db = dyw.sum(Some(&dims), true)?;
                let scale = 1.0 / count as f64;
                let b = db
                    .mul(&mean)?
                    .sub(&ds)?
                    .mul(&rstd)?
                    .mul(&rstd)?
                    .mul(&rstd)?
                    .mul(scale)?;
                let c = b.neg()?.mul(&mean)?.sub(&db.mul(&rstd)?.mul(scale)?)?;
                let gx = times_w(rstd.mul(&ga)?)?.add(&b.mul(&xa)?)?.add(&c)?;
                grads.push(Some(gx));
            } else {
                grads.push(None);
            }
            if has_w {
                grads.push(if need_w {
                    let centred = in_acc(&take(&sx)?)?.sub(&take(&smean)?)?;
                    Some(sum_lead(&ga.mul(&centred)?.mul(&take(&srstd)?)?, &lead)?)
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
    })?;
    Ok(out)
}

/// `t` in the dtype the statistics are computed in (f32 for f16 and bf16).
fn in_acc(t: &Tensor) -> Result<Tensor> {
    match t.dtype() {
        DType::F16 | DType::BF16 => t.to(DType::F32),
        _ => Ok(t.clone()),
    }
}

/// `t` summed over the leading (batch) dimensions `lead`, if any.
fn sum_lead(t: &Tensor, lead: &[i64]) -> Result<Tensor> {
    if lead.is_empty() {
        Ok(t.clone())
    } else {
        t.sum(Some(lead), false)
    }
}
