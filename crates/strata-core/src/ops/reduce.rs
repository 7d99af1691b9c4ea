//! Reductions: `sum`, `mean`, `prod`, `amax`, `amin`, `max`/`min` with indices,
//! `argmax`/`argmin`, `var`/`std`, `norm`, `logsumexp`, and the dimension-wise `cumsum`.
//!
//! Every reduction runs through the element-wise engine with an accumulator whose strides are
//! 0 along the reduced dimensions. Floating inputs accumulate in f64 and integers in i64, so
//! sums are careful; results are contiguous, as PyTorch's are.

use crate::autograd::formulas::reduce::{self as reduce_grad, Reduce};
use crate::dtype::{cast, dispatch, DTypeFn, Element};
use crate::engine::{reduce, Operand, Plan};
use crate::layout::order::{iteration_order, OrderOperand};
use crate::layout::{contiguous_strides, wrap_dim};
use crate::op::OpContext;
use crate::ops::dense_sum::dense_sum;
use crate::storage::{lock_storages, Access};
use crate::tensor::create_from_fn;
use crate::{DType, Error, Result, Scalar, Tensor};

/// Which dimensions a reduction folds, and the shapes around it.
struct Reduction {
    /// The input's shape.
    shape: Vec<usize>,
    /// True for each reduced dimension.
    mask: Vec<bool>,
    /// The result's shape.
    out_shape: Vec<usize>,
    /// Elements folded into each result.
    count: usize,
}

impl Reduction {
    fn new(op: &'static str, x: &Tensor, dims: Option<&[i64]>, keepdim: bool) -> Result<Self> {
        let shape = x.shape();
        let n = shape.len();
        let mut mask = vec![dims.is_none_or(<[i64]>::is_empty); n];
        let mut seen = Vec::new();
        for &d in dims.unwrap_or(&[]) {
            let w = wrap_dim(d, n).ok_or(Error::Dim {
                op,
                dim: d,
                ndim: n,
            })?;
            // A 0-d tensor has no dimension to mark, but dim 0 may still appear only once.
            if seen.contains(&w) {
                return Err(Error::argument(
                    op,
                    format!(
                        "dimension {w} appears more than once in {:?}",
                        dims.unwrap_or(&[])
                    ),
                    Some("list each dimension once"),
                ));
            }
            seen.push(w);
            if n > 0 {
                mask[w] = true;
            }
        }
        let out_shape = shape
            .iter()
            .zip(&mask)
            .filter_map(|(&s, &m)| match (m, keepdim) {
                (false, _) => Some(s),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        let count = shape
            .iter()
            .zip(&mask)
            .filter(|(_, &m)| m)
            .map(|(&s, _)| s)
            .product();
        Ok(Reduction {
            shape,
            mask,
            out_shape,
            count,
        })
    }

    fn refuse_empty(&self, op: &'static str) -> Result<()> {
        if let Some(d) = (0..self.shape.len()).find(|&d| self.mask[d] && self.shape[d] == 0) {
            return Err(Error::shape(
                op,
                format!("cannot reduce over dimension {d}, which has size 0"),
                vec![self.shape.clone()],
            )
            .with_hint(
                "there is no maximum or minimum of nothing; check the tensor is not empty",
            ));
        }
        Ok(())
    }

    /// Strides of a contiguous accumulator over the kept dimensions, 0 along reduced ones.
    fn acc_strides(&self) -> Vec<usize> {
        let keep: Vec<usize> = self
            .shape
            .iter()
            .zip(&self.mask)
            .map(|(&s, &m)| if m { 1 } else { s })
            .collect();
        contiguous_strides(&keep)
            .into_iter()
            .zip(&self.mask)
            .map(|(st, &m)| if m { 0 } else { st })
            .collect()
    }

    fn out_numel(&self) -> usize {
        self.out_shape.iter().product()
    }

    /// Runs `plan_fn` over a plan with operands `extra` (accumulators) followed by `x` and
    /// `trailing` (read-only buffers), ordered so the reduced dimensions are innermost.
    fn run(
        &self,
        x: &Tensor,
        accs: &mut [(*mut u8, DType)],
        trailing: &[Operand],
        f: impl FnOnce(&Plan),
    ) {
        let body = x.body();
        let acc_strides = self.acc_strides();
        let in_strides = body.layout.strides().to_vec();
        // Walk the input in its own memory order: a run along a reduced dimension folds into
        // one slot, a run along a kept one updates a row of slots; both stream the input.
        let order = [OrderOperand {
            strides: &in_strides,
            is_reduction_output: false,
        }];
        let perm = iteration_order(&self.shape, &order);
        let guards = lock_storages(&[(&body.storage, Access::Read)]);
        let mut operands: Vec<Operand> = accs
            .iter()
            .map(|&(ptr, dtype)| Operand {
                ptr,
                strides: acc_strides.clone(),
                dtype,
            })
            .collect();
        operands.push(Operand {
            ptr: guards
                .read_ptr(&body.storage)
                .wrapping_add(body.layout.offset() * x.element_size()) as *mut u8,
            strides: in_strides.clone(),
            dtype: x.dtype(),
        });
        operands.extend(trailing.iter().cloned());
        let plan = Plan::new(&self.shape, &operands, &perm, false);
        f(&plan);
    }

    /// Folds `x` with `f` from `init`, in accumulation type `A`.
    fn fold<A: Element>(&self, x: &Tensor, init: A, f: impl Fn(A, A) -> A + Sync) -> Vec<A> {
        let mut acc = vec![init; self.out_numel()];
        if self.shape.contains(&0) {
            return acc;
        }
        let ptr = acc.as_mut_ptr() as *mut u8;
        // SAFETY: `acc` is our own buffer of out_numel elements of A, addressed by strides
        // that stay inside it; the input is read-locked by `run`; the plan is sequential.
        self.run(x, &mut [(ptr, A::DTYPE)], &[], |plan| unsafe {
            reduce::fold(plan, f)
        });
        acc
    }

    /// Best value and its position along the single reduced dimension `dim`.
    fn arg_fold<A: Element>(
        &self,
        x: &Tensor,
        dim: usize,
        better: impl Fn(A, A) -> bool + Sync,
    ) -> (Vec<A>, Vec<i64>) {
        let n = self.out_numel();
        let mut vals = vec![A::ZERO; n];
        let mut idx = vec![-1i64; n];
        if self.shape.contains(&0) {
            return (vals, idx);
        }
        let positions: Vec<i64> = (0..self.shape[dim] as i64).collect();
        let mut pos_strides = vec![0usize; self.shape.len()];
        pos_strides[dim] = 1;
        let trailing = [Operand {
            ptr: positions.as_ptr() as *mut u8,
            strides: pos_strides,
            dtype: DType::I64,
        }];
        let (vp, ip) = (vals.as_mut_ptr() as *mut u8, idx.as_mut_ptr() as *mut u8);
        // SAFETY: value and index buffers are ours (out_numel elements each), the positions
        // buffer holds shape[dim] elements read with stride 1 along dim only, the input is
        // read-locked by `run`, and the plan is sequential.
        self.run(
            x,
            &mut [(vp, A::DTYPE), (ip, DType::I64)],
            &trailing,
            |plan| unsafe { reduce::arg_fold(plan, better) },
        );
        (vals, idx)
    }
}

/// A new contiguous tensor of `shape` and `dtype` from accumulated values.
fn finish<A: Element>(
    ctx: &OpContext,
    values: &[A],
    shape: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    struct Finish<'a, A>(&'a OpContext, &'a [A], &'a [usize]);
    impl<A: Element> DTypeFn for Finish<'_, A> {
        type Output = Result<Tensor>;
        fn call<O: Element>(self) -> Result<Tensor> {
            let v = self.1;
            create_from_fn(self.0, self.2, |i| cast::<A, O>(v[i]))
        }
    }
    dispatch(dtype, Finish(ctx, values, shape))
}

fn floating_only(op: &'static str, x: &Tensor) -> Result<()> {
    if x.dtype().is_floating() {
        Ok(())
    } else {
        Err(Error::dtype(
            op,
            format!("{op} needs a floating tensor, got {}", x.dtype()),
            Some("convert first with .to(DType::F32)"),
        ))
    }
}

fn sum_dtype(d: DType) -> DType {
    if d.is_floating() {
        d
    } else {
        DType::I64
    }
}

fn nan_max(c: f64, b: f64) -> bool {
    (c.is_nan() && !b.is_nan()) || c > b
}

fn nan_min(c: f64, b: f64) -> bool {
    (c.is_nan() && !b.is_nan()) || c < b
}

impl Tensor {
    fn sum_in(&self, ctx: &OpContext, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
        let out = sum_dtype(self.dtype());
        if let Some(v) = dense_sum(self, &r.mask) {
            finish(ctx, &v, &r.out_shape, out)
        } else if self.dtype().is_floating() {
            finish(ctx, &r.fold(self, 0.0f64, |a, x| a + x), &r.out_shape, out)
        } else {
            finish(
                ctx,
                &r.fold(self, 0i64, |a, x| a.wrapping_add(x)),
                &r.out_shape,
                out,
            )
        }
    }

    fn amax_in(
        &self,
        ctx: &OpContext,
        dims: Option<&[i64]>,
        keepdim: bool,
        max: bool,
    ) -> Result<Tensor> {
        let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
        r.refuse_empty(ctx.op())?;
        if self.dtype().is_floating() {
            let init = if max {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            let v = if max {
                r.fold(self, init, |a: f64, x| a.maximum_nan(x))
            } else {
                r.fold(self, init, |a: f64, x| a.minimum_nan(x))
            };
            finish(ctx, &v, &r.out_shape, self.dtype())
        } else {
            let init = if max { i64::MIN } else { i64::MAX };
            let v = r.fold(
                self,
                init,
                move |a: i64, x| if max { a.max(x) } else { a.min(x) },
            );
            finish(ctx, &v, &r.out_shape, self.dtype())
        }
    }

    /// Sum over `dims` (all when `None`); integers and bools sum to i64.
    #[track_caller]
    pub fn sum(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("sum");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            self.sum_in(&ctx, dims, keepdim)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Sum, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Mean over `dims` (floating tensors only; an empty reduction is NaN).
    #[track_caller]
    pub fn mean(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("mean");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            floating_only(ctx.op(), self)?;
            let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
            let n = r.count as f64;
            let v: Vec<f64> = dense_sum(self, &r.mask)
                .unwrap_or_else(|| r.fold(self, 0.0f64, |a, x| a + x))
                .into_iter()
                .map(|s| s / n)
                .collect();
            finish(&ctx, &v, &r.out_shape, self.dtype())
        })?;
        reduce_grad::reduction(&ctx, Reduce::Mean, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Product over `dims`; integers and bools multiply to i64.
    #[track_caller]
    pub fn prod(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("prod");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
            let out = sum_dtype(self.dtype());
            if matches!(self.dtype(), DType::F16 | DType::BF16) {
                // As PyTorch, a half-precision product is rounded at every step (so it
                // overflows where the exact product would not).
                let dt = self.dtype();
                let round = move |v: f64| match dt {
                    DType::F16 => half::f16::from_f64(v).to_f64(),
                    _ => half::bf16::from_f64(v).to_f64(),
                };
                finish(
                    &ctx,
                    &r.fold(self, 1.0f64, move |a, x| round(a * x)),
                    &r.out_shape,
                    out,
                )
            } else if self.dtype().is_floating() {
                finish(&ctx, &r.fold(self, 1.0f64, |a, x| a * x), &r.out_shape, out)
            } else {
                finish(
                    &ctx,
                    &r.fold(self, 1i64, |a, x| a.wrapping_mul(x)),
                    &r.out_shape,
                    out,
                )
            }
        })?;
        reduce_grad::reduction(&ctx, Reduce::Prod, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Largest element over `dims` (NaN if any is NaN).
    #[track_caller]
    pub fn amax(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("amax");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            self.amax_in(&ctx, dims, keepdim, true)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Amax, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Smallest element over `dims` (NaN if any is NaN).
    #[track_caller]
    pub fn amin(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("amin");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            self.amax_in(&ctx, dims, keepdim, false)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Amin, self, dims, keepdim, &out)?;
        Ok(out)
    }

    fn arg_reduce(
        &self,
        ctx: &OpContext,
        dim: i64,
        keepdim: bool,
        max: bool,
    ) -> Result<(Tensor, Tensor)> {
        let n = self.dim();
        let d = wrap_dim(dim, n).ok_or(Error::Dim {
            op: ctx.op(),
            dim,
            ndim: n,
        })?;
        if n == 0 {
            let v = self.deep_clone()?;
            return Ok((v, Tensor::zeros(&[], DType::I64)?));
        }
        let r = Reduction::new(ctx.op(), self, Some(&[d as i64]), keepdim)?;
        r.refuse_empty(ctx.op())?;
        let better = if max { nan_max } else { nan_min };
        if self.dtype().is_floating() {
            let (v, i) = r.arg_fold::<f64>(self, d, better);
            Ok((
                finish(ctx, &v, &r.out_shape, self.dtype())?,
                finish(ctx, &i, &r.out_shape, DType::I64)?,
            ))
        } else {
            let (v, i) = r.arg_fold::<i64>(self, d, move |c, b| if max { c > b } else { c < b });
            Ok((
                finish(ctx, &v, &r.out_shape, self.dtype())?,
                finish(ctx, &i, &r.out_shape, DType::I64)?,
            ))
        }
    }

    /// Largest values along `dim` and their first positions.
    #[track_caller]
    pub fn max_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let ctx = OpContext::enter("max");
        let out = crate::autograd::mode::internal(|| -> Result<(Tensor, Tensor)> {
            self.arg_reduce(&ctx, dim, keepdim, true)
        })?;
        reduce_grad::arg_reduction(&ctx, true, self, dim, keepdim, &out.0, &out.1)?;
        Ok(out)
    }

    /// Smallest values along `dim` and their first positions.
    #[track_caller]
    pub fn min_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let ctx = OpContext::enter("min");
        let out = crate::autograd::mode::internal(|| -> Result<(Tensor, Tensor)> {
            self.arg_reduce(&ctx, dim, keepdim, false)
        })?;
        reduce_grad::arg_reduction(&ctx, false, self, dim, keepdim, &out.0, &out.1)?;
        Ok(out)
    }

    fn arg_index(
        &self,
        ctx: &OpContext,
        dim: Option<i64>,
        keepdim: bool,
        max: bool,
    ) -> Result<Tensor> {
        if self.dtype() == DType::Bool {
            return Err(Error::dtype(
                ctx.op(),
                format!("{} does not accept a bool tensor", ctx.op()),
                Some("convert it first with .to(DType::U8)"),
            ));
        }
        match dim {
            Some(d) => Ok(self.arg_reduce(ctx, d, keepdim, max)?.1),
            None => {
                let flat = self.reshape(&[-1])?;
                let i = flat.arg_reduce(ctx, 0, false, max)?.1;
                if keepdim {
                    let ones: Vec<i64> = vec![1; self.dim()];
                    i.reshape(&ones)
                } else {
                    Ok(i)
                }
            }
        }
    }

    /// Position of the largest element along `dim` (over the flattened tensor when `None`).
    #[track_caller]
    pub fn argmax(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("argmax");
        self.arg_index(&ctx, dim, keepdim, true)
    }

    /// Position of the smallest element along `dim` (over the flattened tensor when `None`).
    #[track_caller]
    pub fn argmin(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("argmin");
        self.arg_index(&ctx, dim, keepdim, false)
    }

    /// Variance over `dims` with Bessel-style `correction` (1 = sample variance), computed in
    /// two passes (mean, then squared deviations) for accuracy.
    #[track_caller]
    pub fn var(&self, dims: Option<&[i64]>, correction: f64, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("var");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            self.var_in(&ctx, dims, correction, keepdim, false)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Var(correction), self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Standard deviation: the square root of [`Tensor::var`].
    #[track_caller]
    pub fn std(&self, dims: Option<&[i64]>, correction: f64, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("std");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            self.var_in(&ctx, dims, correction, keepdim, true)
        })?;
        reduce_grad::reduction(&ctx, Reduce::Std(correction), self, dims, keepdim, &out)?;
        Ok(out)
    }

    fn var_in(
        &self,
        ctx: &OpContext,
        dims: Option<&[i64]>,
        correction: f64,
        keepdim: bool,
        sqrt: bool,
    ) -> Result<Tensor> {
        floating_only(ctx.op(), self)?;
        let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
        let x64 = self.to(DType::F64)?;
        let mean = x64.mean(dims, true)?;
        let dev = x64.sub(&mean)?;
        let sq = dev.mul(&dev)?;
        let denom = (r.count as f64 - correction).max(0.0);
        let ss = r.fold(&sq, 0.0f64, |a, x| a + x);
        // The square root of a standard deviation is taken in f64, before narrowing: an f32
        // variance may overflow where its square root does not.
        let v: Vec<f64> = ss
            .into_iter()
            .map(|s| if sqrt { (s / denom).sqrt() } else { s / denom })
            .collect();
        finish(ctx, &v, &r.out_shape, self.dtype())
    }

    /// The vector `p`-norm over `dims` (all when `None`): p = 2, 1, 0 (count of non-zeros),
    /// ±infinity (largest / smallest magnitude), or any other real `p`.
    #[track_caller]
    pub fn norm(&self, p: f64, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("norm");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            floating_only(ctx.op(), self)?;
            let a = self.abs()?;
            if p == f64::INFINITY {
                return a.amax_in(&ctx, dims, keepdim, true);
            }
            if p == f64::NEG_INFINITY {
                return a.amax_in(&ctx, dims, keepdim, false);
            }
            let r = Reduction::new(ctx.op(), self, dims, keepdim)?;
            // `fold` combines partial results with the same function, so it is given only
            // plain sums: the per-element power is taken first.
            let terms = if p == 0.0 {
                a.ne(0i64)?.to(DType::F64)?
            } else if p == 1.0 {
                a.clone()
            } else if p == 2.0 {
                // Squared in f64: a half-precision square overflows long before the norm.
                let a = a.to(DType::F64)?;
                a.mul(&a)?
            } else {
                a.to(DType::F64)?.pow(p)?
            };
            let sums = r.fold(&terms, 0.0f64, |acc, x| acc + x);
            let v: Vec<f64> = if p == 0.0 || p == 1.0 {
                sums
            } else if p == 2.0 {
                sums.into_iter().map(f64::sqrt).collect()
            } else {
                sums.into_iter().map(|s| s.powf(1.0 / p)).collect()
            };
            finish(&ctx, &v, &r.out_shape, self.dtype())
        })?;
        reduce_grad::reduction(&ctx, Reduce::Norm(p), self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// `log(sum(exp(x)))` over `dims`, computed stably around the maximum.
    #[track_caller]
    pub fn logsumexp(&self, dims: Option<&[i64]>, keepdim: bool) -> Result<Tensor> {
        let ctx = OpContext::enter("logsumexp");
        // PyTorch reduces over every dimension for `dim=[]` only with keepdim; without it the
        // result's shape is refused (an empty input goes through).
        if dims.is_some_and(<[i64]>::is_empty) && self.dim() > 0 && self.numel() > 0 && !keepdim {
            return Err(Error::argument(
                ctx.op(),
                "an empty list of dimensions is accepted only with keepdim (as in PyTorch)",
                Some("pass None to reduce over every dimension, or keepdim = true"),
            ));
        }
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            let x = if self.dtype().is_floating() {
                self.clone()
            } else {
                self.to(DType::F32)?
            };
            let r = Reduction::new(ctx.op(), &x, dims, keepdim)?;
            let keep = Reduction::new(ctx.op(), &x, dims, true)?;
            // The maximum of each group, with infinities replaced by 0 so that x - m stays finite.
            let m: Vec<f64> = if x.numel() == 0 {
                vec![0.0; keep.out_numel()]
            } else {
                keep.fold(&x, f64::NEG_INFINITY, |a: f64, v| a.maximum_nan(v))
                    .into_iter()
                    .map(|v| if v.is_infinite() { 0.0 } else { v })
                    .collect()
            };
            let mt = finish(&ctx, &m, &keep.out_shape, DType::F64)?;
            let e = x.to(DType::F64)?.sub(&mt)?.exp()?;
            let s = r.fold(&e, 0.0f64, |a, v| a + v);
            let out: Vec<f64> = s.iter().zip(&m).map(|(s, m)| s.ln() + m).collect();
            finish(&ctx, &out, &r.out_shape, x.dtype())
        })?;
        reduce_grad::reduction(&ctx, Reduce::Logsumexp, self, dims, keepdim, &out)?;
        Ok(out)
    }

    /// Running sums along `dim` (integers and bools accumulate in i64); contiguous result.
    #[track_caller]
    pub fn cumsum(&self, dim: i64) -> Result<Tensor> {
        let ctx = OpContext::enter("cumsum");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            let n = self.dim();
            let d = wrap_dim(dim, n).ok_or(Error::Dim {
                op: ctx.op(),
                dim,
                ndim: n,
            })?;
            let out_dtype = sum_dtype(self.dtype());
            let wide = if out_dtype.is_floating() {
                DType::F64
            } else {
                DType::I64
            };
            let acc = self.to(wide)?.contiguous()?.deep_clone()?;
            if n > 0 {
                for i in 1..self.shape()[d] {
                    let prev = acc.select(d as i64, i as i64 - 1)?;
                    let cur = acc.select(d as i64, i as i64)?;
                    crate::ops::binary::binary_inplace(
                        &ctx,
                        &cur,
                        crate::Other::Tensor(&prev),
                        crate::ops::binary::BinaryOp::Add(Scalar::Int(1)),
                        false,
                    )?;
                }
            }
            acc.to(out_dtype)
        })?;
        reduce_grad::cumsum(&ctx, self, dim, &out)?;
        Ok(out)
    }
}
