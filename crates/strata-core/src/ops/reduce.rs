//! Reductions: `sum`, `mean`, `prod`, `amax`, `amin`, `max`/`min` with indices,
//! `argmax`/`argmin`, `var`/`std`, `norm`, `logsumexp`, and the dimension-wise `cumsum`, each
//! into a new contiguous tensor (as PyTorch's are) or, through their `_out` forms, into a
//! given tensor.

use crate::autograd::formulas::reduce::{self as reduce_grad, Reduce};
use crate::dtype::Element;
use crate::layout::{wrap_dim, Layout};
use crate::op::OpContext;
use crate::ops::dense_sum::dense_sum;
use crate::ops::out::{check_distinct_outputs, check_memory, Aliasing};
use crate::ops::reduction::{
    finish, floating_only, scan_sum, sum_dtype, ArgReduction, Dest, Reduction,
};
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// `sum` into a new tensor or `out` (whose dtype the sum is then computed in, each
    /// element converted to it first, as PyTorch does).
    pub(crate) fn sum_in(
        &self,
        ctx: &OpContext,
        dims: Option<&[i64]>,
        keepdim: bool,
        out: Option<&Tensor>,
    ) -> Result<Tensor> {
        let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
        let natural = sum_dtype(self.dtype());
        let dtype = out.map_or(natural, Tensor::dtype);
        let dest = Dest::prepare(ctx, out, &r.out_shape, &[self])?;
        if dtype.is_floating() {
            let fast = if dtype == natural {
                dense_sum(self, &r.mask)
            } else {
                None
            };
            let v = fast
                .unwrap_or_else(|| r.fold_as(self, dtype, 0.0f64, None, |x, _| x, |a, x| a + x));
            finish(ctx, &v, &r.out_shape, dtype, dest)
        } else {
            let v = r.fold_as(self, dtype, 0i64, None, |x, _| x, |a, x| a.wrapping_add(x));
            finish(ctx, &v, &r.out_shape, dtype, dest)
        }
    }

    /// `mean` into a new tensor or `out` (computed in `out`'s floating dtype).
    pub(crate) fn mean_in(
        &self,
        ctx: &OpContext,
        dims: Option<&[i64]>,
        keepdim: bool,
        out: Option<&Tensor>,
    ) -> Result<Tensor> {
        floating_only(ctx.op(), self)?;
        let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
        let dtype = out.map_or(self.dtype(), Tensor::dtype);
        let dest = Dest::prepare(ctx, out, &r.out_shape, &[self])?;
        let n = r.count as f64;
        let fast = if dtype == self.dtype() {
            dense_sum(self, &r.mask)
        } else {
            None
        };
        let v: Vec<f64> = fast
            .unwrap_or_else(|| r.fold_as(self, dtype, 0.0f64, None, |x, _| x, |a, x| a + x))
            .into_iter()
            .map(|s| s / n)
            .collect();
        finish(ctx, &v, &r.out_shape, dtype, dest)
    }

    /// `prod` into a new tensor or `out` (computed in `out`'s dtype, as for `sum`).
    pub(crate) fn prod_in(
        &self,
        ctx: &OpContext,
        dims: Option<&[i64]>,
        keepdim: bool,
        out: Option<&Tensor>,
    ) -> Result<Tensor> {
        let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
        let dtype = out.map_or(sum_dtype(self.dtype()), Tensor::dtype);
        let dest = Dest::prepare(ctx, out, &r.out_shape, &[self])?;
        if matches!(dtype, DType::F16 | DType::BF16) {
            // As PyTorch, a half-precision product is rounded at every step (so it overflows
            // where the exact product would not).
            let round = move |v: f64| match dtype {
                DType::F16 => half::f16::from_f64(v).to_f64(),
                _ => half::bf16::from_f64(v).to_f64(),
            };
            let v = r.fold_as(
                self,
                dtype,
                1.0f64,
                None,
                |x, _| x,
                move |a, x| round(a * x),
            );
            finish(ctx, &v, &r.out_shape, dtype, dest)
        } else if dtype.is_floating() {
            let v = r.fold_as(self, dtype, 1.0f64, None, |x, _| x, |a, x| a * x);
            finish(ctx, &v, &r.out_shape, dtype, dest)
        } else {
            let v = r.fold_as(self, dtype, 1i64, None, |x, _| x, |a, x| a.wrapping_mul(x));
            finish(ctx, &v, &r.out_shape, dtype, dest)
        }
    }

    /// `amax`/`amin` into a new tensor or `out` (which has the input's dtype).
    pub(crate) fn amax_in(
        &self,
        ctx: &OpContext,
        dims: Option<&[i64]>,
        keepdim: bool,
        max: bool,
        out: Option<&Tensor>,
    ) -> Result<Tensor> {
        let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
        r.refuse_empty(ctx.op())?;
        let dest = Dest::prepare(ctx, out, &r.out_shape, &[self])?;
        if self.dtype().is_floating() {
            let v = if max {
                r.fold(self, f64::NEG_INFINITY, |a: f64, x| a.maximum_nan(x))
            } else {
                r.fold(self, f64::INFINITY, |a: f64, x| a.minimum_nan(x))
            };
            finish(ctx, &v, &r.out_shape, self.dtype(), dest)
        } else {
            let init = if max { i64::MIN } else { i64::MAX };
            let v = r.fold(
                self,
                init,
                move |a: i64, x| if max { a.max(x) } else { a.min(x) },
            );
            finish(ctx, &v, &r.out_shape, self.dtype(), dest)
        }
    }

    /// `max`/`min` along `dim` into new tensors or `outs` (values, indices).
    pub(crate) fn max_dim_in(
        &self,
        ctx: &OpContext,
        dim: i64,
        keepdim: bool,
        max: bool,
        outs: Option<(&Tensor, &Tensor)>,
    ) -> Result<(Tensor, Tensor)> {
        let a = ArgReduction::new(ctx.op(), self, Some(dim), keepdim)?;
        let shape = a.out_shape();
        if let Some((v, i)) = outs {
            check_memory(ctx.op(), v, shape, &[self], Aliasing::Exact)?;
            check_memory(ctx.op(), i, shape, &[self], Aliasing::Exact)?;
            check_distinct_outputs(ctx.op(), v, i)?;
        }
        let x = a.input()?;
        let (vd, id) = match outs {
            None => (Dest::New, Dest::New),
            Some((v, i)) => {
                v.resize_for_out(ctx, shape)?;
                i.resize_for_out(ctx, shape)?;
                (Dest::Out(v), Dest::Out(i))
            }
        };
        let (v, i) = a.run(ctx, &x, max, Some(vd), id)?;
        match v {
            Some(v) => Ok((v, i)),
            None => Err(Error::Unsupported {
                op: ctx.op(),
                message: "internal: the values were not computed".into(),
            }),
        }
    }

    /// `argmax`/`argmin` into a new i64 tensor or `out`.
    pub(crate) fn arg_index_in(
        &self,
        ctx: &OpContext,
        dim: Option<i64>,
        keepdim: bool,
        max: bool,
        out: Option<&Tensor>,
    ) -> Result<Tensor> {
        if self.dtype() == DType::Bool {
            return Err(Error::dtype(
                ctx.op(),
                format!("{} does not accept a bool tensor", ctx.op()),
                Some("convert it first with .to(DType::U8)"),
            ));
        }
        let a = ArgReduction::new(ctx.op(), self, dim, keepdim)?;
        if let Some(o) = out {
            check_memory(ctx.op(), o, a.out_shape(), &[self], Aliasing::Exact)?;
        }
        let x = a.input()?;
        let dest = Dest::prepare(ctx, out, a.out_shape(), &[self])?;
        Ok(a.run(ctx, &x, max, None, dest)?.1)
    }

    /// `var` (or `std` with `sqrt`) into a new tensor or `out`, in two passes: the means,
    /// then the squared deviations from them, both accumulated in f64.
    pub(crate) fn var_in(
        &self,
        ctx: &OpContext,
        dims: Option<&[i64]>,
        correction: f64,
        keepdim: bool,
        sqrt: bool,
        out: Option<&Tensor>,
    ) -> Result<Tensor> {
        floating_only(ctx.op(), self)?;
        let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
        let dtype = out.map_or(self.dtype(), Tensor::dtype);
        let dest = Dest::prepare(ctx, out, &r.out_shape, &[self])?;
        let n = r.count as f64;
        let mean: Vec<f64> = dense_sum(self, &r.mask)
            .unwrap_or_else(|| r.fold(self, 0.0f64, |a, x| a + x))
            .into_iter()
            .map(|s| s / n)
            .collect();
        let dt = self.dtype();
        let ss = r.fold_as(
            self,
            dt,
            0.0f64,
            Some(&mean),
            |x, m| (x - m) * (x - m),
            |a, v| a + v,
        );
        let denom = (n - correction).max(0.0);
        let v: Vec<f64> = ss
            .into_iter()
            .map(|s| if sqrt { (s / denom).sqrt() } else { s / denom })
            .collect();
        finish(ctx, &v, &r.out_shape, dtype, dest)
    }

    /// `norm` into a new tensor or `out` (which has the input's dtype).
    pub(crate) fn norm_in(
        &self,
        ctx: &OpContext,
        p: f64,
        dims: Option<&[i64]>,
        keepdim: bool,
        out: Option<&Tensor>,
    ) -> Result<Tensor> {
        floating_only(ctx.op(), self)?;
        let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
        if p.is_infinite() {
            r.refuse_empty(ctx.op())?;
        }
        let dest = Dest::prepare(ctx, out, &r.out_shape, &[self])?;
        let dt = self.dtype();
        let sum = |a: f64, x: f64| a + x;
        // The per-element term first, then plain folds (`fold_as` combines partial results
        // with the same function).
        let v: Vec<f64> = if p == f64::INFINITY {
            r.fold_as(
                self,
                dt,
                f64::NEG_INFINITY,
                None,
                |x, _| x.abs(),
                f64::maximum_nan,
            )
        } else if p == f64::NEG_INFINITY {
            r.fold_as(
                self,
                dt,
                f64::INFINITY,
                None,
                |x, _| x.abs(),
                f64::minimum_nan,
            )
        } else if p == 0.0 {
            r.fold_as(
                self,
                dt,
                0.0,
                None,
                |x, _| if x != 0.0 { 1.0 } else { 0.0 },
                sum,
            )
        } else if p == 1.0 {
            r.fold_as(self, dt, 0.0, None, |x, _| x.abs(), sum)
        } else if p == 2.0 {
            let s = r.fold_as(self, dt, 0.0, None, |x, _| x * x, sum);
            s.into_iter().map(f64::sqrt).collect()
        } else {
            let s = r.fold_as(self, dt, 0.0, None, move |x, _| x.abs().powf(p), sum);
            s.into_iter().map(|s| s.powf(1.0 / p)).collect()
        };
        finish(ctx, &v, &r.out_shape, dt, dest)
    }

    /// `logsumexp` into a new tensor or `out` (any floating dtype), computed around each
    /// group's maximum in f64.
    pub(crate) fn logsumexp_in(
        &self,
        ctx: &OpContext,
        dims: Option<&[i64]>,
        keepdim: bool,
        out: Option<&Tensor>,
    ) -> Result<Tensor> {
        // PyTorch reduces over every dimension for `dim=[]` only with keepdim; without it the
        // result's shape is refused (an empty input goes through).
        if dims.is_some_and(<[i64]>::is_empty) && self.dim() > 0 && self.numel() > 0 && !keepdim {
            return Err(Error::argument(
                ctx.op(),
                "an empty list of dimensions is accepted only with keepdim (as in PyTorch)",
                Some("pass None to reduce over every dimension, or keepdim = true"),
            ));
        }
        // Integer inputs are converted to the default floating dtype first, as in PyTorch.
        let compute = if self.dtype().is_floating() {
            self.dtype()
        } else {
            DType::F32
        };
        let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
        let dtype = out.map_or(compute, Tensor::dtype);
        let dest = Dest::prepare(ctx, out, &r.out_shape, &[self])?;
        // The maximum of each group, with infinities replaced by 0 so that x - m stays finite.
        let m: Vec<f64> = if self.numel() == 0 {
            vec![0.0; r.out_numel()]
        } else {
            r.fold_as(
                self,
                compute,
                f64::NEG_INFINITY,
                None,
                |x, _| x,
                f64::maximum_nan,
            )
            .into_iter()
            .map(|v| if v.is_infinite() { 0.0 } else { v })
            .collect()
        };
        let s = r.fold_as(
            self,
            compute,
            0.0f64,
            Some(&m),
            |x, m| (x - m).exp(),
            |a, v| a + v,
        );
        let v: Vec<f64> = s.iter().zip(&m).map(|(s, m)| s.ln() + m).collect();
        finish(ctx, &v, &r.out_shape, dtype, dest)
    }

    /// `cumsum` into a new contiguous tensor or `out` (computed in `out`'s dtype, each
    /// element converted to it first, accumulated in f64 or i64).
    pub(crate) fn cumsum_in(
        &self,
        ctx: &OpContext,
        dim: i64,
        out: Option<&Tensor>,
    ) -> Result<Tensor> {
        let shape = self.shape();
        let n = shape.len();
        let d = wrap_dim(dim, n).ok_or(Error::Dim {
            op: ctx.op(),
            dim,
            ndim: n,
        })?;
        let dtype = out.map_or(sum_dtype(self.dtype()), Tensor::dtype);
        let dest = Dest::prepare(ctx, out, &shape, &[self])?;
        let result = match dest {
            Dest::New => Tensor::uninit_with_layout(ctx, Layout::contiguous(&shape, 0), dtype)?,
            Dest::Out(o) => o.clone(),
        };
        if self.numel() > 0 {
            scan_sum(self, &result, d, dtype);
        }
        if let Dest::Out(o) = dest {
            o.bump_version();
        }
        Ok(result)
    }
}

impl Tensor {
    /// Sum over `dims` (all when `None`); integers and bools sum to i64.
    #[track_caller]
    pub fn sum(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("sum");
        let out =
            crate::mode::internal(|| -> Result<Tensor> { self.sum_in(&ctx, dims, keepdim, None) })?;
        reduce_grad::reduction(&ctx, Reduce::Sum, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Mean over `dims` (floating tensors only; an empty reduction is NaN).
    #[track_caller]
    pub fn mean(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("mean");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            self.mean_in(&ctx, dims, keepdim, None)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Mean, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Product over `dims`; integers and bools multiply to i64.
    #[track_caller]
    pub fn prod(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("prod");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            self.prod_in(&ctx, dims, keepdim, None)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Prod, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Largest element over `dims` (NaN if any is NaN).
    #[track_caller]
    pub fn amax(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("amax");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            self.amax_in(&ctx, dims, keepdim, true, None)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Amax, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Smallest element over `dims` (NaN if any is NaN).
    #[track_caller]
    pub fn amin(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("amin");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            self.amax_in(&ctx, dims, keepdim, false, None)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Amin, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Largest values along `dim` and their first positions.
    #[track_caller]
    pub fn max_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let ctx = OpContext::enter("max");
        let out = crate::mode::internal(|| -> Result<(Tensor, Tensor)> {
            self.max_dim_in(&ctx, dim, keepdim, true, None)
        })?;
        reduce_grad::arg_reduction(&ctx, true, self, dim, keepdim, &out.0, &out.1)?;
        Ok(out)
    }

    /// Smallest values along `dim` and their first positions.
    #[track_caller]
    pub fn min_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let ctx = OpContext::enter("min");
        let out = crate::mode::internal(|| -> Result<(Tensor, Tensor)> {
            self.max_dim_in(&ctx, dim, keepdim, false, None)
        })?;
        reduce_grad::arg_reduction(&ctx, false, self, dim, keepdim, &out.0, &out.1)?;
        Ok(out)
    }

    /// Position of the largest element along `dim` (over the flattened tensor when `None`).
    #[track_caller]
    pub fn argmax(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("argmax");
        crate::mode::internal(|| self.arg_index_in(&ctx, dim, keepdim, true, None))
    }

    /// Position of the smallest element along `dim` (over the flattened tensor when `None`).
    #[track_caller]
    pub fn argmin(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("argmin");
        crate::mode::internal(|| self.arg_index_in(&ctx, dim, keepdim, false, None))
    }

    /// Variance over `dims` with Bessel-style `correction` (1 = sample variance), computed in
    /// two passes (mean, then squared deviations) for accuracy.
    #[track_caller]
    pub fn var(&self, dims: Option<&[i64]>, correction: f64, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("var");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            self.var_in(&ctx, dims, correction, keepdim, false, None)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Var(correction), self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Standard deviation: the square root of [`Tensor::var`].
    #[track_caller]
    pub fn std(&self, dims: Option<&[i64]>, correction: f64, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("std");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            self.var_in(&ctx, dims, correction, keepdim, true, None)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Std(correction), self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// The vector `p`-norm over `dims` (all when `None`): p = 2, 1, 0 (count of non-zeros),
    /// ±infinity (largest / smallest magnitude), or any other real `p`.
    #[track_caller]
    pub fn norm(&self, p: f64, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("norm");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            self.norm_in(&ctx, p, dims, keepdim, None)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Norm(p), self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// `log(sum(exp(x)))` over `dims`, computed stably around the maximum.
    #[track_caller]
    pub fn logsumexp(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("logsumexp");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            self.logsumexp_in(&ctx, dims, keepdim, None)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Logsumexp, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Running sums along `dim` (integers and bools accumulate in i64); contiguous result.
    #[track_caller]
    pub fn cumsum(&self, dim: i64) -> Result<Tensor> {
        let ctx = OpContext::enter("cumsum");
        let out = crate::mode::internal(|| -> Result<Tensor> { self.cumsum_in(&ctx, dim, None) })?;
        reduce_grad::cumsum(&ctx, self, dim, &out)?;
        Ok(out)
    }
}
