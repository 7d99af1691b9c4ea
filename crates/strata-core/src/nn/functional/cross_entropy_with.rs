//! `cross_entropy` with every option: class weights and label smoothing, composed from
//! recorded ops (the plain form is one node; see [`cross_entropy`](super::cross_entropy)).

use super::check::{dtype_is, shape};
use super::class_target::{self, ClassShapes};
use super::cross_entropy::{cross_entropy_ignoring, DEFAULT_IGNORE_INDEX};
use super::Reduction;
use crate::api::entry::Entry;
use crate::{Result, Tensor};

/// The options of [`cross_entropy_with`], with PyTorch's defaults: mean reduction, targets
/// equal to -100 ignored, no label smoothing, no class weights.
///
/// ```
/// use strata_core::nn::functional::{CrossEntropyOptions, Reduction};
/// let o = CrossEntropyOptions { label_smoothing: 0.1, ..Default::default() };
/// assert_eq!(o.reduction, Reduction::Mean);
/// assert_eq!(o.ignore_index, -100);
/// ```
#[derive(Debug, Clone)]
pub struct CrossEntropyOptions {
    /// How the per-target losses are combined.
    pub reduction: Reduction,
    /// Targets equal to this contribute nothing and are left out of the mean.
    pub ignore_index: i64,
    /// `e` in `(1 - e)·nll + e/C·Σ_c -log p_c`, in `[0, 1]`.
    pub label_smoothing: f64,
    /// A weight per class (`[C]`, the logits' dtype): each target's loss is scaled by its
    /// class's weight, and the mean divides by the weights' sum instead of the count.
    pub weight: Option<Tensor>,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            reduction: Reduction::Mean,
            ignore_index: DEFAULT_IGNORE_INDEX,
            label_smoothing: 0.0,
            weight: None,
        }
    }
}

/// PyTorch's `F.cross_entropy` with class-index targets and every option. Without weights
/// or smoothing it is [`cross_entropy_ignoring`]'s single node; otherwise it is composed of
/// `log_softmax` and recorded ops, as PyTorch composes it. Ignored targets get a loss of 0
/// and no gradient; a mean over no remaining target is NaN with a zero gradient.
///
/// ```
/// use strata_core::nn::functional::{cross_entropy_with, CrossEntropyOptions, Reduction};
/// use strata_core::Tensor;
/// let logits = Tensor::from_vec(vec![0.0f32, 0.0], &[1, 2])?;
/// let target = Tensor::from_vec(vec![0i64], &[1])?;
/// let opts = CrossEntropyOptions { label_smoothing: 0.5, ..Default::default() };
/// let loss = cross_entropy_with(&logits, &target, &opts)?.item::<f32>()?;
/// assert!((loss - 2f32.ln()).abs() < 1e-6);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn cross_entropy_with(
    logits: &Tensor,
    target: &Tensor,
    opts: &CrossEntropyOptions,
) -> Result<Tensor> {
    if opts.weight.is_none() && opts.label_smoothing == 0.0 {
        return cross_entropy_ignoring(logits, target, opts.reduction, opts.ignore_index);
    }
    let mut inputs = vec![logits, target];
    inputs.extend(opts.weight.as_ref());
    Entry::new("cross_entropy", &inputs)?.run_composite(|ctx, t| {
        let op = ctx.op();
        let (logits, target) = (t[0], t[1]);
        let cs = class_target::check(op, logits, target, opts.ignore_index)?;
        let e = opts.label_smoothing;
        if !(0.0..=1.0).contains(&e) {
            return Err(crate::Error::argument(
                op,
                format!("label_smoothing must be in [0, 1], got {e}"),
                Some("0.1 is a common choice"),
            ));
        }
        let weight = t.get(2).copied();
        if let Some(w) = weight {
            dtype_is(op, "the class weight", w, logits.dtype())?;
            if w.shape().as_slice() != [cs.classes] {
                return Err(shape(
                    op,
                    format!(
                        "the class weight must have shape [{}], got {:?}",
                        cs.classes,
                        w.shape()
                    ),
                    vec![w.shape().to_vec()],
                    "give one weight per class",
                ));
            }
        }
        composed(logits, target, &cs, weight, e, opts.reduction)
    })
}

/// The loss composed of recorded ops.
fn composed(
    logits: &Tensor,
    target: &Tensor,
    cs: &ClassShapes,
    weight: Option<&Tensor>,
    e: f64,
    reduction: Reduction,
) -> Result<Tensor> {
    let lsm = cs.batched_input(logits)?.log_softmax(1)?;
    let (safe, ignored) = cs.safe_target(target)?;
    let target_shape = &cs.target_shape;
    // Each target's class weight (0 where ignored), and the weights broadcast over classes.
    let (target_weight, class_weight) = match weight {
        Some(w) => {
            let tw = w
                .detach()?
                .index_select(0, &safe.reshape(&[-1])?)?
                .reshape_to(target_shape)?
                .masked_fill(&ignored, 0.0)?;
            let mut bshape = vec![1; lsm.dim()];
            bshape[1] = cs.classes;
            (Some(tw), Some(w.detach()?.view_to(&bshape)?))
        }
        None => (None, None),
    };
    let mut nll = lsm
        .gather(1, &cs.class_index(&safe)?)?
        .neg()?
        .reshape_to(target_shape)?;
    if let Some(tw) = &target_weight {
        nll = nll.mul(tw)?;
    }
    let nll = nll.masked_fill(&ignored, 0.0)?;
    let mut loss = nll.mul(1.0 - e)?;
    if e > 0.0 {
        let terms = match &class_weight {
            Some(cw) => lsm.mul(cw)?,
            None => lsm.clone(),
        };
        let smooth = terms
            .sum(Some(&[1]), false)?
            .neg()?
            .reshape_to(target_shape)?
            .masked_fill(&ignored, 0.0)?;
        loss = loss.add(&smooth.mul(e / cs.classes as f64)?)?;
    }
    match reduction {
        Reduction::Mean => {
            let total = loss.sum(None, false)?;
            match &target_weight {
                Some(tw) => total.div(&tw.sum(None, false)?),
                None => total.div(cs.count() as f64),
            }
        }
        r => r.apply(&loss),
    }
}
