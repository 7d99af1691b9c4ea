//! The functional neural-network ops (`torch.nn.functional`): free functions on tensors,
//! each an op of its own (`#[track_caller]`, one [`OpContext`](crate::OpContext)) that
//! validates everything before it allocates and records its own backward where composing
//! other ops would save more than the backward needs.

mod check;
mod class_target;
mod conv;
mod cross_entropy;
mod dropout;
mod embedding;
mod layer_norm;
mod linear;
mod loss;
mod pair;
mod pool;
mod reduction;

pub use conv::conv2d;
pub use cross_entropy::{cross_entropy, cross_entropy_ignoring, DEFAULT_IGNORE_INDEX};
pub use dropout::{dropout, dropout_with};
pub use embedding::embedding;
pub use layer_norm::layer_norm;
pub use linear::linear;
pub use loss::{mse_loss, nll_loss, nll_loss_ignoring};
pub use pair::Pair;
pub use pool::max_pool2d;
pub use reduction::Reduction;
