//! `scaled_dot_product_attention`: `softmax(q·kᵀ·scale + mask)·v`, as PyTorch's
//! `F.scaled_dot_product_attention` computes it on its math path, composed of recorded ops
//! (so its gradients for q, k and v come from theirs).

use super::check::{dtype_is, floating};
use super::dropout::dropout;
use crate::api::autocast::without_autocast;
use crate::api::entry::Entry;
use crate::op::OpContext;
use crate::{DType, Error, Result, Tensor};

/// PyTorch's keyword arguments of `F.scaled_dot_product_attention`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SdpaOptions<'a> {
    /// A mask broadcast to the scores `[..., L, S]`: bool (true = attend) or float (added to
    /// the scores; f32 or the query's dtype).
    pub attn_mask: Option<&'a Tensor>,
    /// Dropout on the attention weights (0 for none).
    pub dropout_p: f64,
    /// Query i attends keys 0..=i, aligned top-left when L ≠ S, as PyTorch; no `attn_mask`
    /// may be given with it.
    pub is_causal: bool,
    /// The scores' scale (default `1/√E`).
    pub scale: Option<f64>,
    /// Grouped-query attention: key and value heads (dimension -3) are repeated to the
    /// query's head count, which they must divide.
    pub enable_gqa: bool,
}

/// Attention of `q` `[..., L, E]` over keys `k` `[..., S, E]` and values `v` `[..., S, Ev]`
/// with PyTorch's defaults: `softmax(q·kᵀ/√E)·v`, batch dimensions broadcast.
///
/// ```
/// use strata_core::nn::functional::scaled_dot_product_attention;
/// use strata_core::{DType, Tensor};
/// let q = Tensor::randn(&[2, 4, 8, 16], DType::F32)?; // batch, heads, L, E
/// let k = Tensor::randn(&[2, 4, 10, 16], DType::F32)?;
/// let v = Tensor::randn(&[2, 4, 10, 32], DType::F32)?;
/// let y = scaled_dot_product_attention(&q, &k, &v)?;
/// assert_eq!(y.shape().as_slice(), [2, 4, 8, 32]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn scaled_dot_product_attention(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    scaled_dot_product_attention_with(q, k, v, &SdpaOptions::default())
}

/// [`scaled_dot_product_attention`] with a mask, dropout, causal masking, a scale or
/// grouped-query heads (see [`SdpaOptions`]).
///
/// It computes as PyTorch's math path does (bf16 and f16 in f32, the result rounded once):
/// `q` and `k` each scaled by `√scale`, the
/// scores `[..., L, S]` materialised, the mask added in place, a softmax that gives 0 (not
/// NaN) to a row whose every score is masked, dropout, and the product with `v`. Its
/// memory grows with L·S: the attention weights are saved for backward (with a given
/// mask, the softmax's output too).
///
/// ```
/// use strata_core::nn::functional::{scaled_dot_product_attention_with, SdpaOptions};
/// use strata_core::{DType, Tensor};
/// let q = Tensor::randn(&[1, 8, 5, 16], DType::F32)?;
/// let kv = Tensor::randn(&[1, 2, 5, 16], DType::F32)?; // 2 key/value heads for 8 query heads
/// let opts = SdpaOptions { is_causal: true, enable_gqa: true, ..Default::default() };
/// let y = scaled_dot_product_attention_with(&q, &kv, &kv, &opts)?;
/// assert_eq!(y.shape().as_slice(), [1, 8, 5, 16]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn scaled_dot_product_attention_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &SdpaOptions<'_>,
) -> Result<Tensor> {
    let mut inputs = vec![q, k, v];
    inputs.extend(opts.attn_mask);
    Entry::new("scaled_dot_product_attention", &inputs)?.run_composite(|ctx, t| {
        let opts = SdpaOptions {
            attn_mask: t.get(3).copied(),
            ..*opts
        };
        math(ctx, t[0], t[1], t[2], &opts)
    })
}

/// The checks PyTorch makes before choosing a path.
fn check(op: &'static str, q: &Tensor, k: &Tensor, v: &Tensor, opts: &SdpaOptions) -> Result<()> {
    if q.dim() < 2 || k.dim() < 2 || v.dim() < 2 {
        return Err(Error::shape(
            op,
            format!(
                "Expected query, key, and value to all be at least 2 dimensional, but got \
                 query.dim: {} key.dim: {} and value.dim: {} instead.",
                q.dim(),
                k.dim(),
                v.dim()
            ),
            vec![q.shape().to_vec(), k.shape().to_vec(), v.shape().to_vec()],
        ));
    }
    floating(op, "the query", q)?;
    dtype_is(op, "the key", k, q.dtype())?;
    dtype_is(op, "the value", v, q.dtype())?;
    if let Some(mask) = opts.attn_mask {
        if opts.is_causal {
            return Err(Error::argument(
                op,
                "Explicit attn_mask should not be set when is_causal=True",
                Some("drop the mask (is_causal builds the causal one) or pass is_causal=false"),
            ));
        }
        let d = mask.dtype();
        if !(d == DType::Bool || d == DType::F32 || d == q.dtype()) {
            return Err(Error::dtype(
                op,
                format!(
                    "Expected attn_mask dtype to be bool or float or to match query dtype, \
                     but got attn_mask.dtype: {d} and query.dtype: {} instead.",
                    q.dtype()
                ),
                Some("pass a bool mask (true = attend) or an additive mask of the query's dtype"),
            ));
        }
    }
    Ok(())
}

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

/// The math path.
fn math(ctx: &OpContext, q: &Tensor, k: &Tensor, v: &Tensor, opts: &SdpaOptions) -> Result<Tensor> {
    let op = ctx.op();
    check(op, q, k, v, opts)?;
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
    let root = scale.sqrt();
    let mut scores = q
        .mul(root)?
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
