//! The flash path: one op (`_scaled_dot_product_flash_attention_for_cpu`, as PyTorch names
//! it) whose node saves q, k, v, the output and each row's log-sum-exp, and whose backward
//! recomputes the probabilities block by block ([`crate::ops::attention`]).

use super::SdpaOptions;
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::op::OpContext;
use crate::ops::attention::{attention_backward, attention_forward, FusedAttention};
use crate::{Result, Tensor};

/// The flash path for operands [`super::select::flash_refusal`] accepts: 3-d inputs run as
/// one batch entry, as in PyTorch.
pub(super) fn flash(q: &Tensor, k: &Tensor, v: &Tensor, opts: &SdpaOptions) -> Result<Tensor> {
    if q.dim() == 3 {
        let one = |t: &Tensor| t.unsqueeze(0i64);
        let mask = match opts.attn_mask {
            Some(m) if m.dim() == 3 => Some(one(m)?),
            _ => None,
        };
        let opts = SdpaOptions {
            attn_mask: mask.as_ref().or(opts.attn_mask),
            ..*opts
        };
        return flash(&one(q)?, &one(k)?, &one(v)?, &opts)?.squeeze(Some(&[0]));
    }
    let e = q.shape()[3];
    let scale = opts.scale.unwrap_or(1.0 / (e as f64).sqrt());
    let mask = opts.attn_mask.cloned();
    let causal = opts.is_causal;
    Entry::new("_scaled_dot_product_flash_attention_for_cpu", &[q, k, v])?
        .run(
            |ctx, t| {
                let x = FusedAttention {
                    q: t[0],
                    k: t[1],
                    v: t[2],
                    mask: mask.as_ref(),
                    scale,
                    causal,
                };
                attention_forward(ctx, &x)
            },
            |ctx, t, (out, lse)| {
                record(
                    ctx,
                    "ScaledDotProductFlashAttentionForCpuBackward0",
                    t,
                    out,
                    |rec| {
                        let saved = [t[0], t[1], t[2], out, lse].map(|x| rec.save(x));
                        let [q, k, v, out, lse] = saved;
                        let (q, k, v, out, lse) = (q?, k?, v?, out?, lse?);
                        let mask = mask.as_ref().map(|m| rec.save(m)).transpose()?;
                        Ok(move |g: Tensor| -> Grads {
                            let ctx = OpContext::enter(
                                "_scaled_dot_product_flash_attention_for_cpu_backward",
                            );
                            let (q, k, v) = (q.get()?, k.get()?, v.get()?);
                            let mask = mask.as_ref().map(|m| m.get()).transpose()?;
                            let x = FusedAttention {
                                q: &q,
                                k: &k,
                                v: &v,
                                mask: mask.as_ref(),
                                scale,
                                causal,
                            };
                            let (dq, dk, dv) =
                                attention_backward(&ctx, &x, &g, &out.get()?, &lse.get()?)?;
                            Ok(vec![Some(dq), Some(dk), Some(dv)])
                        })
                    },
                )
            },
        )
        .map(|(out, _)| out)
}
