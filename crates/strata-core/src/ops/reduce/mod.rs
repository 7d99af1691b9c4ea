//! Reductions: `sum`, `mean`, `prod`, `amax`, `amin`, `max`/`min` with indices,
//! `argmax`/`argmin`, `var`/`std`, `norm`, `logsumexp`, and the dimension-wise `cumsum`, each
//! into a new contiguous tensor (as PyTorch's are) or, through their `_out` forms, into a
//! given tensor: infer and forward. The public methods are in `api/reduce.rs`, the
//! backward formulas in the formulas module of the same name.
//!
//! The folds, the accumulators and the writing of results are in `fold.rs` and
//! `accumulators.rs`, the dense floating sum's fast path in `dense_sum.rs`, and the `out=`
//! forms' dtype rules in `out/`.

mod accumulators;
mod dense_sum;
pub(crate) mod fold;
pub(crate) mod out;

use crate::backend::for_device;
use crate::backend::kernel::FoldCombine::{Max, Min, Prod, ProdRoundedTo, Sum};
use crate::backend::kernel::{BinaryOp, FloatOp, Fold, FoldTerm};
use crate::layout::int_arg::IntArg;
use crate::layout::{wrap_dim, Layout};
use crate::op::OpContext;
use crate::ops::out::{check_distinct_outputs, written, Aliasing, OutDType, OutTarget};
use crate::{DType, Error, Result, Tensor};
use dense_sum::dense_sum;
use fold::{floating_only, scan_sum, sum_dtype, ArgReduction, Dest, Reduction};

/// `sum` into a new tensor or `out` (whose dtype the sum is then computed in, each
/// element converted to it first, as PyTorch does).
pub(crate) fn sum<D: IntArg>(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[D]>,
    keepdim: bool,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    let r = Reduction::new(ctx.op(), x, dims, keepdim)?;
    let natural = sum_dtype(x.dtype());
    let dtype = out.map_or(natural, Tensor::dtype);
    if dtype.is_floating() {
        r.write_result(ctx, x, out, dtype, |r| {
            let fast = if dtype == natural {
                dense_sum(ctx, x, &r.mask)?
            } else {
                None
            };
            match fast {
                Some(v) => Ok(v),
                None => r.fold_as(ctx, x, dtype, 0.0f64, None, Fold::of_values(Sum)),
            }
        })
    } else {
        r.write_result(ctx, x, out, dtype, |r| {
            r.fold_as(ctx, x, dtype, 0i64, None, Fold::of_values(Sum))
        })
    }
}

/// `mean` into a new tensor or `out` (computed in `out`'s floating dtype).
pub(crate) fn mean<D: IntArg>(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[D]>,
    keepdim: bool,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    floating_only(ctx.op(), x)?;
    let r = Reduction::new(ctx.op(), x, dims, keepdim)?;
    let dtype = out.map_or(x.dtype(), Tensor::dtype);
    let n = r.count as f64;
    r.write_result(ctx, x, out, dtype, |r| {
        let fast = if dtype == x.dtype() {
            dense_sum(ctx, x, &r.mask)?
        } else {
            None
        };
        let v = match fast {
            Some(v) => v,
            None => r.fold_as(ctx, x, dtype, 0.0f64, None, Fold::of_values(Sum))?,
        };
        v.map_scalar(BinaryOp::Div, n);
        Ok(v)
    })
}

/// `prod` into a new tensor or `out` (computed in `out`'s dtype, as for `sum`).
pub(crate) fn prod<D: IntArg>(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[D]>,
    keepdim: bool,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    let r = Reduction::new(ctx.op(), x, dims, keepdim)?;
    let dtype = out.map_or(sum_dtype(x.dtype()), Tensor::dtype);
    if dtype.is_floating() {
        // As PyTorch, a half-precision product is rounded at every step (so it overflows
        // where the exact product would not).
        let combine = if matches!(dtype, DType::F16 | DType::BF16) {
            ProdRoundedTo(dtype)
        } else {
            Prod
        };
        r.write_result(ctx, x, out, dtype, |r| {
            r.fold_as(ctx, x, dtype, 1.0f64, None, Fold::of_values(combine))
        })
    } else {
        r.write_result(ctx, x, out, dtype, |r| {
            r.fold_as(ctx, x, dtype, 1i64, None, Fold::of_values(Prod))
        })
    }
}

/// `amax`/`amin` into a new tensor or `out` (which has the input's dtype).
pub(crate) fn amax(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    max: bool,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    let r = Reduction::new(ctx.op(), x, dims, keepdim)?;
    r.refuse_empty(ctx.op())?;
    let combine = if max { Max } else { Min };
    if x.dtype().is_floating() {
        let init = if max {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
        r.write_result(ctx, x, out, x.dtype(), |r| r.fold(ctx, x, init, combine))
    } else {
        let init = if max { i64::MIN } else { i64::MAX };
        r.write_result(ctx, x, out, x.dtype(), |r| r.fold(ctx, x, init, combine))
    }
}

/// `max`/`min` along `dim` into new tensors or `outs` (values, indices).
pub(crate) fn max_dim(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    keepdim: bool,
    max: bool,
    outs: Option<(&Tensor, &Tensor)>,
) -> Result<(Tensor, Tensor)> {
    let a = ArgReduction::new(ctx.op(), x, Some(dim), keepdim)?;
    let shape = a.out_shape();
    let check = |o| OutTarget::check(ctx.op(), o, shape, OutDType::Any, &[x], Aliasing::Exact);
    let targets = match outs {
        None => None,
        Some((v, i)) => {
            let targets = (check(v)?, check(i)?);
            check_distinct_outputs(ctx.op(), v, i)?;
            Some(targets)
        }
    };
    let input = a.input()?;
    let (vd, id) = match targets {
        None => (Dest::New, Dest::New),
        Some((v, i)) => (Dest::resize(ctx, Some(v))?, Dest::resize(ctx, Some(i))?),
    };
    let (v, i) = a.run(ctx, &input, max, Some(vd), id)?;
    match v {
        Some(v) => Ok((v, i)),
        None => Err(Error::Unsupported {
            op: ctx.op(),
            message: "internal: the values were not computed".into(),
        }),
    }
}

/// `argmax`/`argmin` into a new i64 tensor or `out`.
pub(crate) fn arg_index(
    ctx: &OpContext,
    x: &Tensor,
    dim: Option<i64>,
    keepdim: bool,
    max: bool,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(Error::dtype(
            ctx.op(),
            format!("{} does not accept a bool tensor", ctx.op()),
            Some("convert it first with .to(DType::U8)"),
        ));
    }
    let a = ArgReduction::new(ctx.op(), x, dim, keepdim)?;
    let target = out
        .map(|o| {
            OutTarget::check(
                ctx.op(),
                o,
                a.out_shape(),
                OutDType::Any,
                &[x],
                Aliasing::Exact,
            )
        })
        .transpose()?;
    let input = a.input()?;
    let dest = Dest::resize(ctx, target)?;
    Ok(a.run(ctx, &input, max, None, dest)?.1)
}

/// `var` (or `std` with `sqrt`) into a new tensor or `out`, in two passes: the means,
/// then the squared deviations from them, both accumulated in f64.
pub(crate) fn var<D: IntArg>(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[D]>,
    correction: f64,
    keepdim: bool,
    sqrt: bool,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    floating_only(ctx.op(), x)?;
    let r = Reduction::new(ctx.op(), x, dims, keepdim)?;
    let dtype = out.map_or(x.dtype(), Tensor::dtype);
    let n = r.count as f64;
    r.write_result(ctx, x, out, dtype, |r| {
        let mean = match dense_sum(ctx, x, &r.mask)? {
            Some(v) => v,
            None => r.fold(ctx, x, 0.0f64, Sum)?,
        };
        mean.map_scalar(BinaryOp::Div, n);
        let deviations = Fold {
            term: FoldTerm::SquaredDeviation,
            combine: Sum,
        };
        let v = r.fold_as(ctx, x, x.dtype(), 0.0f64, Some(&mean), deviations)?;
        drop(mean);
        let denom = (n - correction).max(0.0);
        v.map_scalar(BinaryOp::Div, denom);
        if sqrt {
            v.map(FloatOp::Sqrt);
        }
        Ok(v)
    })
}

/// `norm` into a new tensor or `out` (which has the input's dtype).
pub(crate) fn norm(
    ctx: &OpContext,
    x: &Tensor,
    p: f64,
    dims: Option<&[i64]>,
    keepdim: bool,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    floating_only(ctx.op(), x)?;
    let r = Reduction::new(ctx.op(), x, dims, keepdim)?;
    if p.is_infinite() {
        r.refuse_empty(ctx.op())?;
    }
    let dt = x.dtype();
    // The per-element term first, then plain folds (partial results combine the same way),
    // then the root, where there is one.
    let (init, term, combine) = if p == f64::INFINITY {
        (f64::NEG_INFINITY, FoldTerm::Abs, Max)
    } else if p == f64::NEG_INFINITY {
        (f64::INFINITY, FoldTerm::Abs, Min)
    } else if p == 0.0 {
        (0.0, FoldTerm::NonZero, Sum)
    } else if p == 1.0 {
        (0.0, FoldTerm::Abs, Sum)
    } else if p == 2.0 {
        (0.0, FoldTerm::Square, Sum)
    } else {
        (0.0, FoldTerm::AbsPow(p), Sum)
    };
    r.write_result(ctx, x, out, dt, |r| {
        let v = r.fold_as(ctx, x, dt, init, None, Fold { term, combine })?;
        if p == 2.0 {
            v.map(FloatOp::Sqrt);
        } else if p.is_finite() && p != 0.0 && p != 1.0 {
            v.map_scalar(BinaryOp::Pow, 1.0 / p);
        }
        Ok(v)
    })
}

/// `logsumexp` into a new tensor or `out` (any floating dtype), computed around each
/// group's maximum in f64.
pub(crate) fn logsumexp(
    ctx: &OpContext,
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    // PyTorch reduces over every dimension for `dim=[]` only with keepdim; without it the
    // result's shape is refused (an empty input goes through).
    if dims.is_some_and(<[i64]>::is_empty) && x.dim() > 0 && x.numel() > 0 && !keepdim {
        return Err(Error::argument(
            ctx.op(),
            "an empty list of dimensions is accepted only with keepdim (as in PyTorch)",
            Some("pass None to reduce over every dimension, or keepdim = true"),
        ));
    }
    // Integer inputs are converted to the default floating dtype first, as in PyTorch.
    let compute = if x.dtype().is_floating() {
        x.dtype()
    } else {
        DType::F32
    };
    let r = Reduction::new(ctx.op(), x, dims, keepdim)?;
    let dtype = out.map_or(compute, Tensor::dtype);
    r.write_result(ctx, x, out, dtype, |r| {
        // The maximum of each group, with infinities replaced by 0 so that x - m stays
        // finite. (An empty input folds nothing: every maximum stays -inf, then 0.)
        let m = r.fold_as(
            ctx,
            x,
            compute,
            f64::NEG_INFINITY,
            None,
            Fold::of_values(Max),
        )?;
        m.zero_infinities();
        let shifted = Fold {
            term: FoldTerm::ExpShifted,
            combine: Sum,
        };
        let v = r.fold_as(ctx, x, compute, 0.0f64, Some(&m), shifted)?;
        v.map(FloatOp::Log);
        v.add(&m);
        drop(m);
        Ok(v)
    })
}

/// `cumsum` into a new contiguous tensor or `out` (computed in `out`'s dtype, each
/// element converted to it first, accumulated in f64 or i64).
pub(crate) fn cumsum(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    let shape = x.shape();
    let n = shape.len();
    let d = wrap_dim(dim, n).ok_or(Error::Dim {
        op: ctx.op(),
        dim,
        ndim: n,
    })?;
    let dtype = out.map_or(sum_dtype(x.dtype()), Tensor::dtype);
    let backend = for_device(x.device())?;
    let dest = Dest::prepare(ctx, out, &shape, &[x])?;
    let result = match &dest {
        Dest::New => {
            Tensor::uninit_with_layout(ctx, Layout::contiguous(&shape, 0), dtype, x.device())?
        }
        Dest::Out(o) => o.clone(),
    };
    if x.numel() > 0 {
        scan_sum(ctx, backend, x, &result, d, dtype)?;
    }
    Ok(match dest {
        Dest::Out(o) => written(ctx.op(), &o),
        Dest::New => result,
    })
}
