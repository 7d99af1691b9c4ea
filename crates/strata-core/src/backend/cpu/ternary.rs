//! The three-operand element-wise kernels (`where`, `addcmul`, the fused multiply-add),
//! `masked_fill`, and fills.

use super::kernels;
use super::Plan;
use crate::backend::kernel::TernaryOp;
use crate::dtype::{compute_dtype, dispatch, DType, DTypeFn, Element, Wide};
use crate::Scalar;

struct Kernel<'a>(&'a Plan, TernaryOp);

impl DTypeFn for Kernel<'_> {
    type Output = ();
    fn call<T: Element>(self) {
        let plan = self.0;
        // SAFETY: the plan is valid and locked (the contract of `ternary`).
        unsafe {
            match self.1 {
                // Operands (out, cond, a, b); the condition is read converted to T (0 or 1).
                TernaryOp::Where => {
                    kernels::map3::<T, T>(plan, |c, a, b| if c != T::ZERO { a } else { b })
                }
                TernaryOp::AddCMul(value) => {
                    let v: T = value.to();
                    kernels::map3::<T, T>(plan, move |x, a, b| x.add(v.mul(a.mul(b))))
                }
                TernaryOp::FusedMulAdd if T::DTYPE == DType::F64 => {
                    kernels::map3::<T, T>(plan, |a, b, c| {
                        T::from_wide(Wide::Float(a.to_f64().mul_add(b.to_f64(), c.to_f64())))
                    })
                }
                // The product of two f32 values is exact in f64, so one rounding of the sum
                // to f32 gives the fused result except when the f64 sum lies exactly halfway
                // between two f32 values after its own rounding (about 1 in 2^29).
                TernaryOp::FusedMulAdd => kernels::map3::<T, T>(plan, |a, b, c| {
                    T::from_wide(Wide::Float(a.to_f64() * b.to_f64() + c.to_f64()))
                }),
                // Operands (out, x, mask); the mask is read converted to T (0 or 1).
                TernaryOp::MaskedFill(value) => {
                    let v: T = value.to();
                    kernels::map2::<T, T>(plan, move |x, m| if m != T::ZERO { v } else { x })
                }
            }
        }
    }
}

/// Runs `op` over `plan` in `dtype`: `masked_fill` in `dtype` itself, the others computed in
/// [`compute_dtype`]`(dtype)`.
///
/// # Safety
/// The plan's operands must be valid for the loop and locked: operand 0 writable, the
/// others readable.
pub(crate) unsafe fn ternary(plan: &Plan, op: TernaryOp, dtype: DType) {
    let compute = match op {
        TernaryOp::MaskedFill(_) => dtype,
        _ => compute_dtype(dtype),
    };
    dispatch(compute, Kernel(plan, op));
}

/// Sets every element of operand 0 to `value`, converted to its dtype.
///
/// # Safety
/// The plan's only operand must be valid for the loop, writable and locked.
pub(crate) unsafe fn fill(plan: &Plan, value: Scalar) {
    struct F<'a>(&'a Plan, Scalar);
    impl DTypeFn for F<'_> {
        type Output = ();
        fn call<T: Element>(self) {
            // SAFETY: the contract of `fill`.
            unsafe { kernels::fill::<T>(self.0, self.1.to()) }
        }
    }
    dispatch(plan.dtype(0), F(plan, value));
}
