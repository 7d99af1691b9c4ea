//! `cross_entropy` with class-index targets, as one node whose backward keeps only the
//! logits and the target.

use super::class_target::{self, ClassShapes};
use super::Reduction;
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::op::OpContext;
use crate::{Result, Tensor};

/// The target value PyTorch's class losses ignore by default (`ignore_index=-100`).
pub const DEFAULT_IGNORE_INDEX: i64 = -100;

/// The cross-entropy loss between `logits` (`[N, C]`, `[N, C, d1, ..]` or `[C]`) and the
/// class indices `target` (i64, `[N]`, `[N, d1, ..]` or `[]`): `-log_softmax(logits)` at
/// each target class, reduced by `reduction` (PyTorch's `F.cross_entropy`). Targets equal
/// to [`DEFAULT_IGNORE_INDEX`] (-100) are ignored, as PyTorch's default; see
/// [`cross_entropy_ignoring`].
///
/// Its backward node saves the logits and the target, nothing of their size more: the
/// gradient `(softmax(logits) - onehot(target)) * g` is recomputed from them, subtracting
/// at the target positions without building a one-hot tensor.
///
/// ```
/// use strata_core::nn::functional::{cross_entropy, Reduction};
/// use strata_core::Tensor;
/// let logits = Tensor::from_vec(vec![0.0f32, 0.0, 10.0, 0.0], &[2, 2])?.requires_grad_(true)?;
/// let target = Tensor::from_vec(vec![1i64, 0], &[2])?;
/// let loss = cross_entropy(&logits, &target, Reduction::Mean)?;
/// assert!((loss.item::<f32>()? - 2f32.ln() / 2.0).abs() < 1e-4);
/// loss.backward()?;
/// let g = logits.grad().unwrap().to_vec::<f32>()?;
/// assert!((g[0] - 0.25).abs() < 1e-6 && (g[1] + 0.25).abs() < 1e-6);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn cross_entropy(logits: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    cross_entropy_ignoring(logits, target, reduction, DEFAULT_IGNORE_INDEX)
}

/// [`cross_entropy`] with PyTorch's `ignore_index`: target elements equal to it contribute
/// a loss of 0 and no gradient, and are left out of the mean's divisor (a mean over only
/// ignored elements is NaN, as in PyTorch).
///
/// ```
/// use strata_core::nn::functional::{cross_entropy_ignoring, Reduction};
/// use strata_core::Tensor;
/// let logits = Tensor::from_vec(vec![0.0f32, 0.0, 5.0, -5.0], &[2, 2])?;
/// let target = Tensor::from_vec(vec![1i64, 7], &[2])?;
/// let loss = cross_entropy_ignoring(&logits, &target, Reduction::Mean, 7)?;
/// assert!((loss.item::<f32>()? - 2f32.ln()).abs() < 1e-6);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn cross_entropy_ignoring(
    logits: &Tensor,
    target: &Tensor,
    reduction: Reduction,
    ignore_index: i64,
) -> Result<Tensor> {
    Entry::new("cross_entropy", &[logits, target])?
        .run(
            |ctx, t| {
                let (logits, target) = (t[0], t[1]);
                let cs = class_target::check(ctx.op(), logits, target, ignore_index)?;
                let lsm = cs.batched_input(logits)?.log_softmax(1)?;
                Ok((
                    reduce(&picked_losses(&lsm, target, &cs)?, &cs, reduction)?,
                    cs,
                ))
            },
            |ctx, t, (out, cs)| backward(ctx, t[0], t[1], out, cs.clone(), reduction),
        )
        .map(|(out, _)| out)
}

/// Records `out = cross_entropy(logits, target)`.
fn backward(
    ctx: &OpContext,
    logits: &Tensor,
    target: &Tensor,
    out: &Tensor,
    cs: ClassShapes,
    reduction: Reduction,
) -> Result<()> {
    record(ctx, "CrossEntropyLossBackward0", &[logits], out, |rec| {
        let saved_logits = rec.save(logits)?;
        let saved_target = rec.save(target)?;
        Ok(move |g: Tensor| -> Grads {
            let (x, t) = (saved_logits.get()?, saved_target.get()?);
            let (t, ignored) = cs.safe_target(&t)?;
            let gw = per_target_grad(&g, &cs, reduction, &ignored)?;
            let idx = cs.class_index(&t)?;
            let gx = cs.batched_input(&x)?.softmax(1)?;
            gx.mul_(&gw)?;
            let gx = subtract_at_targets(&gx, &idx, &gw)?;
            Ok(vec![Some(gx.reshape_to(&cs.input_shape)?)])
        })
    })
}

/// `-input[n, target[n, ..], ..]` for every target element, shaped like the target (0 for
/// an ignored element).
pub(super) fn picked_losses(input: &Tensor, target: &Tensor, cs: &ClassShapes) -> Result<Tensor> {
    let (safe, ignored) = cs.safe_target(target)?;
    input
        .gather(1, &cs.class_index(&safe)?)?
        .neg()?
        .reshape_to(&cs.target_shape)?
        .masked_fill(&ignored, 0i64)
}

/// The per-element `losses` reduced, the mean dividing by the elements not ignored (the
/// same steps whether or not any is, so the allocations do not depend on the labels).
pub(super) fn reduce(losses: &Tensor, cs: &ClassShapes, reduction: Reduction) -> Result<Tensor> {
    if reduction == Reduction::Mean {
        return losses.sum(None, false)?.div(cs.count() as f64);
    }
    reduction.apply(losses)
}

/// The gradient reaching each target element's loss, shaped `[N, 1, d1, ..]`, ready to
/// broadcast over the class dimension; 0 at the elements `ignored` marks.
pub(super) fn per_target_grad(
    g: &Tensor,
    cs: &ClassShapes,
    reduction: Reduction,
    ignored: &Tensor,
) -> Result<Tensor> {
    let gw = match reduction {
        Reduction::None if cs.unbatched => g.reshape(&[1, 1])?,
        Reduction::None => g.unsqueeze(1)?,
        Reduction::Mean => g.div(cs.count() as f64)?,
        Reduction::Sum => g.clone(),
    };
    // Selected, not multiplied: an infinite gradient must still give 0 there.
    Tensor::where_cond(
        &cs.class_index(ignored)?,
        &crate::autograd::formulas::zero(g)?,
        &gw,
    )
}

/// `grad` with `gw` subtracted at each target class (`idx` is `[N, 1, d1, ..]`).
pub(super) fn subtract_at_targets(grad: &Tensor, idx: &Tensor, gw: &Tensor) -> Result<Tensor> {
    let src = gw.neg()?.expand_to(&idx.shape())?;
    grad.scatter_add(1, idx, &src)
}
