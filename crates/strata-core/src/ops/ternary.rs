//! Three-operand element-wise ops: `where`, `addcmul` (both also into a given tensor), and the fused multiply-add that
//! backward formulas use to round as PyTorch's compiled kernels do.

use crate::backend::kernel::TernaryOp;
use crate::backend::{for_device, Backend, Plan};
use crate::op::OpContext;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::ops::out::check_cast;
use crate::ops::out::expect_dtype;
use crate::ops::promote::{result_type, Arg};
use crate::{DType, Error, Result, Scalar, Tensor};

/// Runs `op` over `plan` on the operands' backend.
fn run(backend: &dyn Backend, plan: &Plan, op: TernaryOp, dtype: DType) {
    // SAFETY: `plan` comes from `Prepared::execute`, which holds the locks.
    unsafe { backend.ternary(plan, op, dtype) }
}

/// `a * b + c` with a single rounding, all three broadcast; floating dtypes only. Not
/// recorded: backward formulas use it where PyTorch's kernels are compiled to
/// fused multiply-adds, so that gradients dominated by cancellation round the same way.
pub(crate) fn fused_mul_add(ctx: &OpContext, a: &Tensor, b: &Tensor, c: &Tensor) -> Result<Tensor> {
    let backend = for_device(a.device())?;
    let dtype = result_type(&[Arg::Tensor(a), Arg::Tensor(b), Arg::Tensor(c)]);
    if !dtype.is_floating() {
        return Err(Error::dtype(
            ctx.op(),
            format!("a fused multiply-add needs floating tensors, got {dtype}"),
            None,
        ));
    }
    ElementwiseSpec::new(Output::New(dtype), vec![a, b, c])
        .infer(ctx.op())?
        .execute(ctx, |plan| {
            run(backend, plan, TernaryOp::FusedMulAdd, dtype)
        })
}

/// Elements of `a` where `condition` is true (bool, or u8 non-zero), else of `b`, into a
/// new tensor.
pub(crate) fn where_cond(
    ctx: &OpContext,
    condition: &Tensor,
    a: &Tensor,
    b: &Tensor,
) -> Result<Tensor> {
    let backend = for_device(a.device())?;
    let dtype = where_dtype(ctx.op(), condition, a, b)?;
    ElementwiseSpec::new(Output::New(dtype), vec![condition, a, b])
        .with_input_dtypes(&[DType::Bool, dtype, dtype])
        .infer(ctx.op())?
        .execute(ctx, |plan| run(backend, plan, TernaryOp::Where, dtype))
}

/// `where(condition, a, b)` written into `out`, which must have the promoted dtype of `a`
/// and `b` exactly (as in PyTorch).
pub(crate) fn where_out(
    ctx: &OpContext,
    condition: &Tensor,
    a: &Tensor,
    b: &Tensor,
    out: &Tensor,
) -> Result<Tensor> {
    let backend = for_device(a.device())?;
    let dtype = where_dtype(ctx.op(), condition, a, b)?;
    expect_dtype(ctx.op(), out, dtype)?;
    ElementwiseSpec::new(Output::Out(out), vec![condition, a, b])
        .with_input_dtypes(&[DType::Bool, dtype, dtype])
        .infer(ctx.op())?
        .execute(ctx, |plan| run(backend, plan, TernaryOp::Where, dtype))
}

/// `x + value * t1 * t2` into a new tensor.
pub(crate) fn addcmul(
    ctx: &OpContext,
    x: &Tensor,
    t1: &Tensor,
    t2: &Tensor,
    value: Scalar,
) -> Result<Tensor> {
    let backend = for_device(x.device())?;
    let dtype = addcmul_dtype(ctx.op(), x, t1, t2, value)?;
    ElementwiseSpec::new(Output::New(dtype), vec![x, t1, t2])
        .with_input_dtypes(&[dtype; 3])
        .infer(ctx.op())?
        .execute(ctx, |plan| {
            run(backend, plan, TernaryOp::AddCMul(value), dtype)
        })
}

/// `x + value * t1 * t2` written into `out`, whose dtype must hold the promoted result.
pub(crate) fn addcmul_out(
    ctx: &OpContext,
    x: &Tensor,
    t1: &Tensor,
    t2: &Tensor,
    value: Scalar,
    out: &Tensor,
) -> Result<Tensor> {
    let backend = for_device(x.device())?;
    let dtype = addcmul_dtype(ctx.op(), x, t1, t2, value)?;
    check_cast(ctx.op(), dtype, out.dtype())?;
    ElementwiseSpec::new(Output::Out(out), vec![x, t1, t2])
        .with_input_dtypes(&[dtype; 3])
        .infer(ctx.op())?
        .execute(ctx, |plan| {
            run(backend, plan, TernaryOp::AddCMul(value), dtype)
        })
}

/// The dtype of `where(condition, a, b)`, after checking the condition is bool.
fn where_dtype(op: &'static str, condition: &Tensor, a: &Tensor, b: &Tensor) -> Result<DType> {
    // PyTorch also accepts a u8 condition (non-zero is true).
    if !matches!(condition.dtype(), DType::Bool | DType::U8) {
        return Err(Error::dtype(
            op,
            format!(
                "the condition must be a bool tensor, got {}",
                condition.dtype()
            ),
            Some("build it with a comparison, or convert with .to(DType::Bool)"),
        ));
    }
    Ok(result_type(&[Arg::Tensor(a), Arg::Tensor(b)]))
}

/// The dtype of `addcmul`, after checking `value` fits it.
fn addcmul_dtype(
    op: &'static str,
    x: &Tensor,
    t1: &Tensor,
    t2: &Tensor,
    value: Scalar,
) -> Result<DType> {
    // As PyTorch, a float value with integer tensors is truncated to an integer.
    let _ = (op, value);
    Ok(result_type(&[
        Arg::Tensor(x),
        Arg::Tensor(t1),
        Arg::Tensor(t2),
    ]))
}
