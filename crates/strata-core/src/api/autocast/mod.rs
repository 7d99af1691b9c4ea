//! Mixed precision: PyTorch's CPU autocast, and the cast seam it is built on.
//!
//! Every op passes its tensor operands through one cast decision at its entry. With no
//! autocast region or cast policy open on any thread (the default) that is one relaxed
//! atomic load and nothing is cast. Inside a region opened with [`autocast`] (or
//! [`with_autocast`]), the op's floating operands are cast as the tables below say, the op
//! runs on the casts, and its result comes out in the casts' dtype. The casts are ordinary
//! recorded ops, so gradients flow back through them and reach each input in its own dtype.
//!
//! ```
//! use strata_core::autocast::{autocast, autocast_dtype};
//! use strata_core::nn::functional::{cross_entropy, linear, Reduction};
//! use strata_core::{DType, Tensor};
//! let x = Tensor::ones(&[2, 4], DType::F32)?;
//! let w = Tensor::ones(&[3, 4], DType::F32)?.requires_grad_(true)?;
//! let target = Tensor::from_vec(vec![0i64, 2], &[2])?;
//! let loss = {
//!     let _region = autocast(DType::BF16)?;
//!     assert_eq!(autocast_dtype(), Some(DType::BF16));
//!     let logits = linear(&x, &w, None)?;          // bf16
//!     assert_eq!(logits.dtype(), DType::BF16);
//!     cross_entropy(&logits, &target, Reduction::Mean)? // f32
//! };
//! assert_eq!(loss.dtype(), DType::F32);
//! loss.backward()?;
//! assert_eq!(w.grad().unwrap().dtype(), DType::F32);
//! # Ok::<(), strata_core::Error>(())
//! ```
//!
//! # The policy (PyTorch's CPU lists)
//!
//! Inside a region of dtype `D` (bf16, the default [`DEFAULT_CPU_AUTOCAST_DTYPE`], or f16):
//!
//! | ops | operands cast | result |
//! |---|---|---|
//! | `matmul` `mm` `bmm` `addmm` `linear` `conv2d` | f32, f16, bf16 → `D` | `D` |
//! | `cross_entropy` `nll_loss` `mse_loss` `l1_loss` `binary_cross_entropy_with_logits` `prod` | f16, bf16 → f32 | f32 |
//! | `cat` `stack` | to the widest: f32 if any operand is f32, else `D` | that dtype |
//! | every other op (`softmax`, `log_softmax`, `layer_norm`, `batch_norm`, `log`, `exp`, `sum`, element-wise, ...) | none | as outside |
//!
//! PyTorch's CPU lists name more ops than strata has (`conv1d`, `conv3d`, the transposed
//! convolutions, `baddbmm`, `addbmm`, `prelu`, `scaled_dot_product_attention` in lower
//! precision; `smooth_l1_loss`, `huber_loss`, `kl_div` and other losses in f32); they join
//! the tables as the ops are added (the lists in `api/autocast/policy.rs`).
//!
//! `cat` and `stack` follow PyTorch's promotion in operand order: starting from `D`, an f32
//! operand makes the type f32, and an operand of the other half dtype (f16 in a bf16 region,
//! bf16 in an f16 one) is refused with `Err` while the type is still `D` (so `[f32, f16]` in
//! a bf16 region joins in f32, `[f16, f32]` is refused, as in PyTorch).
//!
//! Never cast, whatever the op:
//! - f64 operands, integer and bool operands (they stay as they are; the op then sees mixed
//!   dtypes exactly as PyTorch's does);
//! - in-place ops (`add_`, `mul_`, ...), `out=` forms (`matmul_out`, `cat_out`, ...) and
//!   views: they run on their operands as outside a region;
//! - the parts of an op (an op's operands are cast once, at its own entry). Ops composed of
//!   public ops, such as `lstm_cell` and `gru_cell`, are not in the tables: their `linear`s
//!   are cast, and the rest runs in the promoted dtypes, as PyTorch's CPU cells do.
//!
//! Gradients: each cast is a recorded `to`, so an f32 parameter used by a bf16 `linear` gets
//! an f32 gradient. bf16 has f32's exponent range, so bf16 autocast needs no gradient scaler;
//! f16 training usually wants one.
//!
//! # The cast cache
//!
//! Within the outermost region, the cast to `D` of a leaf f32 tensor that requires grad (a
//! parameter) is made once and reused by every op that needs it (PyTorch's `cached_cast`);
//! the cache is cleared when the outermost region closes. An entry is keyed by the tensor's
//! identity and remembers its version and storage, so a parameter changed in place inside a
//! region is cast afresh.
//!
//! # Regions, policies and threads
//!
//! Regions are per thread and nest: [`autocast_dtype`] is the innermost region's dtype, and
//! dropping an [`AutocastGuard`] restores the state around it. A custom [`CastPolicy`]
//! installed with [`with_cast_policy`] is a scope on the same per-thread stack: the innermost
//! scope (a policy or a region) decides. [`crate::autograd::checkpoint`] records the autocast
//! state of its forward and recomputes in that state during backward. Backward itself runs
//! in the state of the thread that calls it, as PyTorch's does: call it after the region
//! closes.

mod cache;
mod policy;
mod region;
mod seam;

pub(crate) use region::without_autocast;
pub use region::{
    autocast, autocast_default, autocast_dtype, with_autocast, AutocastGuard,
    DEFAULT_CPU_AUTOCAST_DTYPE,
};
pub(crate) use seam::{cast_inputs, may_cast};
pub use seam::{with_cast_policy, CastPolicy};
