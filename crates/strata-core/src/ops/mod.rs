//! The ops. Each public op is a `#[track_caller]` method that enters an [`crate::OpContext`],
//! validates everything (*infer*), then allocates and runs (*execute*).

pub mod binary;
mod contiguous;
pub mod copy;
mod dense_sum;
pub(crate) mod erf_f32;
pub mod index;
pub(crate) mod iter;
pub mod joining;
pub mod matmul;
pub mod operators;
pub(crate) mod out;
pub mod promote;
pub mod reduce;
mod reduce_out;
pub(crate) mod reduction;
pub mod softmax;
mod softmax_row_simd;
pub mod ternary;
pub mod unary;
pub mod views;
