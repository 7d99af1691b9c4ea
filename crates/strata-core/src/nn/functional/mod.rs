//! The functional neural-network ops (`torch.nn.functional`): free functions on tensors,
//! each an op of its own (`#[track_caller]`, one [`OpContext`](crate::OpContext)) that
//! validates everything before it allocates and records its own backward where composing
//! other ops would save more than the backward needs.

mod attention;
mod batch_norm;
mod bce_logits;
mod check;
mod class_target;
mod conv;
mod cross_entropy;
mod cross_entropy_with;
mod dropout;
mod embedding;
mod layer_norm;
mod layer_norm_params;
mod linear;
mod loss;
mod loss_reduction;
mod pair;
mod pool;
mod recurrent;

pub use attention::{
    scaled_dot_product_attention, scaled_dot_product_attention_with, sdpa_kernel, SdpBackend,
    SdpaOptions,
};
pub use batch_norm::batch_norm;
pub use bce_logits::binary_cross_entropy_with_logits;
pub use conv::{conv2d, conv2d_with, Conv2dOptions, COLUMN_BUDGET_BYTES};
pub use cross_entropy::{cross_entropy, cross_entropy_ignoring, DEFAULT_IGNORE_INDEX};
pub use cross_entropy_with::{cross_entropy_with, CrossEntropyOptions};
pub use dropout::{dropout, dropout_with};
pub use embedding::{embedding, embedding_with};
pub use layer_norm::layer_norm;
pub use linear::linear;
pub use loss::{l1_loss, mse_loss, nll_loss, nll_loss_ignoring};
pub use loss_reduction::Reduction;
pub use pair::Pair;
pub use pool::{adaptive_avg_pool2d, avg_pool2d, max_pool2d, max_pool2d_with, Pool2dOptions};
pub use recurrent::{gru_cell, gru_layer, lstm_cell, lstm_layer};
