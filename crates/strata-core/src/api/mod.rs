//! The public ops: every `Tensor` method and function that computes, as one layer above
//! autograd (as PyTorch's autograd layer sits above its kernels).
//!
//! Each public op goes through one [`entry::Entry`], which captures the call site, checks
//! devices, applies the mixed-precision policy and decides whether autograd records, then
//! calls the op's infer-and-forward function in [`crate::ops`] and, when recording, its
//! backward formula in [`crate::autograd::formulas`]. The files here mirror both by name:
//! `api/unary.rs` joins `ops/unary.rs` and `autograd/formulas/unary.rs`.

pub mod autocast;
mod binary;
mod copy;
pub(crate) mod entry;
mod index;
mod joining;
mod matmul;
mod operators;
mod reduce;
mod reduce_out;
mod roll;
mod softmax;
pub(crate) mod ternary;
mod to_device;
mod triangular;
mod unary;
mod update;
mod views;
