//! The `out=` forms of the reductions. Forward in [`crate::ops::reduce::out`]; the entry
//! refuses them when autograd would have to record them (they have no backward).

use super::entry::Entry;
use crate::ops::reduce::out as fwd;
use crate::{Result, Tensor};

impl Tensor {
    /// [`Tensor::sum`] written into `out`. The sum is computed in `out`'s dtype, whatever it
    /// is: each element is converted to it first (so a float input summed into an i64
    /// output truncates every element), as PyTorch does.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2., 3., 4.], &[2, 2])?;
    /// let out = Tensor::zeros(&[2], DType::F64)?;
    /// x.sum_out(Some(&[0]), false, &out)?;
    /// assert_eq!(out.to_vec::<f64>()?, vec![4., 6.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn sum_out(&self, dims: Option<&[i64]>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        Entry::new("sum_out", &[self])?
            .run_out(out, |ctx, x| fwd::sum(ctx, x[0], dims, keepdim, out))
    }

    /// [`Tensor::mean`] written into `out`, which must be floating (computed in its dtype).
    #[track_caller]
    pub fn mean_out(&self, dims: Option<&[i64]>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        Entry::new("mean_out", &[self])?
            .run_out(out, |ctx, x| fwd::mean(ctx, x[0], dims, keepdim, out))
    }

    /// [`Tensor::prod`] written into `out`, computed in `out`'s dtype as for
    /// [`Tensor::sum_out`].
    #[track_caller]
    pub fn prod_out(&self, dims: Option<&[i64]>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        Entry::new("prod_out", &[self])?
            .run_out(out, |ctx, x| fwd::prod(ctx, x[0], dims, keepdim, out))
    }

    /// [`Tensor::amax`] written into `out`, which must have `self`'s dtype.
    #[track_caller]
    pub fn amax_out(&self, dims: Option<&[i64]>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        Entry::new("amax_out", &[self])?
            .run_out(out, |ctx, x| fwd::amax(ctx, x[0], dims, keepdim, true, out))
    }

    /// [`Tensor::amin`] written into `out`, which must have `self`'s dtype.
    #[track_caller]
    pub fn amin_out(&self, dims: Option<&[i64]>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        Entry::new("amin_out", &[self])?.run_out(out, |ctx, x| {
            fwd::amax(ctx, x[0], dims, keepdim, false, out)
        })
    }

    /// [`Tensor::max_dim`] written into `values` (of `self`'s dtype) and `indices` (i64),
    /// which must not share memory. Returns both.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1i64, 5, 3, 2], &[2, 2])?;
    /// let (v, i) = (Tensor::zeros(&[0], DType::I64)?, Tensor::zeros(&[0], DType::I64)?);
    /// x.max_dim_out(1, false, &v, &i)?;
    /// assert_eq!((v.to_vec::<i64>()?, i.to_vec::<i64>()?), (vec![5, 3], vec![1, 0]));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn max_dim_out(
        &self,
        dim: i64,
        keepdim: bool,
        values: &Tensor,
        indices: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        Entry::new("max_out", &[self])?.run_outs(&[values, indices], |ctx, x| {
            fwd::max_dim(ctx, x[0], dim, keepdim, true, (values, indices))
        })
    }

    /// [`Tensor::min_dim`] written into `values` and `indices`, as [`Tensor::max_dim_out`].
    #[track_caller]
    pub fn min_dim_out(
        &self,
        dim: i64,
        keepdim: bool,
        values: &Tensor,
        indices: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        Entry::new("min_out", &[self])?.run_outs(&[values, indices], |ctx, x| {
            fwd::max_dim(ctx, x[0], dim, keepdim, false, (values, indices))
        })
    }

    /// [`Tensor::argmax`] written into `out`, which must be i64.
    #[track_caller]
    pub fn argmax_out(&self, dim: Option<i64>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        Entry::new("argmax_out", &[self])?.run_out(out, |ctx, x| {
            fwd::arg_index(ctx, x[0], dim, keepdim, true, out)
        })
    }

    /// [`Tensor::argmin`] written into `out`, which must be i64.
    #[track_caller]
    pub fn argmin_out(&self, dim: Option<i64>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        Entry::new("argmin_out", &[self])?.run_out(out, |ctx, x| {
            fwd::arg_index(ctx, x[0], dim, keepdim, false, out)
        })
    }

    /// [`Tensor::var`] written into `out`, which must be floating.
    #[track_caller]
    pub fn var_out(
        &self,
        dims: Option<&[i64]>,
        correction: f64,
        keepdim: bool,
        out: &Tensor,
    ) -> Result<Tensor> {
        Entry::new("var_out", &[self])?.run_out(out, |ctx, x| {
            fwd::var(ctx, x[0], dims, correction, keepdim, false, out)
        })
    }

    /// [`Tensor::std`] written into `out`, which must be floating.
    #[track_caller]
    pub fn std_out(
        &self,
        dims: Option<&[i64]>,
        correction: f64,
        keepdim: bool,
        out: &Tensor,
    ) -> Result<Tensor> {
        Entry::new("std_out", &[self])?.run_out(out, |ctx, x| {
            fwd::var(ctx, x[0], dims, correction, keepdim, true, out)
        })
    }

    /// [`Tensor::norm`] written into `out`, which must have `self`'s dtype.
    #[track_caller]
    pub fn norm_out(
        &self,
        p: f64,
        dims: Option<&[i64]>,
        keepdim: bool,
        out: &Tensor,
    ) -> Result<Tensor> {
        Entry::new("norm_out", &[self])?
            .run_out(out, |ctx, x| fwd::norm(ctx, x[0], p, dims, keepdim, out))
    }

    /// [`Tensor::logsumexp`] written into `out`, which may have any floating dtype.
    #[track_caller]
    pub fn logsumexp_out(
        &self,
        dims: Option<&[i64]>,
        keepdim: bool,
        out: &Tensor,
    ) -> Result<Tensor> {
        Entry::new("logsumexp_out", &[self])?
            .run_out(out, |ctx, x| fwd::logsumexp(ctx, x[0], dims, keepdim, out))
    }

    /// [`Tensor::cumsum`] written into `out` (of `self`'s shape), computed in `out`'s dtype:
    /// each element is converted to it, then accumulated in f64 (floating) or i64. `out` may
    /// be `self` itself.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1i64, 2, 3], &[3])?;
    /// x.cumsum_out(0, &x)?;
    /// assert_eq!(x.to_vec::<i64>()?, vec![1, 3, 6]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn cumsum_out(&self, dim: i64, out: &Tensor) -> Result<Tensor> {
        Entry::new("cumsum_out", &[self])?.run_out(out, |ctx, x| fwd::cumsum(ctx, x[0], dim, out))
    }
}
