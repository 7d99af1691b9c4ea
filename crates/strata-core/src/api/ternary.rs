//! Three-operand element-wise ops: `where`, `addcmul` (both also into a given tensor), and
//! the fused multiply-add that backward formulas use to round as PyTorch's compiled kernels
//! do. Forward in [`crate::ops::ternary`], backward in [`crate::autograd::formulas::ternary`].

use super::entry::Entry;
use crate::autograd::formulas::ternary as grad;
use crate::ops::ternary as fwd;
use crate::{Result, Scalar, Tensor};

/// `a * b + c` with a single rounding, all three broadcast; floating dtypes only. Not
/// recorded by autograd: backward formulas use it where PyTorch's kernels are compiled to
/// fused multiply-adds, so that gradients dominated by cancellation round the same way.
#[track_caller]
pub(crate) fn fused_mul_add(a: &Tensor, b: &Tensor, c: &Tensor) -> Result<Tensor> {
    Entry::new("fused_mul_add", &[a, b, c])?
        .run_untracked(|ctx, x| fwd::fused_mul_add(ctx, x[0], x[1], x[2]))
}

impl Tensor {
    /// Elements of `a` where `condition` is true (bool, or u8 non-zero), else of `b`; all
    /// three broadcast (PyTorch's out-of-place `torch.where(condition, a, b)`).
    #[track_caller]
    pub fn where_cond(condition: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        Entry::new("where", &[condition, a, b])?.run(
            |ctx, x| fwd::where_cond(ctx, x[0], x[1], x[2]),
            |ctx, x, out| grad::where_cond(ctx, x[0], x[1], x[2], out),
        )
    }

    /// [`Tensor::where_cond`] written into `out`, which must have the promoted dtype of `a`
    /// and `b` exactly (as in PyTorch). An `out` of the broadcast shape is written where it
    /// is; one of another shape is resized. Returns `out`, whose version goes up by one.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let c = Tensor::from_vec(vec![true, false], &[2])?;
    /// let (a, b) = (Tensor::ones(&[2], DType::F32)?, Tensor::zeros(&[2], DType::F32)?);
    /// let out = Tensor::zeros(&[0], DType::F32)?;
    /// Tensor::where_out(&c, &a, &b, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![1., 0.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn where_out(condition: &Tensor, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Tensor> {
        Entry::new("where_out", &[condition, a, b])?
            .run_out(out, |ctx, x| fwd::where_out(ctx, x[0], x[1], x[2], out))
    }

    /// `self + value * t1 * t2`, all broadcast (with integer tensors a float `value` is
    /// truncated, as in PyTorch).
    #[track_caller]
    pub fn addcmul(&self, t1: &Tensor, t2: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        let value = value.into();
        Entry::new("addcmul", &[self, t1, t2])?.run(
            |ctx, x| fwd::addcmul(ctx, x[0], x[1], x[2], value),
            |ctx, x, out| grad::addcmul(ctx, x[0], x[1], x[2], value, out),
        )
    }

    /// [`Tensor::addcmul`] written into `out`, whose dtype must hold the promoted result. An
    /// `out` of the broadcast shape is written where it is; one of another shape is resized.
    /// Returns `out`, whose version goes up by one.
    #[track_caller]
    pub fn addcmul_out(
        &self,
        t1: &Tensor,
        t2: &Tensor,
        value: impl Into<Scalar>,
        out: &Tensor,
    ) -> Result<Tensor> {
        let value = value.into();
        Entry::new("addcmul_out", &[self, t1, t2])?.run_out(out, |ctx, x| {
            fwd::addcmul_out(ctx, x[0], x[1], x[2], value, out)
        })
    }
}
