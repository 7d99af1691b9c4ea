//! `softmax` and `log_softmax` along one dimension, into a new tensor or a given one. Forward
//! in [`crate::ops::softmax`], backward in [`crate::autograd::formulas::softmax`].

use super::entry::Entry;
use crate::autograd::formulas::softmax as grad;
use crate::ops::softmax as fwd;
use crate::{Result, Tensor};

#[track_caller]
fn softmax(x: &Tensor, name: &'static str, dim: i64, log: bool) -> Result<Tensor> {
    Entry::new(name, &[x])?.run(
        |ctx, x| fwd::softmax(ctx, x[0], dim, log),
        |ctx, x, out| grad::softmax(ctx, log, x[0], dim, out),
    )
}

#[track_caller]
fn softmax_out(
    x: &Tensor,
    name: &'static str,
    dim: i64,
    log: bool,
    out: &Tensor,
) -> Result<Tensor> {
    Entry::new(name, &[x])?.run_out(out, |ctx, x| fwd::softmax_out(ctx, x[0], dim, log, out))
}

impl Tensor {
    /// `exp(x) / sum(exp(x))` along `dim`, computed around the maximum so it never
    /// overflows; a new contiguous tensor (f16/bf16 computed in f32).
    ///
    /// ```
    /// use strata_core::{Tensor, DType};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 1000.0, 1000.0, 1000.0], &[2, 3])?;
    /// let p = x.softmax(-1)?.to_vec::<f32>()?;
    /// assert!((p[0..3].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    /// assert!((p[3] - 1.0 / 3.0).abs() < 1e-6);           // no overflow at 1000
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        softmax(self, "softmax", dim, false)
    }

    /// `log(softmax(x))` along `dim`, computed as `x - max - log(sum(exp(x - max)))`, which
    /// stays finite where `softmax` underflows to 0.
    #[track_caller]
    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        softmax(self, "log_softmax", dim, true)
    }

    /// [`Tensor::softmax`] written into `out`, which must have `self`'s dtype. A contiguous
    /// `out` of `self`'s shape that does not share memory with `self` is written directly;
    /// a non-contiguous `out`, or `self` itself, receives the result through a temporary
    /// contiguous tensor (the kernel writes whole contiguous slices). A non-contiguous
    /// `self` is copied first, as for [`Tensor::softmax`]. Returns `out`, whose version goes
    /// up by one.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![0.0f32, 0.0], &[2])?;
    /// let out = Tensor::zeros(&[0], DType::F32)?;
    /// x.softmax_out(0, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![0.5, 0.5]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn softmax_out(&self, dim: i64, out: &Tensor) -> Result<Tensor> {
        softmax_out(self, "softmax_out", dim, false, out)
    }

    /// [`Tensor::log_softmax`] written into `out`, as [`Tensor::softmax_out`].
    #[track_caller]
    pub fn log_softmax_out(&self, dim: i64, out: &Tensor) -> Result<Tensor> {
        softmax_out(self, "log_softmax_out", dim, true, out)
    }
}
