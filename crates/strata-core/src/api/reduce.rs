//! Reductions: `sum`, `mean`, `prod`, `amax`, `amin`, `max`/`min` with indices,
//! `argmax`/`argmin`, `var`/`std`, `norm`, `logsumexp`, and the dimension-wise `cumsum`.
//! Forward in [`crate::ops::reduce`], backward in [`crate::autograd::formulas::reduce`].

use super::entry::Entry;
use crate::autograd::formulas::reduce::{self as grad, Reduce};
use crate::layout::int_arg::IntArg;
use crate::op::OpContext;
use crate::ops::reduce as fwd;
use crate::{Result, Tensor};

/// A reduction `r` of `x` over `dims`, computed by `forward`.
#[track_caller]
fn reduction<D: IntArg>(
    x: &Tensor,
    name: &'static str,
    r: Reduce,
    dims: Option<&[D]>,
    keepdim: bool,
    forward: impl FnOnce(&OpContext, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    Entry::new(name, &[x])?.run(
        |ctx, x| forward(ctx, x[0]),
        |ctx, x, out| grad::reduction(ctx, r, x[0], dims, keepdim, out),
    )
}

/// `max`/`min` along `dim`, values and indices.
#[track_caller]
fn max_dim(
    x: &Tensor,
    name: &'static str,
    dim: i64,
    keepdim: bool,
    max: bool,
) -> Result<(Tensor, Tensor)> {
    Entry::new(name, &[x])?.run(
        |ctx, x| fwd::max_dim(ctx, x[0], dim, keepdim, max, None),
        |ctx, x, (values, indices)| {
            grad::arg_reduction(ctx, max, x[0], dim, keepdim, values, indices)
        },
    )
}

impl Tensor {
    /// Sum over `dims` (all when `None`); integers and bools sum to i64.
    #[track_caller]
    pub fn sum(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        reduction(self, "sum", Reduce::Sum, dims, keepdim, |ctx, x| {
            fwd::sum(ctx, x, dims, keepdim, None)
        })
    }

    /// [`Tensor::sum`] over dimensions strata's own code holds as `usize`s.
    #[track_caller]
    pub(crate) fn sum_over(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        reduction(self, "sum", Reduce::Sum, Some(dims), keepdim, |ctx, x| {
            fwd::sum(ctx, x, Some(dims), keepdim, None)
        })
    }

    /// Mean over `dims` (floating tensors only; an empty reduction is NaN).
    #[track_caller]
    pub fn mean(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        reduction(self, "mean", Reduce::Mean, dims, keepdim, |ctx, x| {
            fwd::mean(ctx, x, dims, keepdim, None)
        })
    }

    /// [`Tensor::mean`] over dimensions strata's own code holds as `usize`s.
    #[track_caller]
    pub(crate) fn mean_over(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        reduction(self, "mean", Reduce::Mean, Some(dims), keepdim, |ctx, x| {
            fwd::mean(ctx, x, Some(dims), keepdim, None)
        })
    }

    /// Product over `dims`; integers and bools multiply to i64.
    #[track_caller]
    pub fn prod(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        reduction(self, "prod", Reduce::Prod, dims, keepdim, |ctx, x| {
            fwd::prod(ctx, x, dims, keepdim, None)
        })
    }

    /// [`Tensor::prod`] over dimensions strata's own code holds as `usize`s.
    #[track_caller]
    pub(crate) fn prod_over(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        reduction(self, "prod", Reduce::Prod, Some(dims), keepdim, |ctx, x| {
            fwd::prod(ctx, x, Some(dims), keepdim, None)
        })
    }

    /// Largest element over `dims` (NaN if any is NaN).
    #[track_caller]
    pub fn amax(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        reduction(self, "amax", Reduce::Amax, dims, keepdim, |ctx, x| {
            fwd::amax(ctx, x, dims, keepdim, true, None)
        })
    }

    /// Smallest element over `dims` (NaN if any is NaN).
    #[track_caller]
    pub fn amin(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        reduction(self, "amin", Reduce::Amin, dims, keepdim, |ctx, x| {
            fwd::amax(ctx, x, dims, keepdim, false, None)
        })
    }

    /// Largest values along `dim` and their first positions.
    #[track_caller]
    pub fn max_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        max_dim(self, "max", dim, keepdim, true)
    }

    /// Smallest values along `dim` and their first positions.
    #[track_caller]
    pub fn min_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        max_dim(self, "min", dim, keepdim, false)
    }

    /// Position of the largest element along `dim` (over the flattened tensor when `None`).
    #[track_caller]
    pub fn argmax(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        Entry::new("argmax", &[self])?
            .run_untracked(|ctx, x| fwd::arg_index(ctx, x[0], dim, keepdim, true, None))
    }

    /// Position of the smallest element along `dim` (over the flattened tensor when `None`).
    #[track_caller]
    pub fn argmin(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        Entry::new("argmin", &[self])?
            .run_untracked(|ctx, x| fwd::arg_index(ctx, x[0], dim, keepdim, false, None))
    }

    /// Variance over `dims` with Bessel-style `correction` (1 = sample variance), computed in
    /// two passes (mean, then squared deviations) for accuracy.
    #[track_caller]
    pub fn var(&self, dims: Option<&[i64]>, correction: f64, keepdim: bool) -> Result<Tensor> {
        reduction(
            self,
            "var",
            Reduce::Var(correction),
            dims,
            keepdim,
            |ctx, x| fwd::var(ctx, x, dims, correction, keepdim, false, None),
        )
    }

    /// [`Tensor::var`] over dimensions strata's own code holds as `usize`s.
    #[track_caller]
    pub(crate) fn var_over(
        &self,
        dims: &[usize],
        correction: f64,
        keepdim: bool,
    ) -> Result<Tensor> {
        reduction(
            self,
            "var",
            Reduce::Var(correction),
            Some(dims),
            keepdim,
            |ctx, x| fwd::var(ctx, x, Some(dims), correction, keepdim, false, None),
        )
    }

    /// Standard deviation: the square root of [`Tensor::var`].
    #[track_caller]
    pub fn std(&self, dims: Option<&[i64]>, correction: f64, keepdim: bool) -> Result<Tensor> {
        reduction(
            self,
            "std",
            Reduce::Std(correction),
            dims,
            keepdim,
            |ctx, x| fwd::var(ctx, x, dims, correction, keepdim, true, None),
        )
    }

    /// The vector `p`-norm over `dims` (all when `None`): p = 2, 1, 0 (count of non-zeros),
    /// ±infinity (largest / smallest magnitude), or any other real `p`.
    #[track_caller]
    pub fn norm(&self, p: f64, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        reduction(self, "norm", Reduce::Norm(p), dims, keepdim, |ctx, x| {
            fwd::norm(ctx, x, p, dims, keepdim, None)
        })
    }

    /// `log(sum(exp(x)))` over `dims`, computed stably around the maximum.
    #[track_caller]
    pub fn logsumexp(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        reduction(
            self,
            "logsumexp",
            Reduce::Logsumexp,
            dims,
            keepdim,
            |ctx, x| fwd::logsumexp(ctx, x, dims, keepdim, None),
        )
    }

    /// Running sums along `dim` (integers and bools accumulate in i64); contiguous result.
    #[track_caller]
    pub fn cumsum(&self, dim: i64) -> Result<Tensor> {
        Entry::new("cumsum", &[self])?.run(
            |ctx, x| fwd::cumsum(ctx, x[0], dim, None),
            |ctx, x, out| grad::cumsum(ctx, x[0], dim, out),
        )
    }
}
