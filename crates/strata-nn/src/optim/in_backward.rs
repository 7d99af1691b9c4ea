//! Optimizer in backward: each parameter is stepped by a post-accumulate-grad hook as soon
//! as its gradient is complete, and the gradient is freed at once, so at most one
//! parameter's gradient is alive at a time instead of all of them.
//!
//! It cannot combine with what needs every gradient before any step: a GradScaler (inf and
//! NaN checks over all gradients), `clip_grad_norm_` (the total norm) and gradient
//! accumulation (gradients summed over several backwards). Each combination is an error
//! that names both.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};

use strata_core::{Error, Result, Tensor};

use super::optimizer::{check_grad, lock, Inner, Optimizer};

thread_local! {
    /// Grad scalers on this thread that scaled a loss and have not updated since.
    static SCALED_LOSSES: Cell<usize> = const { Cell::new(0) };
}

/// A grad scaler scaled a loss (it counts until it updates or drops).
pub(crate) fn scaled_loss_opened() {
    SCALED_LOSSES.with(|c| c.set(c.get() + 1));
}

/// A grad scaler that had scaled a loss updated or dropped.
pub(crate) fn scaled_loss_closed() {
    SCALED_LOSSES.with(|c| c.set(c.get().saturating_sub(1)));
}

/// Whether a loss scaled by a grad scaler may be going through backward on this thread.
fn loss_is_scaled() -> bool {
    SCALED_LOSSES.with(Cell::get) > 0
}

/// Storage ids of the parameters of optimizers that step in backward.
static STEPPED_IN_BACKWARD: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

fn registry<R>(f: impl FnOnce(&mut HashSet<u64>) -> R) -> R {
    let mut guard = STEPPED_IN_BACKWARD
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashSet::new))
}

/// The error for asking for optimizer-in-backward together with `other`.
pub(crate) fn combination_error(op: &'static str, other: &str) -> Error {
    Error::argument(
        op,
        format!(
            "optimizer-in-backward cannot combine with {other}: it steps each parameter as \
             soon as its gradient is complete and frees that gradient, but {other} needs \
             every gradient before any step"
        ),
        Some(
            "turn step-in-backward off (set_step_in_backward(false)) to use it, or drop it \
             (bf16 autocast needs no GradScaler)",
        ),
    )
}

/// Refuses `op` on parameters whose optimizer steps in backward.
pub(crate) fn refuse_if_stepped_in_backward(
    op: &'static str,
    params: &[Tensor],
    other: &str,
) -> Result<()> {
    let hit = registry(|r| params.iter().any(|p| r.contains(&p.storage_id())));
    if hit {
        return Err(combination_error(op, other));
    }
    Ok(())
}

impl Optimizer {
    /// Turns optimizer-in-backward on or off. On, every parameter that requires grad is
    /// stepped during backward, right after its gradient is accumulated, and its gradient is
    /// then dropped; [`Optimizer::step`] only runs the post-step hooks, and `zero_grad` has
    /// nothing to clear. The parameters end bitwise equal to stepping after backward.
    ///
    /// Refused while any parameter holds a gradient (gradient accumulation needs every
    /// gradient before the step).
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// use strata_nn::optim::{Adam, Optimizer};
    /// let w = Tensor::ones(&[3], DType::F32)?.requires_grad_(true)?;
    /// let mut opt = Optimizer::adam([w.clone()], Adam { lr: 0.1, ..Adam::default() })?;
    /// opt.set_step_in_backward(true)?;
    /// w.mul(&w)?.sum(None, false)?.backward()?; // steps w, frees its gradient
    /// assert!(w.grad().is_none());
    /// assert!(w.to_vec::<f32>()?.iter().all(|x| (x - 0.9).abs() < 1e-6));
    /// opt.step()?; // runs the post-step hooks
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    pub fn set_step_in_backward(&mut self, on: bool) -> Result<()> {
        if on == self.in_backward.is_some() {
            return Ok(());
        }
        if !on {
            self.stop_stepping_in_backward();
            return Ok(());
        }
        let params = self.parameters();
        if params.iter().any(|p| p.grad().is_some()) {
            return Err(combination_error(
                "set_step_in_backward",
                "gradient accumulation (parameters already hold gradients)",
            ));
        }
        let mut handles = Vec::with_capacity(params.len());
        let mut index = 0;
        for group in 0..self.group_count() {
            for p in self.group_params(group)? {
                let i = index;
                index += 1;
                if !p.requires_grad() {
                    continue;
                }
                let weak = Arc::downgrade(&self.inner);
                let handle = p.register_post_accumulate_grad_hook(move |leaf| {
                    step_in_backward(&weak, i, group, leaf)
                });
                match handle {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        handles.into_iter().for_each(|h| h.remove());
                        return Err(e);
                    }
                }
            }
        }
        registry(|r| r.extend(params.iter().map(Tensor::storage_id)));
        self.in_backward = Some(handles);
        Ok(())
    }

    /// Whether the optimizer steps in backward.
    pub fn is_stepping_in_backward(&self) -> bool {
        self.in_backward.is_some()
    }

    fn stop_stepping_in_backward(&mut self) {
        if let Some(handles) = self.in_backward.take() {
            handles.into_iter().for_each(|h| h.remove());
            let ids: Vec<u64> = self.parameters().iter().map(Tensor::storage_id).collect();
            registry(|r| ids.iter().for_each(|id| _ = r.remove(id)));
        }
    }
}

impl Drop for Optimizer {
    fn drop(&mut self) {
        self.stop_stepping_in_backward();
    }
}

/// The hook of parameter `index` of group `group`: steps it with its complete gradient and
/// drops the gradient.
fn step_in_backward(
    inner: &Weak<Mutex<Inner>>,
    index: usize,
    group: usize,
    leaf: &Tensor,
) -> Result<()> {
    if loss_is_scaled() {
        return Err(combination_error("backward", "a GradScaler"));
    }
    let (Some(inner), Some(grad)) = (inner.upgrade(), leaf.grad()) else {
        return Ok(());
    };
    check_grad(leaf, &grad)?;
    lock(&inner).step_one(index, group, leaf, &grad)?;
    drop(grad);
    leaf.set_grad(None)
}
