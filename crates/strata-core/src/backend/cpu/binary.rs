//! The binary element-wise kernels: arithmetic, `pow`, `maximum`/`minimum` and comparisons,
//! with a second tensor operand or a number.

use super::kernels;
use super::Plan;
use crate::backend::kernel::BinaryOp;
use crate::dtype::{compute_dtype, dispatch, DType, DTypeFn, Element};
use crate::Scalar;

struct Kernel<'a> {
    plan: &'a Plan,
    op: BinaryOp,
    /// The second operand when it is a number.
    scalar: Option<Scalar>,
}

impl DTypeFn for Kernel<'_> {
    type Output = ();
    fn call<T: Element>(self) {
        let plan = self.plan;
        macro_rules! run {
            ($f:expr, $o:ty) => {
                match self.scalar {
                    Some(s) => {
                        let b: T = s.to();
                        let f = $f;
                        // SAFETY: the plan is valid and locked (the contract of `binary`).
                        unsafe { kernels::map1::<T, $o>(plan, move |a| f(a, b)) }
                    }
                    // SAFETY: as above.
                    None => unsafe { kernels::map2::<T, $o>(plan, $f) },
                }
            };
        }
        match self.op {
            BinaryOp::Add(alpha) => {
                let al: T = alpha.to();
                if al == T::ONE {
                    run!(|a: T, b: T| a.add(b), T)
                } else {
                    run!(move |a: T, b: T| a.add(b.mul(al)), T)
                }
            }
            BinaryOp::Sub(alpha) => {
                let al: T = alpha.to();
                if al == T::ONE {
                    run!(|a: T, b: T| a.sub(b), T)
                } else {
                    run!(move |a: T, b: T| a.sub(b.mul(al)), T)
                }
            }
            BinaryOp::Mul => run!(|a: T, b: T| a.mul(b), T),
            BinaryOp::Div => run!(|a: T, b: T| a.div(b), T),
            BinaryOp::Pow => run!(|a: T, b: T| a.pow(b), T),
            BinaryOp::Maximum => run!(|a: T, b: T| a.maximum_nan(b), T),
            BinaryOp::Minimum => run!(|a: T, b: T| a.minimum_nan(b), T),
            BinaryOp::Eq => run!(|a: T, b: T| a == b, bool),
            BinaryOp::Ne => run!(|a: T, b: T| a != b, bool),
            BinaryOp::Lt => run!(|a: T, b: T| a < b, bool),
            BinaryOp::Le => run!(|a: T, b: T| a <= b, bool),
            BinaryOp::Gt => run!(|a: T, b: T| a > b, bool),
            BinaryOp::Ge => run!(|a: T, b: T| a >= b, bool),
            BinaryOp::ReluGrad => run!(|a: T, b: T| if b <= T::ZERO { T::ZERO } else { a }, T),
        }
    }
}

/// `out = a op b` over `plan`, computed in `compute` (f16 and bf16 widened to f32): operands
/// (out, a, b), or (out, a) with `scalar` as `b`.
///
/// # Safety
/// The plan's operands must be valid for the loop and locked: operand 0 writable, the
/// others readable.
pub(crate) unsafe fn binary(plan: &Plan, op: BinaryOp, compute: DType, scalar: Option<Scalar>) {
    dispatch(compute_dtype(compute), Kernel { plan, op, scalar });
}
