//! Three-operand element-wise ops: `where`, `addcmul`, and the fused multiply-add that
//! backward formulas use to round as PyTorch's compiled kernels do.

use crate::dtype::{compute_dtype, dispatch, DTypeFn, Element, Wide};
use crate::engine::{kernels, Plan};
use crate::op::OpContext;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::ops::promote::{result_type, Arg};
use crate::{DType, Error, Result, Scalar, Tensor};

struct Where<'a>(&'a Plan);

impl DTypeFn for Where<'_> {
    type Output = ();
    fn call<T: Element>(self) {
        // Operands (out, cond, a, b); the condition is read converted to T (0 or 1).
        // SAFETY: the plan comes from `Prepared::execute`, which holds the locks.
        unsafe { kernels::map3::<T, T>(self.0, |c, a, b| if c != T::ZERO { a } else { b }) }
    }
}

struct AddCMul<'a>(&'a Plan, Scalar);

impl DTypeFn for AddCMul<'_> {
    type Output = ();
    fn call<T: Element>(self) {
        let v: T = self.1.to();
        // SAFETY: the plan comes from `Prepared::execute`, which holds the locks.
        unsafe { kernels::map3::<T, T>(self.0, move |x, a, b| x.add(v.mul(a.mul(b)))) }
    }
}

struct FusedMulAdd<'a>(&'a Plan);

impl DTypeFn for FusedMulAdd<'_> {
    type Output = ();
    fn call<T: Element>(self) {
        // SAFETY: the plan comes from `Prepared::execute`, which holds the locks.
        unsafe {
            if T::DTYPE == DType::F64 {
                kernels::map3::<T, T>(self.0, |a, b, c| {
                    T::from_wide(Wide::Float(a.to_f64().mul_add(b.to_f64(), c.to_f64())))
                })
            } else {
                // The product of two f32 values is exact in f64, so one rounding of the sum
                // to f32 gives the fused result except when the f64 sum lies exactly halfway
                // between two f32 values after its own rounding (about 1 in 2^29).
                kernels::map3::<T, T>(self.0, |a, b, c| {
                    T::from_wide(Wide::Float(a.to_f64() * b.to_f64() + c.to_f64()))
                })
            }
        }
    }
}

/// `a * b + c` with a single rounding, all three broadcast; floating dtypes only. Not
/// recorded by autograd: backward formulas use it where PyTorch's kernels are compiled to
/// fused multiply-adds, so that gradients dominated by cancellation round the same way.
#[track_caller]
pub(crate) fn fused_mul_add(a: &Tensor, b: &Tensor, c: &Tensor) -> Result<Tensor> {
    let ctx = OpContext::enter("fused_mul_add");
    let dtype = result_type(&[Arg::Tensor(a), Arg::Tensor(b), Arg::Tensor(c)]);
    if !dtype.is_floating() {
        return Err(Error::dtype(
            ctx.op(),
            format!("a fused multiply-add needs floating tensors, got {dtype}"),
            None,
        ));
    }
    crate::autograd::mode::internal(|| {
        ElementwiseSpec::new(Output::New(dtype), vec![a, b, c])
            .infer(ctx.op())?
            .execute(&ctx, |plan| {
                dispatch(compute_dtype(dtype), FusedMulAdd(plan))
            })
    })
}

impl Tensor {
    /// Elements of `a` where `condition` is true (bool, or u8 non-zero), else of `b`; all
    /// three broadcast.
    #[track_caller]
    pub fn where_(condition: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("where");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            // PyTorch also accepts a u8 condition (non-zero is true).
            if !matches!(condition.dtype(), DType::Bool | DType::U8) {
                return Err(Error::dtype(
                    ctx.op(),
                    format!(
                        "the condition must be a bool tensor, got {}",
                        condition.dtype()
                    ),
                    Some("build it with a comparison, or convert with .to(DType::Bool)"),
                ));
            }
            let dtype = result_type(&[Arg::Tensor(a), Arg::Tensor(b)]);
            ElementwiseSpec::new(Output::New(dtype), vec![condition, a, b])
                .infer(ctx.op())?
                .execute(&ctx, |plan| dispatch(compute_dtype(dtype), Where(plan)))
        })?;
        crate::autograd::formulas::elementwise::where_(&ctx, condition, a, b, &out)?;
        Ok(out)
    }

    /// `self + value * t1 * t2`, all broadcast (with integer tensors a float `value` is
    /// truncated, as in PyTorch).
    #[track_caller]
    pub fn addcmul(&self, t1: &Tensor, t2: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        let ctx = OpContext::enter("addcmul");
        let value = value.into();
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            // As PyTorch, a float value with integer tensors is truncated to an integer.
            let dtype = result_type(&[Arg::Tensor(self), Arg::Tensor(t1), Arg::Tensor(t2)]);
            ElementwiseSpec::new(Output::New(dtype), vec![self, t1, t2])
                .infer(ctx.op())?
                .execute(&ctx, |plan| {
                    dispatch(compute_dtype(dtype), AddCMul(plan, value))
                })
        })?;
        crate::autograd::formulas::elementwise::addcmul(&ctx, self, t1, t2, value, &out)?;
        Ok(out)
    }
}
