//! Unary element-wise ops: `neg`, `abs`, the floating functions, activations, `clamp`, out of
//! place, in place and into a given tensor (`_out`).

pub(crate) use crate::backend::kernel::{FloatOp, SameOp};
use crate::backend::{for_device, Backend, Plan};
use crate::op::OpContext;
use crate::ops::contiguous;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::ops::out::check_cast;
use crate::ops::out::expect_dtype;
use crate::ops::promote::{result_type, Arg};
use crate::{DType, Error, Result, Scalar, Tensor};

fn float_op_dtype(op: &'static str, f: FloatOp, input: DType) -> Result<DType> {
    if input.is_floating() {
        return Ok(input);
    }
    match f {
        // Activations PyTorch defines for floating inputs only.
        FloatOp::Gelu
        | FloatOp::Silu
        | FloatOp::GeluDerivative
        | FloatOp::GeluTanh
        | FloatOp::GeluTanhDerivative => Err(Error::dtype(
            op,
            format!("{op} needs a floating tensor, got {input}"),
            Some("convert first with .to(DType::F32)"),
        )),
        _ => Ok(DType::F32),
    }
}

/// Runs `f` over `plan` on `x`'s backend, computing in the floating dtype `compute`.
fn run_float(backend: &dyn Backend, plan: &Plan, f: FloatOp, compute: DType) {
    // SAFETY: `plan` comes from `Prepared::execute` or the contiguous route, which hold the
    // operands' locks and pass a plan valid for them.
    unsafe { backend.float_unary(plan, f, compute) }
}

fn same_op_dtype(op: &'static str, s: SameOp, a: &Tensor) -> Result<DType> {
    let d = a.dtype();
    match s {
        SameOp::Neg if d == DType::Bool => Err(Error::dtype(
            op,
            "negation of a bool tensor is not supported",
            Some("use logical_not() to invert a mask"),
        )),
        SameOp::Abs if d == DType::Bool => Err(Error::dtype(
            op,
            "abs is not defined for bool tensors",
            Some("a bool is its own absolute value; convert first with .to(DType::U8) if needed"),
        )),
        SameOp::Relu if d == DType::Bool => Err(Error::dtype(
            op,
            "relu is not defined for bool tensors",
            Some("convert first with .to(DType::U8) or .to(DType::F32)"),
        )),
        SameOp::Clamp(None, None) => Err(Error::argument(
            op,
            "at least one of min and max must be given",
            Some("pass a lower bound, an upper bound, or both"),
        )),
        SameOp::Clamp(lo, hi) => {
            let mut args = vec![Arg::Tensor(a)];
            args.extend(lo.map(Arg::Scalar));
            args.extend(hi.map(Arg::Scalar));
            let r = result_type(&args);
            if r == DType::Bool {
                return Err(Error::dtype(
                    op,
                    "clamp is not defined for bool tensors",
                    Some("convert first with .to(DType::U8)"),
                ));
            }
            check_clamp_bounds(op, r, lo, hi)?;
            Ok(r)
        }
        _ => Ok(d),
    }
}

/// The integer range of `dtype` (`None` for floating dtypes and i64, which holds every
/// integer bound).
fn int_range(dtype: DType) -> Option<(i64, i64)> {
    match dtype {
        DType::U8 => Some((0, 255)),
        DType::I32 => Some((i32::MIN as i64, i32::MAX as i64)),
        _ => None,
    }
}

/// As PyTorch: a floating result refuses a bound that overflows it; an integer result
/// refuses a lower bound above its range or an upper bound below it (bounds are compared
/// as the numbers they are, not wrapped into the dtype).
fn check_clamp_bounds(
    op: &'static str,
    r: DType,
    lo: Option<Scalar>,
    hi: Option<Scalar>,
) -> Result<()> {
    if r.is_floating() {
        for b in [lo, hi].into_iter().flatten() {
            b.check_fits(op, r)?;
        }
        return Ok(());
    }
    let Some((min, max)) = int_range(r) else {
        return Ok(());
    };
    let outside = |which: &str, v: Scalar| {
        Error::argument(
            op,
            format!(
                "the {which} bound {} lies outside the range of {r} ({min}..={max})",
                v.to_f64()
            ),
            Some("pass a bound within the dtype's range, or convert the tensor first"),
        )
    };
    if let Some(v @ Scalar::Int(l)) = lo {
        if l > max {
            return Err(outside("lower", v));
        }
    }
    if let Some(v @ Scalar::Int(h)) = hi {
        if h < min {
            return Err(outside("upper", v));
        }
    }
    Ok(())
}

/// `s` with integer clamp bounds that cannot bind in `compute` dropped (a lower bound below
/// the dtype's range, an upper bound above it), so that none is wrapped into the dtype.
fn without_idle_bounds(s: SameOp, compute: DType) -> SameOp {
    let (SameOp::Clamp(lo, hi), Some((min, max))) = (s, int_range(compute)) else {
        return s;
    };
    let lo = lo.filter(|b| !matches!(b, Scalar::Int(l) if *l < min));
    let hi = hi.filter(|b| !matches!(b, Scalar::Int(h) if *h > max));
    SameOp::Clamp(lo, hi)
}

/// Runs `s` over `plan` on `x`'s backend, computing in `compute`.
fn run_same(backend: &dyn Backend, plan: &Plan, s: SameOp, compute: DType) {
    let s = without_idle_bounds(s, compute);
    // SAFETY: as in `run_float`.
    unsafe { backend.same_unary(plan, s, compute) }
}

/// `f(x)` into a new tensor.
pub(crate) fn float(ctx: &OpContext, f: FloatOp, x: &Tensor) -> Result<Tensor> {
    let backend = for_device(x.device())?;
    let out = float_op_dtype(ctx.op(), f, x.dtype())?;
    contiguous::new_output(ctx, out, out, &[x], false, |plan| {
        run_float(backend, plan, f, out)
    })
}

/// `x = f(x)` in place.
pub(crate) fn float_(ctx: &OpContext, f: FloatOp, x: &Tensor) -> Result<Tensor> {
    let backend = for_device(x.device())?;
    let result = float_op_dtype(ctx.op(), f, x.dtype())?;
    check_cast(ctx.op(), result, x.dtype())?;
    let prepared = ElementwiseSpec::new(Output::Existing(x), vec![x]).infer(ctx.op())?;
    prepared.execute(ctx, |plan| run_float(backend, plan, f, result))
}

/// `f(x)` written into `out`, whose dtype must hold the result (exactly the result's dtype
/// for the activations `gelu` and `silu`, as in PyTorch).
pub(crate) fn float_out(ctx: &OpContext, f: FloatOp, x: &Tensor, out: &Tensor) -> Result<Tensor> {
    let backend = for_device(x.device())?;
    let result = float_op_dtype(ctx.op(), f, x.dtype())?;
    match f {
        FloatOp::Gelu | FloatOp::GeluTanh | FloatOp::Silu => expect_dtype(ctx.op(), out, result)?,
        _ => check_cast(ctx.op(), result, out.dtype())?,
    }
    let prepared = ElementwiseSpec::new(Output::Out(out), vec![x])
        .with_input_dtypes(&[result])
        .infer(ctx.op())?;
    prepared.execute(ctx, |plan| run_float(backend, plan, f, result))
}

/// A dtype-keeping op into a new tensor.
pub(crate) fn same(ctx: &OpContext, s: SameOp, x: &Tensor) -> Result<Tensor> {
    let backend = for_device(x.device())?;
    let out = same_op_dtype(ctx.op(), s, x)?;
    contiguous::new_output(ctx, out, out, &[x], false, |plan| {
        run_same(backend, plan, s, out)
    })
}

/// A dtype-keeping op in place.
pub(crate) fn same_(ctx: &OpContext, s: SameOp, x: &Tensor) -> Result<Tensor> {
    let backend = for_device(x.device())?;
    let result = same_op_dtype(ctx.op(), s, x)?;
    check_cast(ctx.op(), result, x.dtype())?;
    let prepared = ElementwiseSpec::new(Output::Existing(x), vec![x]).infer(ctx.op())?;
    prepared.execute(ctx, |plan| run_same(backend, plan, s, result))
}

/// A dtype-keeping op written into `out`, which must have exactly the result's dtype
/// (PyTorch does not convert these results).
pub(crate) fn same_out(ctx: &OpContext, s: SameOp, x: &Tensor, out: &Tensor) -> Result<Tensor> {
    let backend = for_device(x.device())?;
    let result = same_op_dtype(ctx.op(), s, x)?;
    expect_dtype(ctx.op(), out, result)?;
    let prepared = ElementwiseSpec::new(Output::Out(out), vec![x])
        .with_input_dtypes(&[result])
        .infer(ctx.op())?;
    prepared.execute(ctx, |plan| run_same(backend, plan, s, result))
}
