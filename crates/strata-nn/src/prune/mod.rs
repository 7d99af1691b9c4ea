//! Pruning (`torch.nn.utils.prune`): zeroing the least important weights with a mask.
//!
//! strata's default [`Form::InPlace`] masks the parameter itself and keeps a `bool` mask
//! (one byte per weight); call [`reapply`] after each optimizer step (or register it once
//! with [`reapply_after_steps`]) to keep pruned weights at zero (in place, allocating nothing). [`Form::Reparametrized`] is PyTorch's form
//! (`weight_orig`, `weight_mask`, and `weight` recomputed before every forward), about three
//! weights of memory. [`pytorch_state_dict`] writes PyTorch's keys for either form.
//!
//! ```
//! use strata_nn::prune::{self, Amount, Form};
//! use strata_nn::{Linear, Module};
//! let fc = Linear::new(8, 4, true)?;
//! prune::l1_unstructured(&fc, "weight", Amount::Fraction(0.5), Form::InPlace)?;
//! let zeros = fc.weight().to_vec::<f32>()?.iter().filter(|&&v| v == 0.0).count();
//! assert_eq!(zeros, 16);
//! prune::reapply(&fc)?;            // after an optimizer step
//! prune::remove(&fc, "weight")?;   // make it permanent
//! # Ok::<(), strata_core::Error>(())
//! ```

mod apply;
mod mask;

use strata_core::autograd::GradModeGuard;
use strata_core::{DType, Error, Generator, Result, Tensor};

pub use apply::Form;
pub use mask::Amount;

use crate::module::{join_path, Module, ModuleCore};
use crate::optim::{Optimizer, PostStepHandle};
use crate::state::{StateDict, StateDictExt};
use apply::{mask_name, orig_name, State};

fn magnitudes(w: &Tensor) -> Result<Vec<f64>> {
    Ok(w.to(DType::F64)?
        .to_vec::<f64>()?
        .iter()
        .map(|v| v.abs())
        .collect())
}

/// Prunes the `amount` of `name`'s remaining weights with the smallest magnitude.
pub fn l1_unstructured(module: &dyn Module, name: &str, amount: Amount, form: Form) -> Result<()> {
    const OP: &str = "prune::l1_unstructured";
    let core = module.core();
    let st = apply::state(OP, core, name)?;
    let eligible = st.eligible()?;
    let k = mask::count(OP, amount, eligible.iter().filter(|&&e| e).count())?;
    let keep = mask::keep_all_but_lowest(&magnitudes(st.weight())?, &eligible, k);
    apply::apply(OP, core, name, keep, form)
}

/// Prunes `amount` of `name`'s remaining weights chosen at random (from `g`, or the global
/// generator).
pub fn random_unstructured(
    module: &dyn Module,
    name: &str,
    amount: Amount,
    form: Form,
    g: Option<&mut Generator>,
) -> Result<()> {
    const OP: &str = "prune::random_unstructured";
    let core = module.core();
    let st = apply::state(OP, core, name)?;
    let eligible = st.eligible()?;
    let k = mask::count(OP, amount, eligible.iter().filter(|&&e| e).count())?;
    let draw = |g: &mut Generator| {
        (0..eligible.len())
            .map(|_| g.next_f64())
            .collect::<Vec<f64>>()
    };
    let scores = match g {
        Some(g) => draw(g),
        None => draw(&mut strata_core::random::global_generator()),
    };
    let keep = mask::keep_all_but_lowest(&scores, &eligible, k);
    apply::apply(OP, core, name, keep, form)
}

/// Prunes whole slices of `name` along `dim` (output channels for `dim = 0`): the `amount`
/// of the remaining slices with the smallest `n`-norm (`f64::INFINITY` for the largest
/// magnitude).
pub fn ln_structured(
    module: &dyn Module,
    name: &str,
    amount: Amount,
    n: f64,
    dim: i64,
    form: Form,
) -> Result<()> {
    const OP: &str = "prune::ln_structured";
    let core = module.core();
    let st = apply::state(OP, core, name)?;
    let w = st.weight();
    let shape = w.shape().to_vec();
    let d = strata_core::layout::wrap_dim(dim, shape.len()).ok_or_else(|| {
        Error::argument(
            OP,
            format!("dim {dim} is out of range for shape {shape:?}"),
            None,
        )
    })?;
    let eligible = st.eligible()?;
    // A slice is still unpruned while any of its elements is.
    let mut alive = vec![false; shape[d]];
    for (i, &e) in eligible.iter().enumerate() {
        alive[mask::slice_of(i, &shape, d)] |= e;
    }
    let k = mask::count(OP, amount, alive.iter().filter(|&&a| a).count())?;
    let norms = mask::slice_norms(&w.to(DType::F64)?.to_vec::<f64>()?, &shape, d, n);
    let keep_slices = mask::keep_all_but_lowest(&norms, &alive, k);
    let keep = eligible
        .iter()
        .enumerate()
        .map(|(i, &e)| e && keep_slices[mask::slice_of(i, &shape, d)])
        .collect();
    apply::apply(OP, core, name, keep, form)
}

/// Prunes the `amount` of the smallest-magnitude weights across all of `params` together
/// (one global threshold), each given as a module and a parameter name.
pub fn global_unstructured(
    params: &[(&dyn Module, &str)],
    amount: Amount,
    form: Form,
) -> Result<()> {
    const OP: &str = "prune::global_unstructured";
    let mut scores = Vec::new();
    let mut eligible = Vec::new();
    let mut sizes = Vec::new();
    for (m, name) in params {
        let st = apply::state(OP, m.core(), name)?;
        scores.extend(magnitudes(st.weight())?);
        let e = st.eligible()?;
        sizes.push(e.len());
        eligible.extend(e);
    }
    let k = mask::count(OP, amount, eligible.iter().filter(|&&e| e).count())?;
    let keep = mask::keep_all_but_lowest(&scores, &eligible, k);
    let mut at = 0;
    for ((m, name), n) in params.iter().zip(sizes) {
        apply::apply(OP, m.core(), name, keep[at..at + n].to_vec(), form)?;
        at += n;
    }
    Ok(())
}

/// Makes the pruning of `name` permanent and drops its mask (PyTorch's `prune.remove`).
pub fn remove(module: &dyn Module, name: &str) -> Result<()> {
    apply::remove(module.core(), name)
}

/// Whether `name` of `module` is pruned (in either form).
pub fn is_pruned(module: &dyn Module, name: &str) -> bool {
    !matches!(
        apply::state("prune::is_pruned", module.core(), name),
        Ok(State::Plain(_)) | Err(_)
    )
}

/// Zeroes the pruned weights again, in place, for every parameter pruned in
/// [`Form::InPlace`] in `module` and its descendants: run it after each optimizer step.
/// It allocates nothing.
pub fn reapply(module: &dyn Module) -> Result<()> {
    reapply_core(module.core())
}

/// Registers [`reapply`] on `module` as a post-step hook of `opt`, so that pruned weights
/// are zeroed again after every step; remove it with the returned handle.
///
/// ```
/// use strata_core::{DType, Tensor};
/// use strata_nn::optim::{Optimizer, Sgd};
/// use strata_nn::prune::{self, Amount, Form};
/// use strata_nn::{Linear, Module};
/// let fc = Linear::new(8, 4, true)?;
/// prune::l1_unstructured(&fc, "weight", Amount::Fraction(0.5), Form::InPlace)?;
/// let mut opt = Optimizer::sgd(fc.parameters(), Sgd { lr: 0.1, ..Sgd::default() })?;
/// prune::reapply_after_steps(&fc, &mut opt);
/// let x = Tensor::ones(&[2, 8], DType::F32)?;
/// fc.call(&x)?.sum(None, false)?.backward()?;
/// opt.step()?; // moves every weight, then the hook zeroes the pruned ones again
/// let zeros = fc.weight().to_vec::<f32>()?.iter().filter(|&&v| v == 0.0).count();
/// assert_eq!(zeros, 16);
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn reapply_after_steps(module: &dyn Module, opt: &mut Optimizer) -> PostStepHandle {
    let core = module.core().clone();
    opt.register_post_step_hook(move || reapply_core(&core))
}

fn reapply_core(root: &ModuleCore) -> Result<()> {
    let _g = GradModeGuard::no_grad();
    let mut result = Ok(());
    root.visit(&mut |_, core| {
        for (n, mask, _) in core.own_buffers() {
            let Some(param) = n.strip_suffix("_mask") else {
                continue;
            };
            if mask.dtype() != DType::Bool {
                continue;
            }
            if let Some(w) = core.parameter_slot(param) {
                if result.is_ok() {
                    result = w.get().mul_(&mask).map(|_| ());
                }
            }
        }
    });
    result
}

/// The state dict with PyTorch's pruning keys: a parameter pruned in place appears as
/// `<name>_orig` (its masked values) and `<name>_mask` (the mask in the weight's dtype), as
/// PyTorch's reparametrised form saves it; so PyTorch loads it into a module pruned there.
pub fn pytorch_state_dict(module: &dyn Module) -> Result<StateDict> {
    let mut dict = module.state_dict();
    let mut result = Ok(());
    module.core().visit(&mut |prefix, core| {
        for (n, mask, _) in core.own_buffers() {
            let Some(param) = n.strip_suffix("_mask") else {
                continue;
            };
            if mask.dtype() != DType::Bool || result.is_err() {
                continue;
            }
            let key = join_path(prefix, param);
            if let Some(w) = dict.remove(&key) {
                result = mask.to(w.dtype()).map(|m| {
                    dict.insert(join_path(prefix, &mask_name(param)), m);
                    dict.insert(join_path(prefix, &orig_name(param)), w);
                });
            }
        }
    });
    result.map(|_| dict)
}

#[cfg(test)]
mod tests;
