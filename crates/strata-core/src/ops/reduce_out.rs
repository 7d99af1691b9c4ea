//! The `out=` forms of the reductions, with PyTorch's dtype rules: `sum`, `prod` and
//! `cumsum` compute in the output's dtype (each element converted to it first), `mean`,
//! `var`, `std` and `logsumexp` write any floating dtype the result may be cast to, and the
//! others require the result's dtype exactly.
//!
//! Each is the out-of-place reduction with its destination swapped: the same folds fill the
//! same per-result accumulators, which are then written through the output's strides. An
//! output of the result's shape is written where it is and nothing is allocated; one of
//! another shape is resized first. The output's version goes up by one (each of the two
//! outputs of `max_dim_out`/`min_dim_out` by one), and the returned tensor is the output.

use crate::autograd::record::refuse_out_with_grad;
use crate::op::OpContext;
use crate::ops::binary::check_cast;
use crate::ops::out::expect_dtype;
use crate::{DType, Error, Result, Tensor};

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
        let ctx = OpContext::enter("sum_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        self.sum_in(&ctx, dims, keepdim, Some(out))
    }

    /// [`Tensor::mean`] written into `out`, which must be floating (computed in its dtype).
    #[track_caller]
    pub fn mean_out(&self, dims: Option<&[i64]>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("mean_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        check_cast(ctx.op(), self.dtype(), out.dtype())?;
        self.mean_in(&ctx, dims, keepdim, Some(out))
    }

    /// [`Tensor::prod`] written into `out`, computed in `out`'s dtype as for
    /// [`Tensor::sum_out`].
    #[track_caller]
    pub fn prod_out(&self, dims: Option<&[i64]>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("prod_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        self.prod_in(&ctx, dims, keepdim, Some(out))
    }

    /// [`Tensor::amax`] written into `out`, which must have `self`'s dtype.
    #[track_caller]
    pub fn amax_out(&self, dims: Option<&[i64]>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("amax_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        expect_dtype(ctx.op(), out, self.dtype())?;
        self.amax_in(&ctx, dims, keepdim, true, Some(out))
    }

    /// [`Tensor::amin`] written into `out`, which must have `self`'s dtype.
    #[track_caller]
    pub fn amin_out(&self, dims: Option<&[i64]>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("amin_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        expect_dtype(ctx.op(), out, self.dtype())?;
        self.amax_in(&ctx, dims, keepdim, false, Some(out))
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
        let ctx = OpContext::enter("max_out");
        self.max_dim_out_in(&ctx, dim, keepdim, true, values, indices)
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
        let ctx = OpContext::enter("min_out");
        self.max_dim_out_in(&ctx, dim, keepdim, false, values, indices)
    }

    fn max_dim_out_in(
        &self,
        ctx: &OpContext,
        dim: i64,
        keepdim: bool,
        max: bool,
        values: &Tensor,
        indices: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        refuse_out_with_grad(ctx.op(), &[self], values)?;
        refuse_out_with_grad(ctx.op(), &[self], indices)?;
        expect_dtype(ctx.op(), values, self.dtype())?;
        expect_dtype(ctx.op(), indices, DType::I64)?;
        self.max_dim_in(ctx, dim, keepdim, max, Some((values, indices)))
    }

    /// [`Tensor::argmax`] written into `out`, which must be i64.
    #[track_caller]
    pub fn argmax_out(&self, dim: Option<i64>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("argmax_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        expect_dtype(ctx.op(), out, DType::I64)?;
        self.arg_index_in(&ctx, dim, keepdim, true, Some(out))
    }

    /// [`Tensor::argmin`] written into `out`, which must be i64.
    #[track_caller]
    pub fn argmin_out(&self, dim: Option<i64>, keepdim: bool, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("argmin_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        expect_dtype(ctx.op(), out, DType::I64)?;
        self.arg_index_in(&ctx, dim, keepdim, false, Some(out))
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
        let ctx = OpContext::enter("var_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        check_cast(ctx.op(), self.dtype(), out.dtype())?;
        self.var_in(&ctx, dims, correction, keepdim, false, Some(out))
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
        let ctx = OpContext::enter("std_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        check_cast(ctx.op(), self.dtype(), out.dtype())?;
        self.var_in(&ctx, dims, correction, keepdim, true, Some(out))
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
        let ctx = OpContext::enter("norm_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        expect_dtype(ctx.op(), out, self.dtype())?;
        self.norm_in(&ctx, p, dims, keepdim, Some(out))
    }

    /// [`Tensor::logsumexp`] written into `out`, which may have any floating dtype.
    #[track_caller]
    pub fn logsumexp_out(
        &self,
        dims: Option<&[i64]>,
        keepdim: bool,
        out: &Tensor,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("logsumexp_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        if !out.dtype().is_floating() {
            return Err(Error::dtype(
                ctx.op(),
                format!(
                    "the output must be floating to hold a logsumexp, got {}",
                    out.dtype()
                ),
                Some("pass an f32 or f64 output"),
            ));
        }
        self.logsumexp_in(&ctx, dims, keepdim, Some(out))
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
        let ctx = OpContext::enter("cumsum_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        self.cumsum_in(&ctx, dim, Some(out))
    }
}

#[cfg(test)]
mod tests;
