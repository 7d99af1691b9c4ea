//! Gradients summed over several backward passes without `zero_grad`.

use std::sync::{Arc, Mutex};

use strata_nn::optim::Optimizer;

use crate::finding::{Finding, FindingKind};

struct Shared {
    declared: u32,
    found: Vec<Finding>,
    steps: u64,
}

/// Checks, after every step of an optimizer, that no gradient it used was summed over more
/// backward passes than declared (1 unless [`GradWatch::declare_accumulation`] says
/// otherwise). Gradients that are never cleared are not a leak (they accumulate in place)
/// but a silent error: each step uses the sum of every gradient since training began.
///
/// ```
/// use strata_nn::optim::{Optimizer, Sgd};
/// use strata_profile::GradWatch;
/// use strata_core::{DType, Tensor};
/// let w = Tensor::ones(&[4], DType::F32)?.requires_grad_(true)?;
/// let mut opt = Optimizer::sgd([w.clone()], Sgd { lr: 0.1, ..Sgd::default() })?;
/// let watch = GradWatch::attach(&mut opt);
/// for _ in 0..2 {
///     w.mul(&w)?.sum(None, false)?.backward()?;
///     opt.step()?; // no zero_grad: the second step uses two gradients summed
/// }
/// assert_eq!(watch.findings().len(), 1);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[derive(Clone)]
pub struct GradWatch {
    shared: Arc<Mutex<Shared>>,
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl GradWatch {
    /// Watches every step of `optimizer` (through a post-step hook).
    pub fn attach(optimizer: &mut Optimizer) -> GradWatch {
        let shared = Arc::new(Mutex::new(Shared {
            declared: 1,
            found: Vec::new(),
            steps: 0,
        }));
        let params = optimizer.parameters();
        let s = shared.clone();
        optimizer.register_post_step_hook(move || {
            let mut st = lock(&s);
            st.steps += 1;
            let worst = params
                .iter()
                .map(|p| p.grad_accumulations())
                .max()
                .unwrap_or(0);
            if worst > st.declared {
                let step = st.steps;
                let declared = st.declared;
                let stale = params
                    .iter()
                    .filter(|p| p.grad_accumulations() > declared)
                    .count();
                st.found.push(Finding::new(
                    FindingKind::GradNotCleared,
                    format!(
                        "optimizer step {step} used gradients summed over {worst} backward \
                         passes ({stale} of {} parameters), more than the {declared} \
                         declared: call `zero_grad` after each step, or declare gradient \
                         accumulation with `declare_accumulation({worst})` if it is meant",
                        params.len()
                    ),
                ));
            }
            Ok(())
        });
        GradWatch { shared }
    }

    /// Declares that each step uses gradients summed over up to `passes` backward passes
    /// (gradient accumulation).
    pub fn declare_accumulation(&self, passes: u32) {
        lock(&self.shared).declared = passes.max(1);
    }

    /// What the watch found so far, one finding per step that used stale gradients.
    pub fn findings(&self) -> Vec<Finding> {
        lock(&self.shared).found.clone()
    }
}
