//! The math path: the reference composition of recorded ops (scores materialised, then the
//! mask, softmax, dropout and the product with `v`), as PyTorch's
//! `_scaled_dot_product_attention_math`; its gradients come from those ops'.

use super::SdpaOptions;
use crate::api::autocast::without_autocast;
use crate::nn::functional::dropout::dropout;
use crate::op::OpContext;
use crate::{DType, Error, Result, Tensor};

/// `t` with its heads (dimension -3) each repeated `times` times in place, as
/// `repeat_interleave(times, -3)`: a view expanded, then one copy.
fn repeat_heads(t: &Tensor, times: usize) -> Result<Tensor> {
    if times == 1 {
        return Ok(t.clone());
    }
    let shape = t.shape().to_vec();
    let n = shape.len();
    let mut expanded = shape.clone();
    expanded.insert(n - 2, times);
    let mut merged = shape;
    merged[n - 3] *= times;
    t.unsqueeze(-3i64)?.expand(&expanded)?.reshape(&merged)
}

/// Key and value with their heads repeated to the query's (grouped-query attention).
fn grouped(op: &'static str, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
    if q.dim() < 3 || k.dim() < 3 || v.dim() < 3 {
        return Err(Error::shape(
            op,
            "enable_gqa needs a heads dimension (-3) in query, key and value",
            vec![q.shape().to_vec(), k.shape().to_vec(), v.shape().to_vec()],
        ));
    }
    let heads = |t: &Tensor| t.shape()[t.dim() - 3];
    let (hq, hk, hv) = (heads(q), heads(k), heads(v));
    if hk == 0 || hv == 0 || !hq.is_multiple_of(hk) || !hq.is_multiple_of(hv) {
        return Err(Error::shape(
            op,
            format!(
                "Number of heads in key and value must divide the number of heads in query \
                 (query {hq}, key {hk}, value {hv})"
            ),
            vec![q.shape().to_vec(), k.shape().to_vec(), v.shape().to_vec()],
        ));
    }
    Ok((repeat_heads(k, hq / hk)?, repeat_heads(v, hq / hv)?))
}

/// The additive form of the mask (0 where attended, -inf elsewhere), if any: the given
/// float mask, a bool mask converted, or the causal mask built for `[L, S]`.
fn additive_mask(q: &Tensor, k: &Tensor, opts: &SdpaOptions) -> Result<Option<Tensor>> {
    let bool_mask = if opts.is_causal {
        let (l, s) = (q.shape()[q.dim() - 2], k.shape()[k.dim() - 2]);
        Tensor::on(q.device()).ones(&[l, s], DType::Bool)?.tril(0)?
    } else {
        match opts.attn_mask {
            None => return Ok(None),
            Some(m) if m.dtype() != DType::Bool => return Ok(Some(m.clone())),
            Some(m) => m.clone(),
        }
    };
    let blocked = Tensor::on(q.device()).full(&bool_mask.shape(), f64::NEG_INFINITY, q.dtype())?;
    Ok(Some(blocked.masked_fill(&bool_mask, 0i64)?))
}

/// Whether a tensor of shape `from` broadcasts to `to` without growing it.
fn broadcasts_into(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == 1)
}

/// The math path. The operands have passed [`super::check`].
pub(super) fn math(
    ctx: &OpContext,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &SdpaOptions,
) -> Result<Tensor> {
    let op = ctx.op();
    let half = q.dtype();
    if matches!(half, DType::BF16 | DType::F16) {
        // PyTorch's CPU math path computes half precision in f32 and rounds the result
        // once (its gradients come back through the same casts); inside an autocast region
        // its products must stay in f32 too.
        let wide = |t: &Tensor| t.to(DType::F32);
        let mask = match opts.attn_mask {
            Some(m) if m.dtype() == half => Some(wide(m)?),
            _ => None,
        };
        let opts = SdpaOptions {
            attn_mask: mask.as_ref().or(opts.attn_mask),
            ..*opts
        };
        let (q, k, v) = (wide(q)?, wide(k)?, wide(v)?);
        return without_autocast(|| math(ctx, &q, &k, &v, &opts))?.to(half);
    }
    let (k, v) = if opts.enable_gqa {
        grouped(op, q, k, v)?
    } else {
        (k.clone(), v.clone())
    };
    let e = q.shape()[q.dim() - 1];
    let scale = opts.scale.unwrap_or(1.0 / (e as f64).sqrt());
    // PyTorch scales both operands by √scale, for the range of half precision.
    // A negative scale's sign goes to the query.
    let root = scale.abs().sqrt();
    let mut scores = q
        .mul(root.copysign(scale))?
        .matmul(&k.mul(root)?.transpose(-2i64, -1i64)?)?;
    let mask = additive_mask(q, &k, opts)?;
    if let Some(mask) = &mask {
        // In place when the mask broadcasts to the scores (the scores are saved by nothing:
        // the product saves its operands), as PyTorch's `add_`; else a new tensor.
        scores = if broadcasts_into(&mask.shape(), &scores.shape()) {
            scores.add_(mask)?
        } else {
            scores.add(mask)?
        };
    }
    // A row whose every score is masked gives weights 0, not NaN, and no gradient, as
    // PyTorch's `_safe_softmax`. A causal mask always leaves key 0, so only a given mask
    // pays for this: the scores' dead rows zeroed in place (so softmax's backward sees no
    // NaN), then the weights' (one more [.., L, S] tensor).
    let mut weights = match mask {
        Some(_) if !opts.is_causal => {
            let dead = scores
                .detach()?
                .amax(Some(&[-1]), true)?
                .eq(f64::NEG_INFINITY)?;
            scores.masked_fill_(&dead, 0i64)?;
            scores.softmax(-1)?.masked_fill(&dead, 0i64)?
        }
        _ => scores.softmax(-1)?,
    };
    if opts.dropout_p > 0.0 {
        weights = dropout(&weights, opts.dropout_p, true)?;
    }
    weights.matmul(&v)
}
