//! The ops. Each public op is a `#[track_caller]` method that enters an [`crate::OpContext`],
//! validates everything (*infer*), then allocates and runs (*execute*).

pub(crate) mod attention;
pub(crate) mod batch_norm;
pub mod binary;
mod cell_operands;
pub(crate) mod columns;
mod contiguous;
pub mod copy;
pub(crate) mod direct_conv;
pub(crate) mod gru_cell;
pub mod index;
pub(crate) mod iter;
pub mod joining;
pub(crate) mod layer_norm;
pub(crate) mod lstm_cell;
pub mod matmul;
pub(crate) mod out;
pub(crate) mod pool;
pub mod promote;
pub mod reduce;
pub mod softmax;
pub mod ternary;
pub(crate) mod transfer;
pub mod unary;
pub(crate) mod update;
pub mod views;
