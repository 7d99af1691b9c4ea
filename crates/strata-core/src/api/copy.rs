//! Copies and fills: `copy_`, `deep_clone` (PyTorch's `clone`), `contiguous`, `to`, `fill_`,
//! `zero_`. Forward in [`crate::ops::copy`], backward in [`crate::autograd::formulas::copy`].

use super::entry::Entry;
use crate::autograd::formulas::copy as grad;
use crate::ops::copy as fwd;
use crate::{DType, Device, Result, Scalar, Tensor};

#[track_caller]
fn fill(x: &Tensor, name: &'static str, value: Scalar) -> Result<Tensor> {
    Entry::new(name, &[x])?.run_inplace(
        |ctx, x| grad::fill_inplace_begin(ctx, x[0]),
        |ctx, x| fwd::fill_(ctx, x[0], value),
        |rec, _| grad::fill_inplace_finish(rec),
    )
}

impl Tensor {
    /// Copies `src` (broadcast to this tensor's shape, converted to its dtype) into this
    /// tensor, in place. Copying a tensor onto exactly itself moves nothing but is still a
    /// write: it is checked and recorded like any other, and the version goes up. Between
    /// the host and a CUDA device (either way) the values move first, as
    /// [`Tensor::to_device`] moves them, then copy in.
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> Result<Tensor> {
        let (to, from) = (self.device(), src.device());
        if to != from && to != Device::Meta && from != Device::Meta {
            return self.copy_(&src.to_device(to)?);
        }
        Entry::new("copy_", &[self, src])?.run_inplace(
            // A copy onto exactly itself moves nothing but is checked and recorded like
            // any other write, as PyTorch refuses it wherever it refuses an in-place write.
            |ctx, x| grad::copy_inplace_begin(ctx, x[0], x[1]),
            |ctx, x| fwd::copy_(ctx, x[0], x[1]),
            |rec, x| grad::copy_inplace_finish(rec, x[1]),
        )
    }

    /// A new tensor with a copy of the data: PyTorch's `clone()`. (Rust's `.clone()` on a
    /// `Tensor` copies the handle, not the data.) A dense layout keeps its strides; any other
    /// keeps its dimension order with dense strides.
    #[track_caller]
    pub fn deep_clone(&self) -> Result<Tensor> {
        Entry::new("clone", &[self])?.run(
            |ctx, x| fwd::deep_clone(ctx, x[0]),
            |ctx, x, out| grad::copy(ctx, "CloneBackward0", x[0], out),
        )
    }

    /// This tensor itself when it is already contiguous, else a contiguous copy.
    #[track_caller]
    pub fn contiguous(&self) -> Result<Tensor> {
        Entry::new("contiguous", &[self])?.run(
            |ctx, x| fwd::contiguous(ctx, x[0]),
            |ctx, x, out| {
                if out.is_same(x[0]) {
                    return Ok(());
                }
                grad::copy(ctx, "CloneBackward0", x[0], out)
            },
        )
    }

    /// This tensor converted to `dtype`: itself when the dtype already matches, else a copy
    /// that keeps a dense layout's strides (and any other layout's memory order).
    #[track_caller]
    pub fn to(&self, dtype: DType) -> Result<Tensor> {
        self.to_by("to", dtype)
    }

    /// [`to`](Tensor::to) made by autocast or a cast policy at an op's entry: the op name
    /// `autocast_to` tells these casts apart in memory reports and the profiler.
    #[track_caller]
    pub(crate) fn autocast_to(&self, dtype: DType) -> Result<Tensor> {
        self.to_by("autocast_to", dtype)
    }

    #[track_caller]
    fn to_by(&self, op: &'static str, dtype: DType) -> Result<Tensor> {
        Entry::new(op, &[self])?.run(
            |ctx, x| fwd::to(ctx, x[0], dtype),
            |ctx, x, out| {
                if out.is_same(x[0]) {
                    return Ok(());
                }
                grad::copy(ctx, "ToCopyBackward0", x[0], out)
            },
        )
    }

    /// Sets every element to `value` (converted to this tensor's dtype; a value that
    /// overflows it is refused, see [`Scalar::overflows`]).
    #[track_caller]
    pub fn fill_(&self, value: impl Into<Scalar>) -> Result<Tensor> {
        fill(self, "fill_", value.into())
    }

    /// Sets every element to zero.
    #[track_caller]
    pub fn zero_(&self) -> Result<Tensor> {
        fill(self, "zero_", Scalar::Int(0))
    }
}
