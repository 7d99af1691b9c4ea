//! `scaled_dot_product_attention`: `softmax(q·kᵀ·scale + mask)·v`, as PyTorch's
//! `F.scaled_dot_product_attention` computes it on the CPU: on the flash path (a tiled
//! kernel whose memory is linear in the sequence lengths) where PyTorch's rule allows it,
//! else on the math path (recorded ops, the scores materialised).

mod fused;
mod math;
mod select;

pub use select::{sdpa_kernel, SdpBackend};

use super::check::{dtype_is, floating};
use crate::api::entry::Entry;
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
/// It takes PyTorch's CPU paths by PyTorch's rule (see [`sdpa_kernel`], which can restrict
/// the choice):
/// - *flash* (4-d or 3-d inputs without dropout, and more): a tiled kernel with an online
///   softmax that holds one block of scores per thread and saves only the output and each
///   row's log-sum-exp (f32, or f64 for f64 inputs); its backward recomputes the
///   probabilities block by block. Memory grows with L + S. Causal masking skips the key
///   blocks above the diagonal.
/// - *math* (anything else): `q` and `k` each scaled by `√scale`, the scores `[..., L, S]`
///   materialised, the mask added in place, softmax, dropout, and the product with `v`, as
///   recorded ops (bf16 and f16 computed in f32 and rounded once). Memory grows with L·S:
///   the attention weights are saved for backward (with a given mask, the softmax's output
///   too).
///
/// On both, a row whose every score is masked gives 0 (not NaN) and no gradient.
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
        let (q, k, v) = (t[0], t[1], t[2]);
        check(ctx.op(), q, k, v, &opts)?;
        match select::choose(ctx.op(), q, k, v, &opts)? {
            SdpBackend::Flash => fused::flash(q, k, v, &opts),
            SdpBackend::Math => math::math(ctx, q, k, v, &opts),
        }
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
