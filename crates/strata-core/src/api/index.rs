//! Indexed reads and writes: `index_select`, `gather` and `scatter_add` (with their `out=`
//! forms), `masked_fill` (also in place and into a given tensor) and `index_add_`. Forward in
//! [`crate::ops::index`], backward in [`crate::autograd::formulas::index`].

use super::entry::Entry;
use crate::autograd::formulas::index::{self as grad, Overwrite};
use crate::ops::index::{self as fwd, gather, out};
use crate::{Result, Scalar, Tensor};

impl Tensor {
    /// The slices `index[0], index[1], ...` of dimension `dim`, copied into a new contiguous
    /// tensor whose `dim` has `index.numel()` elements. `index` is a 0-d or 1-d i64 or i32
    /// tensor; every index must lie in `0..size(dim)`.
    ///
    /// ```
    /// use strata_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[3, 2])?;
    /// let rows = x.index_select(0, &Tensor::from_vec(vec![2i64, 0], &[2])?)?;
    /// assert_eq!(rows.to_vec::<i64>()?, vec![5, 6, 1, 2]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn index_select(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        Entry::new("index_select", &[self, index])?.run(
            |ctx, x| gather::index_select(ctx, x[0], dim, x[1]),
            |ctx, x, out| grad::index_select(ctx, x[0], dim, x[1], out),
        )
    }

    /// Picks along `dim`: `out[i][j][k] = self[index[i][j][k]][j][k]` for `dim == 0`, and so
    /// on. `index` (i64 or i32) has as many dimensions as `self` and is no larger than it
    /// outside `dim`; the result has `index`'s shape and is contiguous.
    ///
    /// ```
    /// use strata_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2., 3., 4.], &[2, 2])?;
    /// let i = Tensor::from_vec(vec![1i64, 1, 0, 1], &[2, 2])?;
    /// assert_eq!(x.gather(1, &i)?.to_vec::<f32>()?, vec![2., 2., 3., 4.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn gather(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        Entry::new("gather", &[self, index])?.run(
            |ctx, x| gather::gather(ctx, x[0], dim, x[1]),
            |ctx, x, out| grad::gather(ctx, x[0], dim, x[1], out),
        )
    }

    /// A contiguous copy of `self` with `src`'s values added at the positions `index` names
    /// along `dim` (`result[index[i][j]][j] += src[i][j]` for `dim == 0`); repeated indices
    /// accumulate. `index` (i64 or i32) has as many dimensions as `self` and `src`, and is no
    /// larger than `src` anywhere nor than `self` outside `dim`; `src` has `self`'s dtype.
    ///
    /// ```
    /// use strata_core::Tensor;
    /// let x = Tensor::from_vec(vec![0i64; 3], &[3])?;
    /// let i = Tensor::from_vec(vec![2i64, 0, 2], &[3])?;
    /// let src = Tensor::from_vec(vec![1i64, 2, 3], &[3])?;
    /// assert_eq!(x.scatter_add(0, &i, &src)?.to_vec::<i64>()?, vec![2, 0, 4]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn scatter_add(&self, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        Entry::new("scatter_add", &[self, index, src])?.run(
            |ctx, x| gather::scatter_add(ctx, x[0], dim, x[1], x[2]),
            |ctx, x, out| grad::scatter_add(ctx, x[0], dim, x[1], x[2], out),
        )
    }

    /// [`Tensor::index_select`] into `out`, which must have `self`'s dtype and share no memory
    /// with `self` or `index`. An `out` of another shape is resized (contiguous, keeping its
    /// storage) as PyTorch does; one of the right shape keeps its strides. Returns `out`, whose
    /// version goes up by one.
    #[track_caller]
    pub fn index_select_out(&self, dim: i64, index: &Tensor, out: &Tensor) -> Result<Tensor> {
        Entry::new("index_select_out", &[self, index])?.run_out(out, |ctx, x| {
            out::index_select_out(ctx, x[0], dim, x[1], out)
        })
    }

    /// [`Tensor::gather`] into `out`, which must have `self`'s dtype and share no memory with
    /// `self` or `index`. An `out` of the index's shape keeps its strides; one of another
    /// shape is resized. Returns `out`, whose version goes up by one.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2., 3., 4.], &[2, 2])?;
    /// let i = Tensor::from_vec(vec![1i64, 1, 0, 1], &[2, 2])?;
    /// let out = Tensor::zeros(&[2, 2], DType::F32)?;
    /// x.gather_out(1, &i, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![2., 2., 3., 4.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn gather_out(&self, dim: i64, index: &Tensor, out: &Tensor) -> Result<Tensor> {
        Entry::new("gather_out", &[self, index])?
            .run_out(out, |ctx, x| out::gather_out(ctx, x[0], dim, x[1], out))
    }

    /// [`Tensor::scatter_add`] into `out`: `self` copied into `out`, then `src` added at the
    /// positions `index` names. `out` must have `self`'s dtype; it may be `self` itself (then
    /// nothing is copied: this is `scatter_add_` without autograd), but must share no memory
    /// with `index` or `src`. An `out` of `self`'s shape keeps its strides; one of another
    /// shape is resized. Returns `out`, whose version goes up by one.
    #[track_caller]
    pub fn scatter_add_out(
        &self,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
        out: &Tensor,
    ) -> Result<Tensor> {
        Entry::new("scatter_add_out", &[self, index, src])?.run_out(out, |ctx, x| {
            out::scatter_add_out(ctx, x[0], dim, x[1], x[2], out)
        })
    }

    /// A copy of `self` with `value` where `mask` is true (`mask` broadcasts to `self`).
    #[track_caller]
    pub fn masked_fill(&self, mask: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        let value = value.into();
        Entry::new("masked_fill", &[self, mask])?.run(
            |ctx, x| fwd::masked_fill(ctx, x[0], x[1], value),
            |ctx, x, out| grad::masked_fill(ctx, x[0], x[1], out),
        )
    }

    /// [`Tensor::masked_fill`] written into `out`, which must have `self`'s dtype: `self`
    /// where `mask` is false, `value` where it is true, both broadcast. An `out` of the
    /// broadcast shape is written where it is, in one pass; one of another shape is resized.
    /// `out` may be `self` itself. Returns `out`, whose version goes up by one.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2., 3.], &[3])?;
    /// let out = Tensor::zeros(&[3], DType::F32)?;
    /// x.masked_fill_out(&x.gt(1.5)?, -1.0, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![1., -1., -1.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn masked_fill_out(
        &self,
        mask: &Tensor,
        value: impl Into<Scalar>,
        out: &Tensor,
    ) -> Result<Tensor> {
        let value = value.into();
        Entry::new("masked_fill_out", &[self, mask])?.run_out(out, |ctx, x| {
            fwd::masked_fill_out(ctx, x[0], x[1], value, out)
        })
    }

    /// Writes `value` where `mask` is true, in place.
    #[track_caller]
    pub fn masked_fill_(&self, mask: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        let value = value.into();
        Entry::new("masked_fill_", &[self, mask])?.run_inplace(
            |ctx, x| grad::overwrite_begin(ctx, x[0], &Overwrite::MaskedFill(x[1])),
            |ctx, x| fwd::masked_fill_(ctx, x[0], x[1], value),
            |rec, x| grad::overwrite_finish(rec, Overwrite::MaskedFill(x[1])),
        )
    }

    /// Adds `alpha * source[i]` to `self[index[i]]` along `dim`, in place; repeated indices
    /// accumulate.
    #[track_caller]
    pub fn index_add_(
        &self,
        dim: i64,
        index: &Tensor,
        source: &Tensor,
        alpha: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let alpha = alpha.into();
        Entry::new("index_add_", &[self, index, source])?.run_inplace(
            |ctx, x| grad::overwrite_begin(ctx, x[0], &Overwrite::IndexAdd(dim, x[1], x[2], alpha)),
            |ctx, x| fwd::index_add_(ctx, x[0], dim, x[1], x[2], alpha),
            |rec, x| grad::overwrite_finish(rec, Overwrite::IndexAdd(dim, x[1], x[2], alpha)),
        )
    }
}
