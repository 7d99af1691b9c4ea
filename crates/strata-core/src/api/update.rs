//! The optimizers' fused in-place updates. Forward in [`crate::ops::update`]; the entry
//! runs them outside the graph ([`Entry::run_update`]).

use super::entry::Entry;
use crate::backend::kernel::{AdamStep, SgdStep};
use crate::ops::update as fwd;
use crate::{Result, Tensor};

impl Tensor {
    /// One SGD step in place on this parameter with gradient `grad`, in one pass that
    /// allocates nothing. `momentum_buffer` is required exactly when `step.momentum` is
    /// non-zero (on its first step it is overwritten with the gradient, so it may hold
    /// anything). The parameter and the buffer count one write each.
    ///
    /// ```
    /// use strata_core::{DType, SgdStep, Tensor};
    /// let p = Tensor::ones(&[3], DType::F32)?;
    /// let g = Tensor::full(&[3], 0.5, DType::F32)?;
    /// let step = SgdStep { lr: 0.1, momentum: 0.0, dampening: 0.0, nesterov: false,
    ///     weight_decay: 0.0, maximize: false, first_step: true };
    /// p.sgd_(&g, None, &step)?;
    /// assert_eq!(p.to_vec::<f32>()?, vec![0.95; 3]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn sgd_(
        &self,
        grad: &Tensor,
        momentum_buffer: Option<&Tensor>,
        step: &SgdStep,
    ) -> Result<()> {
        let mut operands = vec![self, grad];
        operands.extend(momentum_buffer);
        Entry::new("sgd_step_", &operands)?
            .run_update(|ctx, _| fwd::sgd(ctx, self, grad, momentum_buffer, step))
    }

    /// One Adam (or AdamW, with `decoupled_weight_decay`) step in place on this parameter
    /// with gradient `grad`, in one pass that allocates nothing; `state` is
    /// `[exp_avg, exp_avg_sq]`, with `max_exp_avg_sq` third under amsgrad.
    ///
    /// ```
    /// use strata_core::{AdamStep, DType, Tensor};
    /// let p = Tensor::ones(&[4], DType::F32)?;
    /// let g = Tensor::full(&[4], 0.5, DType::F32)?;
    /// let (m, v) = (Tensor::zeros(&[4], DType::F32)?, Tensor::zeros(&[4], DType::F32)?);
    /// let step = AdamStep { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0,
    ///     decoupled_weight_decay: false, amsgrad: false, maximize: false, step: 1 };
    /// p.adam_(&g, &[&m, &v], &step)?;
    /// // Adam's first step moves every element by about lr.
    /// assert!(p.to_vec::<f32>()?.iter().all(|x| (x - 0.9).abs() < 1e-6));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn adam_(&self, grad: &Tensor, state: &[&Tensor], step: &AdamStep) -> Result<()> {
        let mut operands = vec![self, grad];
        operands.extend_from_slice(state);
        Entry::new("adam_step_", &operands)?
            .run_update(|ctx, _| fwd::adam(ctx, self, grad, state, step))
    }
}
