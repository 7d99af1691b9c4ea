//! Binary element-wise ops: arithmetic, `pow`, `maximum`/`minimum` and comparisons, with
//! tensors or numbers, out of place and in place.

pub(crate) use crate::backend::kernel::BinaryOp;
use crate::backend::{for_device, Backend, Plan};
use crate::op::OpContext;
use crate::ops::contiguous;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::ops::out::check_cast;
use crate::ops::promote::{result_type, Arg};
use crate::{DType, Error, Result, Scalar, Tensor};

/// The second operand: another tensor or a number.
#[derive(Debug, Clone, Copy)]
pub enum Other<'a> {
    /// A tensor, broadcast against the first.
    Tensor(&'a Tensor),
    /// A number, which keeps its kind for type promotion.
    Scalar(Scalar),
}

impl<'a> From<&'a Tensor> for Other<'a> {
    fn from(t: &'a Tensor) -> Self {
        Other::Tensor(t)
    }
}

impl From<Scalar> for Other<'_> {
    fn from(s: Scalar) -> Self {
        Other::Scalar(s)
    }
}

impl From<f64> for Other<'_> {
    fn from(v: f64) -> Self {
        Other::Scalar(Scalar::Float(v))
    }
}

impl From<i64> for Other<'_> {
    fn from(v: i64) -> Self {
        Other::Scalar(Scalar::Int(v))
    }
}

impl Other<'_> {
    fn arg(&self) -> Arg<'_> {
        match self {
            Other::Tensor(t) => Arg::Tensor(t),
            Other::Scalar(s) => Arg::Scalar(*s),
        }
    }
}

/// Checks the op can run in `compute` and returns the dtype it computes in.
#[inline]
fn compute_type(
    op_name: &'static str,
    op: BinaryOp,
    a: &Tensor,
    other: &Other<'_>,
) -> Result<DType> {
    // Two floating tensors of one dtype compute in it: neither is bool, so only a bool alpha
    // can be refused (every check of `checked_compute_type` passes otherwise).
    if let Other::Tensor(t) = other {
        let d = a.dtype();
        if t.dtype() == d
            && d.is_floating()
            && !matches!(
                op,
                BinaryOp::Add(Scalar::Bool(_)) | BinaryOp::Sub(Scalar::Bool(_))
            )
        {
            return Ok(d);
        }
    }
    checked_compute_type(op_name, op, a, other)
}

/// [`compute_type`] for every case, with the errors.
#[inline(never)]
fn checked_compute_type(
    op_name: &'static str,
    op: BinaryOp,
    a: &Tensor,
    other: &Other<'_>,
) -> Result<DType> {
    // Two tensors of one dtype promote to it whatever their dimensions: skip the general rule.
    let common = match other {
        Other::Tensor(t) if t.dtype() == a.dtype() => a.dtype(),
        _ => result_type(&[Arg::Tensor(a), other.arg()]),
    };
    let other_bool = match other {
        Other::Tensor(t) => t.dtype() == DType::Bool,
        Other::Scalar(s) => matches!(s, Scalar::Bool(_)),
    };
    match op {
        BinaryOp::Sub(_) if a.dtype() == DType::Bool || other_bool => Err(Error::dtype(
            op_name,
            "subtraction with a bool operand is not supported",
            Some("to invert a mask use logical_not(); otherwise convert with .to(DType::U8) first"),
        )),
        BinaryOp::Add(alpha) | BinaryOp::Sub(alpha)
            if !common.is_floating() && matches!(alpha, Scalar::Float(_)) =>
        {
            Err(Error::dtype(
                op_name,
                format!(
                    "alpha {} is a float but the inputs are {common}",
                    alpha.to_f64()
                ),
                Some("use an integer alpha for integer tensors"),
            ))
        }
        BinaryOp::Add(Scalar::Bool(_)) | BinaryOp::Sub(Scalar::Bool(_))
            if common != DType::Bool =>
        {
            Err(Error::dtype(
                op_name,
                format!("a bool alpha is accepted only when the result is bool, here {common}"),
                Some("pass alpha as a number (1 or 0)"),
            ))
        }
        BinaryOp::Pow
            if !common.is_floating()
                && matches!(other, Other::Scalar(Scalar::Int(e)) if *e < 0) =>
        {
            Err(Error::dtype(
                op_name,
                format!(
                    "an integer tensor ({common}) cannot be raised to a negative integer power"
                ),
                Some("convert the base to a floating dtype first, or pass the exponent as a float"),
            ))
        }
        BinaryOp::Div if !common.is_floating() => Ok(DType::F32),
        _ => Ok(common),
    }
}

/// Runs `op` over `plan` on `backend`, computing in `compute`.
fn run_kernel(backend: &dyn Backend, plan: &Plan, op: BinaryOp, compute: DType, other: &Other<'_>) {
    let scalar = match other {
        Other::Scalar(s) => Some(*s),
        Other::Tensor(_) => None,
    };
    // SAFETY: `plan` comes from `Prepared::execute`, which holds the locks.
    unsafe { backend.binary(plan, op, compute, scalar) }
}

/// Whether the number in `a op number` is an operand of PyTorch's loop (a 0-d tensor, which
/// takes part in the output's layout). It is for arithmetic and comparisons; `pow` with a
/// number exponent is a unary op of the base, laid out as the base alone.
fn scalar_operand(op: BinaryOp, other: &Other<'_>) -> bool {
    matches!(other, Other::Scalar(_)) && op != BinaryOp::Pow
}

/// `a op b` into a new tensor.
pub(crate) fn binary(
    ctx: &OpContext,
    a: &Tensor,
    other: Other<'_>,
    op: BinaryOp,
) -> Result<Tensor> {
    let backend = for_device(a.device())?;
    let compute = compute_type(ctx.op(), op, a, &other)?;
    let out_dtype = if op.is_comparison() {
        DType::Bool
    } else {
        compute
    };
    let pair;
    let inputs: &[&Tensor] = match other {
        Other::Tensor(t) => {
            pair = [a, t];
            &pair
        }
        Other::Scalar(_) => std::slice::from_ref(&a),
    };
    contiguous::new_output(
        ctx,
        out_dtype,
        compute,
        inputs,
        scalar_operand(op, &other),
        |plan| run_kernel(backend, plan, op, compute, &other),
    )
}

/// `a op= b` in place.
pub(crate) fn binary_(
    ctx: &OpContext,
    a: &Tensor,
    other: Other<'_>,
    op: BinaryOp,
) -> Result<Tensor> {
    binary_inplace(ctx, a, other, op, true)
}

/// `a op= b` in place, optionally without counting it as a version step (for ops made of
/// several such steps).
pub(crate) fn binary_inplace(
    ctx: &OpContext,
    a: &Tensor,
    other: Other<'_>,
    op: BinaryOp,
    bump_version: bool,
) -> Result<Tensor> {
    let backend = for_device(a.device())?;
    let compute = compute_type(ctx.op(), op, a, &other)?;
    let result = if op.is_comparison() {
        DType::Bool
    } else {
        compute
    };
    check_cast(ctx.op(), result, a.dtype())?;
    let mut inputs = vec![a];
    if let Other::Tensor(t) = other {
        inputs.push(t);
    }
    let mut prepared = ElementwiseSpec::new(Output::Existing(a), inputs)
        .with_scalar_operand(matches!(other, Other::Scalar(_)))
        .infer(ctx.op())?;
    if !bump_version {
        prepared = prepared.without_version_bump();
    }
    prepared.execute(ctx, |plan| run_kernel(backend, plan, op, compute, &other))
}

/// `a op b` written into `out`, which is resized to the broadcast shape when it has another.
pub(crate) fn binary_out(
    ctx: &OpContext,
    a: &Tensor,
    other: Other<'_>,
    op: BinaryOp,
    out: &Tensor,
) -> Result<Tensor> {
    let backend = for_device(a.device())?;
    let compute = compute_type(ctx.op(), op, a, &other)?;
    let result = if op.is_comparison() {
        DType::Bool
    } else {
        compute
    };
    check_cast(ctx.op(), result, out.dtype())?;
    let mut inputs = vec![a];
    if let Other::Tensor(t) = other {
        inputs.push(t);
    }
    let input_dtypes = [compute; 2];
    let prepared = ElementwiseSpec::new(Output::Out(out), inputs)
        .with_scalar_operand(scalar_operand(op, &other))
        .with_input_dtypes(&input_dtypes)
        .infer(ctx.op())?;
    if result != out.dtype() {
        // As PyTorch: computed (and rounded) in the result's dtype, then cast into `out`. An
        // `out` of another shape is first resized as the op's operands lay it out, not as
        // the intermediate result would.
        prepared.resize_output(ctx)?;
        let value = binary(ctx, a, other, op)?;
        return ElementwiseSpec::new(Output::Out(out), vec![&value])
            .infer(ctx.op())?
            // SAFETY: `execute` locks the storages and passes a plan valid for them.
            .execute(ctx, |plan| unsafe { backend.copy(plan) });
    }
    prepared.execute(ctx, |plan| run_kernel(backend, plan, op, compute, &other))
}
