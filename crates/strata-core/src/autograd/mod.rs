//! Reverse-mode autograd with PyTorch's memory semantics.
//!
//! - A leaf asks for gradients with
//!   [`Tensor::requires_grad_`](crate::Tensor::requires_grad_); every op recorded on it gives
//!   its result a `grad_fn` node that holds only what its backward needs (saved tensors are
//!   checked against their version counter when used).
//! - [`Tensor::backward`](crate::Tensor::backward) walks the graph once, accumulates into
//!   leaves' `.grad` (taking the first gradient over without a copy) and frees each node's
//!   saved tensors as it goes; a second backward through freed nodes is an error unless the
//!   first passed `retain_graph`.
//! - Dropping the last tensor of a graph frees it, iteratively.
//! - [`no_grad`], [`enable_grad`] and [`inference_mode`] are thread-local; ops decide at
//!   their entry whether they record.
//! - [`saved_tensors_hooks`] packs what autograd saves (to bf16, to host memory, or nowhere
//!   as [`checkpoint`] does).
//!
//! ```
//! use strata_core::{DType, Tensor};
//! let w = Tensor::from_vec(vec![0.5f32, -1.0], &[2])?.requires_grad_(true)?;
//! let x = Tensor::from_vec(vec![2.0f32, 3.0], &[2])?;
//! let loss = w.mul(&x)?.tanh()?.sum(None, false)?;
//! loss.backward()?;
//! let g = w.grad().unwrap().to_vec::<f32>()?;
//! assert!((g[0] - 2.0 * (1.0 - 1f32.tanh().powi(2))).abs() < 1e-6);
//! # Ok::<(), strata_core::Error>(())
//! ```

mod accumulate;
mod checkpoint;
pub(crate) mod engine;
pub(crate) mod formulas;
mod gradcheck;
pub(crate) mod record;
mod saved;
pub(crate) mod selective;
mod tensor_api;
pub(crate) mod view;

pub use crate::mode::{
    enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad, GradModeGuard,
};
pub use crate::tensor::graph_usage::{live_graph, saved_storages, GraphUsage, SavedStorage};
pub use checkpoint::{checkpoint, checkpoint_selective};
pub use gradcheck::{gradcheck, GradcheckOptions};
pub use saved::{save_on_cpu, saved_tensors_hooks, Packed};
pub use selective::{CheckpointPolicy, SelectivePolicy};
pub use tensor_api::{grad, grad_with, HookHandle};

#[cfg(test)]
mod tests;
