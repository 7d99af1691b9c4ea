//! `binary_cross_entropy_with_logits`, as one element-wise node that saves the logits and
//! the target.

use super::check::{dtype_is, floating, shape};
use super::Reduction;
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, take, Grads};
use crate::op::OpContext;
use crate::{Result, Tensor};

/// PyTorch's `F.binary_cross_entropy_with_logits`: for logits `x` and targets `t` (same
/// shape, probabilities in `[0, 1]`), `(1 - t)·x + log(1 + e^-x)`, computed stably as
/// `(1 - t)·x + max(-x, 0) + log(1 + e^-|x|)`, then reduced. The gradient is
/// `sigmoid(x) - t` for the logits and `-x` for the target.
///
/// ```
/// use strata_core::nn::functional::{binary_cross_entropy_with_logits, Reduction};
/// use strata_core::Tensor;
/// let x = Tensor::from_vec(vec![0.0f32, 100.0], &[2])?;
/// let t = Tensor::from_vec(vec![1.0f32, 1.0], &[2])?;
/// let l = binary_cross_entropy_with_logits(&x, &t, Reduction::None)?.to_vec::<f32>()?;
/// assert!((l[0] - 2f32.ln()).abs() < 1e-6 && l[1] == 0.0);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn binary_cross_entropy_with_logits(
    x: &Tensor,
    target: &Tensor,
    reduction: Reduction,
) -> Result<Tensor> {
    Entry::new("binary_cross_entropy_with_logits", &[x, target])?.run_composite(|ctx, t| {
        let (x, target) = (t[0], t[1]);
        floating(ctx.op(), "the input", x)?;
        dtype_is(ctx.op(), "the target", target, x.dtype())?;
        if x.shape() != target.shape() {
            return Err(shape(
                ctx.op(),
                format!(
                    "the target's shape {:?} must equal the input's {:?}",
                    target.shape(),
                    x.shape()
                ),
                vec![target.shape().to_vec(), x.shape().to_vec()],
                "give one target probability per logit",
            ));
        }
        reduction.apply(&elementwise(x, target)?)
    })
}

/// The unreduced loss, one node.
#[track_caller]
fn elementwise(x: &Tensor, target: &Tensor) -> Result<Tensor> {
    Entry::new("binary_cross_entropy_with_logits", &[x, target])?
        .run(|_, t| forward(t[0], t[1]), backward)
}

/// `(1 - t)·x + max(-x, 0) + log(1 + e^-|x|)`.
fn forward(x: &Tensor, t: &Tensor) -> Result<Tensor> {
    let softplus = x
        .neg()?
        .clamp(Some(0.0.into()), None)?
        .add(&x.abs()?.neg()?.exp()?.add(1.0)?.log()?)?;
    t.neg()?.add(1.0)?.mul(x)?.add(&softplus)
}

/// Records `out = bce_with_logits(x, t)`.
fn backward(ctx: &OpContext, inputs: &[&Tensor], out: &Tensor) -> Result<()> {
    let (x, t) = (inputs[0], inputs[1]);
    record(
        ctx,
        "BinaryCrossEntropyWithLogitsBackward0",
        inputs,
        out,
        |rec| {
            let (need_x, need_t) = (rec.needs(0), rec.needs(1));
            let sx = rec.save_if(true, x)?;
            let st = rec.save_if(need_x, t)?;
            Ok(move |g: Tensor| -> Grads {
                let x = take(&sx)?;
                let gx = if need_x {
                    Some(x.sigmoid()?.sub(&take(&st)?)?.mul(&g)?)
                } else {
                    None
                };
                let gt = if need_t {
                    Some(x.neg()?.mul(&g)?)
                } else {
                    None
                };
                Ok(vec![gx, gt])
            })
        },
    )
}
