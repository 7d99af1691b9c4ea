//! The unary element-wise kernels: floating functions and dtype-keeping maps over a plan.

use super::kernels;
use super::math::{dispatch_float, Float, FloatFn};
use super::Plan;
use crate::backend::kernel::{FloatOp, SameOp};
use crate::dtype::{compute_dtype, dispatch, DType, DTypeFn, Element};
use crate::Scalar;

/// The cubic coefficient of gelu's tanh approximation.
const GELU_TANH_KAPPA: f64 = 0.044715;

/// `(√(2/π), 0.044715)` in `T`: the scale and cubic coefficient of gelu's tanh form.
fn gelu_tanh_constants<T: Float>() -> (T, T) {
    let beta = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
    (T::from_f64(beta), T::from_f64(GELU_TANH_KAPPA))
}

struct FloatKernel<'a>(&'a Plan, FloatOp);

impl FloatFn for FloatKernel<'_> {
    type Output = ();
    fn call<T: Float>(self) {
        let plan = self.0;
        let one = T::ONE;
        let half = T::from_f64(0.5);
        let inv_sqrt2 = T::from_f64(std::f64::consts::FRAC_1_SQRT_2);
        // SAFETY: the plan is valid and locked (the contract of `float` and `same`).
        unsafe {
            match self.1 {
                FloatOp::Exp => kernels::map1::<T, T>(plan, |x| x.exp()),
                FloatOp::Log => kernels::map1::<T, T>(plan, |x| x.ln()),
                FloatOp::Sqrt => kernels::map1::<T, T>(plan, |x| x.sqrt()),
                FloatOp::Rsqrt => kernels::map1::<T, T>(plan, move |x| one.div(x.sqrt())),
                FloatOp::Sin => kernels::map1::<T, T>(plan, |x| x.sin()),
                FloatOp::Cos => kernels::map1::<T, T>(plan, |x| x.cos()),
                FloatOp::Tanh => kernels::map1::<T, T>(plan, |x| x.tanh_vectorisable()),
                FloatOp::Sigmoid => kernels::map1::<T, T>(plan, move |x| {
                    one.div(one.add(x.neg().exp_vectorisable()))
                }),
                FloatOp::Gelu => kernels::map1::<T, T>(plan, move |x| {
                    x.mul(half)
                        .mul(one.add(x.mul(inv_sqrt2).erf_vectorisable()))
                }),
                FloatOp::Silu => {
                    kernels::map1::<T, T>(plan, move |x| x.div(one.add(x.neg().exp_vectorisable())))
                }
                FloatOp::GeluTanh => {
                    let (beta, kappa) = gelu_tanh_constants::<T>();
                    kernels::map1::<T, T>(plan, move |x| {
                        let inner = beta.mul(x.add(kappa.mul(x).mul(x).mul(x)));
                        half.mul(x).mul(one.add(inner.tanh_vectorisable()))
                    })
                }
                FloatOp::GeluTanhDerivative => {
                    let (beta, kappa) = gelu_tanh_constants::<T>();
                    let three_kappa = T::from_f64(3.0 * GELU_TANH_KAPPA);
                    // PyTorch's `gelu_backward` with approximate="tanh", term by term.
                    kernels::map1::<T, T>(plan, move |x| {
                        let x_sq = x.mul(x);
                        let inner = beta.mul(x.add(kappa.mul(x_sq).mul(x)));
                        let t = inner.tanh_vectorisable();
                        let left = half.mul(x);
                        let right = one.add(t);
                        let left_derivative = half.mul(right);
                        let right_derivative = left
                            .mul(one.sub(t.mul(t)))
                            .mul(beta.mul(one.add(three_kappa.mul(x_sq))));
                        left_derivative.add(right_derivative)
                    })
                }
                FloatOp::GeluDerivative => {
                    let inv_sqrt_2pi = T::from_f64(
                        0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2,
                    );
                    kernels::map1::<T, T>(plan, move |x| {
                        let cdf = half.mul(one.add(x.mul(inv_sqrt2).erf_vectorisable()));
                        let pdf = x
                            .mul(x)
                            .mul(half)
                            .neg()
                            .exp_vectorisable()
                            .mul(inv_sqrt_2pi);
                        cdf.add(x.mul(pdf))
                    })
                }
            }
        }
    }
}

struct SameKernel<'a>(&'a Plan, SameOp);

impl DTypeFn for SameKernel<'_> {
    type Output = ();
    fn call<T: Element>(self) {
        let plan = self.0;
        // SAFETY: the plan is valid and locked (the contract of `float` and `same`).
        unsafe {
            match self.1 {
                SameOp::Neg => kernels::map1::<T, T>(plan, |x| x.neg()),
                SameOp::Abs => kernels::map1::<T, T>(plan, |x| x.abs()),
                SameOp::Relu => kernels::map1::<T, T>(plan, |x| {
                    if x.is_nan() || x > T::ZERO {
                        x
                    } else {
                        T::ZERO
                    }
                }),
                // Only ±∞ minus itself is NaN without being NaN to begin with.
                SameOp::ZeroInfinities => kernels::map1::<T, T>(plan, |x| {
                    if !x.is_nan() && x.sub(x).is_nan() {
                        T::ZERO
                    } else {
                        x
                    }
                }),
                SameOp::Clamp(lo, hi) => {
                    let lo: Option<T> = lo.map(Scalar::to);
                    let hi: Option<T> = hi.map(Scalar::to);
                    kernels::map1::<T, T>(plan, move |x| {
                        let x = match lo {
                            Some(l) => x.maximum_nan(l),
                            None => x,
                        };
                        match hi {
                            Some(h) => x.minimum_nan(h),
                            None => x,
                        }
                    })
                }
            }
        }
    }
}

/// `out = f(x)` over `plan`, computed in the floating dtype `compute` (nothing for another).
///
/// # Safety
/// The plan's operands must be valid for the loop and locked: operand 0 writable, operand 1
/// readable.
pub(crate) unsafe fn float(plan: &Plan, f: FloatOp, compute: DType) {
    let _ = dispatch_float(compute, FloatKernel(plan, f));
}

/// `out = s(x)` over `plan`, computed in `compute`.
///
/// # Safety
/// As for [`float`].
pub(crate) unsafe fn same(plan: &Plan, s: SameOp, compute: DType) {
    dispatch(compute_dtype(compute), SameKernel(plan, s));
}
