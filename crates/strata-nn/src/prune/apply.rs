//! Putting a mask on a parameter, in either form, and taking it off.

use std::sync::Arc;

use strata_core::autograd::GradModeGuard;
use strata_core::{DType, Error, Result, Tensor};

use crate::module::ModuleCore;

/// How a pruned parameter is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Form {
    /// strata's default: the parameter itself is masked in place and stays the parameter
    /// (an optimizer keeps holding it); the mask is a `bool` buffer `<name>_mask` that is not
    /// part of the state dict. Memory: the weight plus one byte per element. Run
    /// [`reapply`](super::reapply) after each optimizer step.
    #[default]
    InPlace,
    /// PyTorch's form: the parameter becomes `<name>_orig`, the mask a buffer `<name>_mask` of
    /// the weight's dtype, and `<name>` a plain tensor recomputed as `orig * mask` before every
    /// forward. Memory: about three weights.
    Reparametrized,
}

/// How `name` of `core` is pruned now.
pub(crate) enum State {
    Plain(Tensor),
    InPlace { weight: Tensor, mask: Tensor },
    Reparametrized { weight: Tensor, mask: Tensor },
}

pub(crate) fn mask_name(name: &str) -> String {
    format!("{name}_mask")
}

pub(crate) fn orig_name(name: &str) -> String {
    format!("{name}_orig")
}

pub(crate) fn state(op: &'static str, core: &ModuleCore, name: &str) -> Result<State> {
    let mask = core.buffer_slot(&mask_name(name)).map(|s| s.get());
    if let (Some(orig), Some(mask), Some(weight)) = (
        core.parameter_slot(&orig_name(name)),
        mask.clone(),
        core.plain_slot(name),
    ) {
        let _ = orig;
        return Ok(State::Reparametrized {
            weight: weight.get(),
            mask,
        });
    }
    let weight = core.parameter_slot(name).ok_or_else(|| {
        Error::argument(
            op,
            format!("{} has no parameter {name:?}", core.kind()),
            None,
        )
    })?;
    Ok(match mask {
        Some(mask) if mask.dtype() == DType::Bool => State::InPlace {
            weight: weight.get(),
            mask,
        },
        _ => State::Plain(weight.get()),
    })
}

impl State {
    /// The weight as the forward sees it (masked).
    pub(crate) fn weight(&self) -> &Tensor {
        match self {
            State::Plain(w)
            | State::InPlace { weight: w, .. }
            | State::Reparametrized { weight: w, .. } => w,
        }
    }

    /// Which elements are still unpruned.
    pub(crate) fn eligible(&self) -> Result<Vec<bool>> {
        match self {
            State::Plain(w) => Ok(vec![true; w.numel()]),
            State::InPlace { mask, .. } => mask.to_vec::<bool>(),
            State::Reparametrized { mask, .. } => Ok(mask
                .to(DType::F64)?
                .to_vec::<f64>()?
                .iter()
                .map(|&v| v != 0.0)
                .collect()),
        }
    }
}

/// Gives `name` the keep-mask `keep` (which already includes earlier pruning), in `form`.
pub(crate) fn apply(
    op: &'static str,
    core: &ModuleCore,
    name: &str,
    keep: Vec<bool>,
    form: Form,
) -> Result<()> {
    let st = state(op, core, name)?;
    let w = st.weight().clone();
    let mask = Tensor::from_vec(keep, w.shape().as_slice())?.to_device(w.device())?;
    let wrong_form = matches!(
        (&st, form),
        (State::InPlace { .. }, Form::Reparametrized)
            | (State::Reparametrized { .. }, Form::InPlace)
    );
    if wrong_form {
        return Err(Error::argument(
            op,
            format!("{name:?} is already pruned in the other form"),
            Some("prune::remove it first, or prune again in the same form"),
        ));
    }
    match form {
        Form::InPlace => {
            {
                let _g = GradModeGuard::no_grad();
                w.mul_(&mask)?;
            }
            match core.buffer_slot(&mask_name(name)) {
                Some(slot) => {
                    mask.mark_category(strata_core::Category::Other);
                    slot.set(mask);
                }
                None => {
                    core.register_buffer(&mask_name(name), mask, false)?;
                }
            }
        }
        Form::Reparametrized => {
            let mask = mask.to(w.dtype())?;
            if let State::Plain(orig) = &st {
                let slot = core
                    .demote_parameter(name)
                    .ok_or_else(|| Error::argument(op, format!("no parameter {name:?}"), None))?;
                core.register_parameter(&orig_name(name), orig.clone())?;
                core.register_buffer(&mask_name(name), mask, true)?;
                let label = name.to_owned();
                core.add_labelled_hook(
                    Some(label.clone()),
                    Arc::new(move |c: &ModuleCore| recompute(c, &label)),
                );
                let _ = slot;
            } else if let Some(slot) = core.buffer_slot(&mask_name(name)) {
                mask.mark_category(strata_core::Category::Other);
                slot.set(mask);
            }
            recompute(core, name)?;
        }
    }
    Ok(())
}

/// The reparametrised `name = name_orig * name_mask`, recorded (gradients reach `_orig`).
fn recompute(core: &ModuleCore, name: &str) -> Result<()> {
    let missing = || Error::argument("prune", format!("{name:?} lost its pruning state"), None);
    let orig = core.parameter_slot(&orig_name(name)).ok_or_else(missing)?;
    let mask = core.buffer_slot(&mask_name(name)).ok_or_else(missing)?;
    let plain = core.plain_slot(name).ok_or_else(missing)?;
    plain.set(orig.get().mul(&mask.get())?);
    Ok(())
}

/// Makes the pruning of `name` permanent: the parameter keeps its masked values and the
/// mask (and, in PyTorch's form, `_orig` and the hook) goes. In PyTorch's form the
/// parameter is `_orig`'s tensor, masked in place, so an optimizer holding it keeps it.
pub(crate) fn remove(core: &ModuleCore, name: &str) -> Result<()> {
    const OP: &str = "prune::remove";
    match state(OP, core, name)? {
        State::Plain(_) => Err(Error::argument(
            OP,
            format!("{name:?} of {} is not pruned", core.kind()),
            None,
        )),
        State::InPlace { .. } => {
            core.unregister(&mask_name(name));
            Ok(())
        }
        State::Reparametrized { mask, .. } => {
            let orig = core
                .parameter_slot(&orig_name(name))
                .map(|s| s.get())
                .ok_or_else(|| Error::argument(OP, "no _orig parameter", None))?;
            {
                let _g = GradModeGuard::no_grad();
                orig.mul_(&mask)?;
            }
            core.remove_labelled_hook(name);
            core.unregister(&orig_name(name));
            core.unregister(&mask_name(name));
            core.promote_plain(name, orig)?;
            Ok(())
        }
    }
}
