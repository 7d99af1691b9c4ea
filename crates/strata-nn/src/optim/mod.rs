//! Optimizers, learning-rate schedules and gradient clipping (`torch.optim`,
//! `torch.nn.utils.clip_grad_*`).
//!
//! - [`Optimizer`]: SGD (momentum, dampening, nesterov, weight decay, maximize), Adam and
//!   AdamW (amsgrad, weight decay), with parameter groups. A step is one fused in-place pass
//!   per parameter and allocates nothing after the first; the state is exactly what the
//!   rule needs (1× the parameters' bytes for SGD with momentum, 2× for Adam, 3× with
//!   amsgrad), counted as optimizer state. Post-step hooks; state dicts in PyTorch's layout.
//! - Optimizer in backward ([`Optimizer::set_step_in_backward`]): each parameter is stepped
//!   as soon as its gradient is complete and the gradient freed at once.
//! - [`Scheduler`] over a [`Schedule`]: StepLR, MultiStepLR, CosineAnnealingLR, LinearLR,
//!   SequentialLR.
//! - [`clip_grad_norm_`] and [`clip_grad_value_`], in place.

pub(crate) mod clip;
mod config;
pub(crate) mod in_backward;
mod optimizer;
mod scheduler;
mod state_dict;
#[cfg(test)]
mod tests;

pub use clip::{clip_grad_norm_, clip_grad_value_};
pub use config::{Adam, Rule, Sgd};
pub use optimizer::{Optimizer, ParamGroup, PostStepHandle};
pub use scheduler::{Schedule, Scheduler};
