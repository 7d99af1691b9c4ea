//! `nll_loss` and `mse_loss`.

use super::check::{dtype_is, floating};
use super::class_target::{self, ClassShapes};
use super::cross_entropy::{
    per_target_grad, picked_losses, reduce, subtract_at_targets, DEFAULT_IGNORE_INDEX,
};
use super::Reduction;
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::op::OpContext;
use crate::{Result, Tensor};

/// The negative log-likelihood loss of `log_probs` (`[N, C]`, `[N, C, d1, ..]` or `[C]`,
/// typically a `log_softmax` along dimension 1) at the class indices `target` (i64, the
/// input's shape without dimension 1), reduced by `reduction` (PyTorch's `F.nll_loss`).
/// Its backward saves only the target. Targets equal to
/// [`DEFAULT_IGNORE_INDEX`](super::DEFAULT_IGNORE_INDEX) (-100) are ignored, as PyTorch's
/// default; see [`nll_loss_ignoring`].
///
/// ```
/// use strata_core::nn::functional::{nll_loss, Reduction};
/// use strata_core::Tensor;
/// let lp = Tensor::from_vec(vec![-0.5f32, -1.0, -2.0, -0.1], &[2, 2])?;
/// let target = Tensor::from_vec(vec![1i64, 0], &[2])?;
/// assert_eq!(nll_loss(&lp, &target, Reduction::Sum)?.item::<f32>()?, 3.0);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn nll_loss(log_probs: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    nll_loss_ignoring(log_probs, target, reduction, DEFAULT_IGNORE_INDEX)
}

/// [`nll_loss`] with PyTorch's `ignore_index`: target elements equal to it contribute a loss
/// of 0 and no gradient, and are left out of the mean's divisor.
///
/// ```
/// use strata_core::nn::functional::{nll_loss_ignoring, Reduction};
/// use strata_core::Tensor;
/// let lp = Tensor::from_vec(vec![-0.5f32, -1.0, -2.0, -0.1], &[2, 2])?;
/// let target = Tensor::from_vec(vec![1i64, -1], &[2])?;
/// assert_eq!(nll_loss_ignoring(&lp, &target, Reduction::Mean, -1)?.item::<f32>()?, 1.0);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn nll_loss_ignoring(
    log_probs: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    ignore_index: i64,
) -> Result<Tensor> {
    Entry::new("nll_loss", &[log_probs, target])?
        .run(
            |ctx, t| {
                let (log_probs, target) = (t[0], t[1]);
                let cs = class_target::check(ctx.op(), log_probs, target, ignore_index)?;
                let x = cs.batched_input(log_probs)?;
                Ok((
                    reduce(&picked_losses(&x, target, &cs)?, &cs, reduction)?,
                    cs,
                ))
            },
            |ctx, t, (out, cs)| nll_backward(ctx, t[0], t[1], out, cs.clone(), reduction),
        )
        .map(|(out, _)| out)
}

/// Records `out = nll_loss(log_probs, target)`.
fn nll_backward(
    ctx: &OpContext,
    log_probs: &Tensor,
    target: &Tensor,
    out: &Tensor,
    cs: ClassShapes,
    reduction: Reduction,
) -> Result<()> {
    let batched_shape = if cs.unbatched {
        vec![1, cs.classes]
    } else {
        cs.input_shape.clone()
    };
    record(ctx, "NllLossBackward0", &[log_probs], out, |rec| {
        let saved_target = rec.save(target)?;
        Ok(move |g: Tensor| -> Grads {
            let (t, ignored) = cs.safe_target(&saved_target.get()?)?;
            let gw = per_target_grad(&g, &cs, reduction, &ignored)?;
            let idx = cs.class_index(&t)?;
            let zeros = Tensor::on(g.device()).zeros(&batched_shape, g.dtype())?;
            let gx = subtract_at_targets(&zeros, &idx, &gw)?;
            Ok(vec![Some(gx.reshape_to(&cs.input_shape)?)])
        })
    })
}

/// The mean squared error `(input - target)²`, reduced by `reduction` (PyTorch's
/// `F.mse_loss`); the two broadcast together. Differentiable in both.
///
/// ```
/// use strata_core::nn::functional::{mse_loss, Reduction};
/// use strata_core::Tensor;
/// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
/// let b = Tensor::from_vec(vec![1.0f32, 0.0, 0.0], &[3])?;
/// assert_eq!(mse_loss(&a, &b, Reduction::Mean)?.item::<f32>()?, 13.0 / 3.0);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    Entry::new("mse_loss", &[input, target])?.run_composite(|ctx, t| {
        let (input, target) = (t[0], t[1]);
        floating(ctx.op(), "the input", input)?;
        dtype_is(ctx.op(), "the target", target, input.dtype())?;
        let d = input.sub(target)?;
        reduction.apply(&d.mul(&d)?)
    })
}

/// The mean absolute error `|input - target|`, reduced by `reduction` (PyTorch's
/// `F.l1_loss`); the two broadcast together. Differentiable in both (the gradient at a zero
/// difference is 0).
///
/// ```
/// use strata_core::nn::functional::{l1_loss, Reduction};
/// use strata_core::Tensor;
/// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
/// let b = Tensor::from_vec(vec![1.0f32, 0.0, 4.0], &[3])?;
/// assert_eq!(l1_loss(&a, &b, Reduction::Sum)?.item::<f32>()?, 3.0);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn l1_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    Entry::new("l1_loss", &[input, target])?.run_composite(|ctx, t| {
        let (input, target) = (t[0], t[1]);
        floating(ctx.op(), "the input", input)?;
        dtype_is(ctx.op(), "the target", target, input.dtype())?;
        reduction.apply(&input.sub(target)?.abs()?)
    })
}
