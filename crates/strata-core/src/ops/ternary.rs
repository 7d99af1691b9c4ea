//! Three-operand element-wise ops: `where` and `addcmul`.

use crate::dtype::{compute_dtype, dispatch, DTypeFn, Element};
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

impl Tensor {
    /// Elements of `a` where `condition` is true, else of `b`; all three broadcast.
    #[track_caller]
    pub fn where_(condition: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("where");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            if condition.dtype() != DType::Bool {
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

    /// `self + value * t1 * t2`, all broadcast.
    #[track_caller]
    pub fn addcmul(&self, t1: &Tensor, t2: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        let ctx = OpContext::enter("addcmul");
        let value = value.into();
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            let dtype = result_type(&[Arg::Tensor(self), Arg::Tensor(t1), Arg::Tensor(t2)]);
            if !dtype.is_floating() && matches!(value, Scalar::Float(_)) {
                return Err(Error::dtype(
                    ctx.op(),
                    format!(
                        "value {} is a float but the tensors are {dtype}",
                        value.to_f64()
                    ),
                    Some("use an integer value for integer tensors"),
                ));
            }
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
