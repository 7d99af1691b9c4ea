//! [`plan`]: a training step of a model and its optimizer, planned on meta replicas of both.

use std::collections::HashMap;
use std::sync::Arc;

use strata_core::autocast::autocast;
use strata_core::{DType, Tensor};
use strata_nn::amp::GradScaler;
use strata_nn::optim::{Optimizer, ParamGroup};
use strata_nn::Module;

use super::{plan_step, InputSpec, PlanOptions, PlanReport};
use crate::{ProfileError, Result};

/// How the planned training step runs.
#[derive(Debug, Clone, Default)]
pub struct StepOptions {
    /// Forward and loss under autocast to this dtype (bf16, or f16 with a `GradScaler`).
    pub autocast: Option<DType>,
    /// Step each parameter inside backward (also when the optimizer given does).
    pub optimizer_in_backward: bool,
    /// The planning allocators.
    pub allocators: PlanOptions,
}

/// Every tensor of a module by name: parameters, then buffers.
fn tensors(m: &dyn Module) -> Vec<(String, Tensor)> {
    let mut out = m.named_parameters();
    out.extend(m.named_buffers());
    out
}

/// Checks that `replica` has `model`'s parameters and buffers: the same names, shapes and
/// dtypes, in the same order.
fn check_replica(model: &dyn Module, replica: &dyn Module) -> Result<()> {
    let (a, b) = (tensors(model), tensors(replica));
    let describe = |t: &Tensor| format!("{:?} {}", t.shape(), t.dtype());
    for i in 0..a.len().max(b.len()) {
        match (a.get(i), b.get(i)) {
            (Some((n, x)), Some((m, y)))
                if n == m && x.shape() == y.shape() && x.dtype() == y.dtype() => {}
            (x, y) => {
                let show = |e: Option<&(String, Tensor)>| {
                    e.map_or("nothing".to_owned(), |(n, t)| {
                        format!("`{n}` {}", describe(t))
                    })
                };
                return Err(ProfileError::Plan(format!(
                    "the replica differs from the model at tensor {i}: the model has {}, the \
                     replica {}; build the replica with the model's constructor and options",
                    show(x),
                    show(y)
                )));
            }
        }
    }
    Ok(())
}

/// The optimizer's groups, options and rule over the replica's parameters (matched by name).
fn replicate_optimizer(
    optimizer: &Optimizer,
    model: &dyn Module,
    replica: &dyn Module,
) -> Result<Optimizer> {
    let names: Vec<(String, Tensor)> = model.named_parameters();
    let twins: HashMap<String, Tensor> = replica.named_parameters().into_iter().collect();
    let mut groups = Vec::new();
    for g in 0..optimizer.group_count() {
        let mut params = Vec::new();
        for p in optimizer.group_params(g)? {
            let twin = names
                .iter()
                .find(|(_, t)| t.is_same(&p))
                .and_then(|(n, _)| twins.get(n));
            match twin {
                Some(t) => params.push(t.clone()),
                None => {
                    return Err(ProfileError::Plan(format!(
                        "parameter group {g} of the optimizer holds a {:?} tensor that is not \
                         a parameter of the model; plan a model whose parameters the \
                         optimizer steps",
                        p.shape()
                    )))
                }
            }
        }
        groups.push(
            ParamGroup::new(params)
                .lr(optimizer.lr(g)?)
                .weight_decay(optimizer.weight_decay(g)?),
        );
    }
    Ok(Optimizer::with_groups(groups, optimizer.rule())?)
}

/// Plans one training step of `model` and `optimizer` on a batch shaped as `inputs`:
/// forward and loss (`loss` runs the model on the batch), backward, the optimizer step and
/// `zero_grad(set_to_none)`, after one warm-up step that makes the optimizer's state.
/// `replica` builds the model again (it runs with meta as the default device, so it
/// allocates no memory); it must have the model's parameter and buffer names, shapes and
/// dtypes. The optimizer is copied with its rule, groups and options. `model` and
/// `optimizer` are only read: their values, storages and the CPU's statistics do not change.
///
/// ```
/// use std::sync::Arc;
/// use strata_core::nn::functional::{cross_entropy, Reduction};
/// use strata_core::DType;
/// use strata_nn::optim::{Adam, Optimizer};
/// use strata_nn::{Linear, Module};
/// use strata_profile::plan::{plan, InputSpec, StepOptions};
/// let model = Linear::new(784, 10, true)?;
/// let opt = Optimizer::adam(model.parameters(), Adam::default())?;
/// let report = plan(
///     &model,
///     &opt,
///     || Ok(Arc::new(Linear::new(784, 10, true)?) as Arc<dyn Module>),
///     &[InputSpec::new(&[64, 784], DType::F32), InputSpec::new(&[64], DType::I64)],
///     |m, batch| cross_entropy(&m.call(&batch[0])?, &batch[1], Reduction::Mean),
///     &StepOptions::default(),
/// )?;
/// // The gradients (31,360 bytes rounded to 31,744, and 40 to 512) are part of it.
/// assert!(report.peak_allocated >= 31_744 + 512);
/// # Ok::<(), strata_profile::ProfileError>(())
/// ```
pub fn plan<R, L>(
    model: &dyn Module,
    optimizer: &Optimizer,
    replica: R,
    inputs: &[InputSpec],
    loss: L,
    options: &StepOptions,
) -> Result<PlanReport>
where
    R: FnOnce() -> strata_core::Result<Arc<dyn Module>>,
    L: Fn(&dyn Module, &[Tensor]) -> strata_core::Result<Tensor>,
{
    let setup = || -> Result<(Arc<dyn Module>, Optimizer, Option<GradScaler>)> {
        let r = replica()?;
        check_replica(model, r.as_ref())?;
        if model.is_training() {
            r.train();
        } else {
            r.eval();
        }
        let mut opt = replicate_optimizer(optimizer, model, r.as_ref())?;
        if options.optimizer_in_backward || optimizer.is_stepping_in_backward() {
            opt.set_step_in_backward(true)?;
        }
        let scaler = (options.autocast == Some(DType::F16)).then(GradScaler::new);
        Ok((r, opt, scaler))
    };
    let step = |state: &mut (Arc<dyn Module>, Optimizer, Option<GradScaler>),
                batch: &[Tensor]|
     -> Result<()> {
        let (r, opt, scaler) = state;
        let l = {
            let _region = options.autocast.map(autocast).transpose()?;
            loss(r.as_ref(), batch)?
        };
        match scaler {
            Some(s) => {
                s.scale(&l)?.backward()?;
                s.step(opt)?;
                s.update()?;
            }
            None => {
                l.backward()?;
                opt.step()?;
            }
        }
        opt.zero_grad(true)?;
        Ok(())
    };
    plan_step(inputs, &options.allocators, setup, step)
}
