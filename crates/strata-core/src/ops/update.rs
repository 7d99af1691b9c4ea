//! Fused in-place parameter updates, the kernels optimizers are built on: one pass over a
//! parameter, its gradient and its state per step, allocating nothing. The public methods
//! ([`Tensor::sgd_`], [`Tensor::adam_`]) are in `api/update.rs`.
//!
//! The updates record no backward (an optimizer steps outside the graph, as PyTorch's
//! `torch.no_grad()` step) and bump the version of every tensor they write, so a graph that
//! saved a parameter before the step refuses to run backward with its new value.

use crate::backend::args::UpdateArgs;
use crate::backend::for_device;
use crate::backend::kernel::{AdamStep, SgdStep, UpdatePtrs, UpdateRule};
use crate::op::OpContext;
use crate::storage::{lock_storages, Access};
use crate::{Error, Result, Tensor};

/// One SGD step in place on `param` with gradient `grad`, after checking the step's
/// settings; `momentum_buffer` is required exactly when `step.momentum` is non-zero.
pub(crate) fn sgd(
    ctx: &OpContext,
    param: &Tensor,
    grad: &Tensor,
    momentum_buffer: Option<&Tensor>,
    step: &SgdStep,
) -> Result<()> {
    if step.nesterov && (step.momentum <= 0.0 || step.dampening != 0.0) {
        return Err(Error::argument(
            ctx.op(),
            format!(
                "nesterov momentum needs momentum > 0 and dampening 0, got momentum {} and \
                 dampening {}",
                step.momentum, step.dampening
            ),
            Some("set nesterov to false, or give a positive momentum and no dampening"),
        ));
    }
    let state: Vec<&Tensor> = momentum_buffer.into_iter().collect();
    apply(ctx, param, grad, &state, UpdateRule::Sgd(*step))
}

/// One Adam (or AdamW) step in place on `param` with gradient `grad`, after checking the
/// step number; `state` is `[exp_avg, exp_avg_sq]`, with `max_exp_avg_sq` third under amsgrad.
pub(crate) fn adam(
    ctx: &OpContext,
    param: &Tensor,
    grad: &Tensor,
    state: &[&Tensor],
    step: &AdamStep,
) -> Result<()> {
    if step.step == 0 {
        return Err(Error::argument(
            ctx.op(),
            "the step number counts from 1, got 0",
            Some("increment the step count before the update"),
        ));
    }
    apply(ctx, param, grad, state, UpdateRule::Adam(*step))
}

/// Checks the operands of `rule` and runs it: everything is validated before anything is
/// written.
fn apply(
    ctx: &OpContext,
    param: &Tensor,
    grad: &Tensor,
    state: &[&Tensor],
    rule: UpdateRule,
) -> Result<()> {
    let op = ctx.op();
    if state.len() != rule.state_count() {
        return Err(Error::argument(
            op,
            format!(
                "this update needs {} state tensors, got {}",
                rule.state_count(),
                state.len()
            ),
            None,
        ));
    }
    if !param.dtype().is_floating() {
        return Err(Error::dtype(
            op,
            format!("parameters must be floating, got {}", param.dtype()),
            None,
        ));
    }
    let layout = param.layout();
    if !layout.is_non_overlapping_and_dense() {
        return Err(Error::argument(
            op,
            format!(
                "the parameter (shape {:?}, strides {:?}) is not dense: its elements do not \
                 fill one block of memory",
                param.shape(),
                param.stride()
            ),
            Some("optimize a dense tensor (a view's base, or .contiguous())"),
        ));
    }
    for (what, t) in std::iter::once(("gradient", grad)).chain(state.iter().map(|t| ("state", *t)))
    {
        if t.shape() != param.shape() || t.dtype() != param.dtype() {
            return Err(Error::shape(
                op,
                format!(
                    "the {what} must match its parameter: got {} {:?} for a {} {:?} parameter",
                    t.dtype(),
                    t.shape(),
                    param.dtype(),
                    param.shape()
                ),
                vec![t.shape().to_vec(), param.shape().to_vec()],
            ));
        }
        if t.device() != param.device() {
            return Err(Error::DeviceMismatch {
                op,
                first: param.device(),
                second: t.device(),
            });
        }
    }
    for s in state {
        if s.stride() != param.stride() {
            return Err(Error::argument(
                op,
                format!(
                    "optimizer state must be laid out like its parameter: strides {:?}, \
                     parameter strides {:?}",
                    s.stride(),
                    param.stride()
                ),
                Some("create state with the parameter's strides (empty_like)"),
            ));
        }
    }
    let written: Vec<&Tensor> = std::iter::once(param)
        .chain(state.iter().copied())
        .collect();
    for (i, a) in written.iter().enumerate() {
        if grad.shares_storage(a) || written[..i].iter().any(|b| b.shares_storage(a)) {
            return Err(Error::Overlap {
                op,
                message: "the parameter, its gradient and its state must not share memory".into(),
                hint: Some("give each state tensor its own storage".into()),
            });
        }
    }
    // A gradient laid out otherwise than its parameter is copied into the parameter's
    // layout (accumulated gradients already are).
    let grad = if grad.stride() == param.stride() {
        grad.clone()
    } else {
        grad.copy_into_new(ctx, layout.clone(), grad.dtype())?
    };
    let backend = for_device(param.device())?;
    let n = param.numel();
    let esize = param.dtype().size();
    let (pb, gb) = (param.body(), grad.body());
    let bodies: Vec<_> = state.iter().map(|s| s.body()).collect();
    let mut locks = vec![(&*pb.storage, Access::Write), (&*gb.storage, Access::Read)];
    locks.extend(bodies.iter().map(|b| (&*b.storage, Access::Write)));
    let guards = lock_storages(&locks);
    let mut ptrs = UpdatePtrs {
        param: guards
            .write_ptr(&pb.storage)
            .wrapping_add(pb.layout.offset() * esize),
        grad: guards
            .read_ptr(&gb.storage)
            .wrapping_add(gb.layout.offset() * esize),
        state: [std::ptr::null_mut(); 3],
        n,
    };
    for (slot, b) in ptrs.state.iter_mut().zip(&bodies) {
        *slot = guards
            .write_ptr(&b.storage)
            .wrapping_add(b.layout.offset() * esize);
    }
    // SAFETY: every operand has the parameter's shape, dtype and strides, and those are
    // dense, so each covers `n` elements from its offset; the written storages are distinct
    // from each other and from the gradient's (checked above), and stay locked until `guards`
    // drops.
    unsafe {
        backend.update(&UpdateArgs {
            rule: &rule,
            dtype: param.dtype(),
            ptrs: &ptrs,
        })
    };
    drop(guards);
    for _ in 1..rule.param_writes() {
        pb.storage.bump_version(op);
    }
    for t in &written {
        t.body().storage.bump_version(op);
    }
    Ok(())
}
