//! Binary element-wise ops: arithmetic, `pow`, `maximum`/`minimum` and comparisons, with
//! tensors or numbers, out of place and in place.

use crate::autograd::formulas::binary as grad;
use crate::autograd::record::refuse_out_with_grad;
use crate::dtype::{compute_dtype, dispatch, DTypeFn, Element};

use crate::backend::cpu::{kernels, Plan};
use crate::op::OpContext;
use crate::ops::contiguous;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::ops::promote::{result_type, Arg};
use crate::{DType, Error, Result, Scalar, Tensor};

/// Which binary op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum BinaryOp {
    Add(Scalar),
    Sub(Scalar),
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinaryOp {
    fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

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
fn compute_type(
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
        // SAFETY (all arms): `plan` comes from `Prepared::execute`, which holds the locks.
        macro_rules! run {
            ($f:expr, $o:ty) => {
                match self.scalar {
                    Some(s) => {
                        let b: T = s.to();
                        let f = $f;
                        unsafe { kernels::map1::<T, $o>(plan, move |a| f(a, b)) }
                    }
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
        }
    }
}

fn run_kernel(plan: &Plan, op: BinaryOp, compute: DType, other: &Other<'_>) {
    let scalar = match other {
        Other::Scalar(s) => Some(*s),
        Other::Tensor(_) => None,
    };
    dispatch(compute_dtype(compute), Kernel { plan, op, scalar });
}

/// `a op b` into a new tensor.
pub(crate) fn binary(
    ctx: &OpContext,
    a: &Tensor,
    other: Other<'_>,
    op: BinaryOp,
) -> Result<Tensor> {
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
    let out = contiguous::new_output(
        ctx,
        out_dtype,
        inputs,
        matches!(other, Other::Scalar(_)),
        |plan| run_kernel(plan, op, compute, &other),
    )?;
    grad::binary(ctx, a, &other, op, &out)?;
    Ok(out)
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
    let rec = grad::binary_inplace_begin(ctx, a, &other, op)?;
    let out = prepared.execute(ctx, |plan| run_kernel(plan, op, compute, &other))?;
    if let Some(rec) = rec {
        rec.finish(a, &other)?;
    }
    Ok(out)
}

/// `a op b` written into `out`, which is resized to the broadcast shape when it has another.
pub(crate) fn binary_out(
    ctx: &OpContext,
    a: &Tensor,
    other: Other<'_>,
    op: BinaryOp,
    out: &Tensor,
) -> Result<Tensor> {
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
    let prepared = ElementwiseSpec::new(Output::Out(out), inputs)
        .with_scalar_operand(matches!(other, Other::Scalar(_)))
        .infer(ctx.op())?;
    let mut operands = vec![a];
    if let Other::Tensor(t) = other {
        operands.push(t);
    }
    refuse_out_with_grad(ctx.op(), &operands, out)?;
    if result != out.dtype() {
        // As PyTorch: computed (and rounded) in the result's dtype, then cast into `out`.
        drop(prepared);
        let value = crate::mode::internal(|| binary(ctx, a, other, op))?;
        return ElementwiseSpec::new(Output::Out(out), vec![&value])
            .infer(ctx.op())?
            // SAFETY: `execute` locks the storages and passes a plan valid for them.
            .execute(ctx, |plan| unsafe {
                crate::backend::cpu::kernels::copy(plan)
            });
    }
    prepared.execute(ctx, |plan| run_kernel(plan, op, compute, &other))
}

/// The error for an in-place result that the destination's dtype cannot hold.
pub(crate) fn check_cast(op: &'static str, result: DType, dest: DType) -> Result<()> {
    if result.can_cast_to(dest) {
        return Ok(());
    }
    Err(Error::dtype(
        op,
        format!(
            "the result has dtype {result}, which cannot be stored in a tensor of dtype {dest}"
        ),
        Some("use the out-of-place op, or convert the destination first with .to(dtype)"),
    ))
}

macro_rules! binary_methods {
    ($($name:ident, $name_:ident, $op:expr, $doc:literal;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("`", $doc, "` element-wise with broadcasting and type promotion; `other` is a tensor or a number.")]
                #[track_caller]
                pub fn $name<'a>(&self, other: impl Into<Other<'a>>) -> Result<Tensor> {
                    let ctx = OpContext::enter(stringify!($name));
                    binary(&ctx, self, other.into(), $op)
                }

                #[doc = concat!("In-place `", $doc, "`: writes into `self`, whose shape and dtype must hold the result.")]
                #[track_caller]
                pub fn $name_<'a>(&self, other: impl Into<Other<'a>>) -> Result<Tensor> {
                    let ctx = OpContext::enter(stringify!($name_));
                    binary_(&ctx, self, other.into(), $op)
                }
            )*
        }
    };
}

binary_methods! {
    add, add_, BinaryOp::Add(Scalar::Int(1)), "self + other";
    sub, sub_, BinaryOp::Sub(Scalar::Int(1)), "self - other";
    mul, mul_, BinaryOp::Mul, "self * other";
    div, div_, BinaryOp::Div, "self / other (true division)";
    pow, pow_, BinaryOp::Pow, "self ** other";
}

impl Tensor {
    /// `self + alpha * other`.
    #[track_caller]
    pub fn add_scaled<'a>(
        &self,
        other: impl Into<Other<'a>>,
        alpha: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("add");
        binary(&ctx, self, other.into(), BinaryOp::Add(alpha.into()))
    }

    /// In place: `self += alpha * other`.
    #[track_caller]
    pub fn add_scaled_<'a>(
        &self,
        other: impl Into<Other<'a>>,
        alpha: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("add_");
        binary_(&ctx, self, other.into(), BinaryOp::Add(alpha.into()))
    }

    /// `self - alpha * other`.
    #[track_caller]
    pub fn sub_scaled<'a>(
        &self,
        other: impl Into<Other<'a>>,
        alpha: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("sub");
        binary(&ctx, self, other.into(), BinaryOp::Sub(alpha.into()))
    }

    /// `self + alpha * other` written into `out` (PyTorch's `add(..., out=out)`): no
    /// allocation when `out` already has the result's shape; otherwise it is resized.
    #[track_caller]
    pub fn add_out<'a>(
        &self,
        other: impl Into<Other<'a>>,
        alpha: impl Into<Scalar>,
        out: &Tensor,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("add_out");
        binary_out(&ctx, self, other.into(), BinaryOp::Add(alpha.into()), out)
    }

    /// `self - alpha * other` written into `out` (PyTorch's `sub(..., out=out)`).
    #[track_caller]
    pub fn sub_out<'a>(
        &self,
        other: impl Into<Other<'a>>,
        alpha: impl Into<Scalar>,
        out: &Tensor,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("sub_out");
        binary_out(&ctx, self, other.into(), BinaryOp::Sub(alpha.into()), out)
    }

    /// `self * other` written into `out` (PyTorch's `mul(..., out=out)`).
    #[track_caller]
    pub fn mul_out<'a>(&self, other: impl Into<Other<'a>>, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("mul_out");
        binary_out(&ctx, self, other.into(), BinaryOp::Mul, out)
    }

    /// `self / other` (true division) written into `out` (PyTorch's `div(..., out=out)`).
    #[track_caller]
    pub fn div_out<'a>(&self, other: impl Into<Other<'a>>, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("div_out");
        binary_out(&ctx, self, other.into(), BinaryOp::Div, out)
    }

    /// In place: `self += value` for a number (shorthand for `add_(Scalar)`).
    #[track_caller]
    pub fn add_scalar_(&self, value: impl Into<Scalar>) -> Result<Tensor> {
        let ctx = OpContext::enter("add_");
        binary_(
            &ctx,
            self,
            Other::Scalar(value.into()),
            BinaryOp::Add(Scalar::Int(1)),
        )
    }

    /// The larger of each pair of elements (NaN if either is NaN).
    #[track_caller]
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("maximum");
        binary(&ctx, self, Other::Tensor(other), BinaryOp::Maximum)
    }

    /// The smaller of each pair of elements (NaN if either is NaN).
    #[track_caller]
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("minimum");
        binary(&ctx, self, Other::Tensor(other), BinaryOp::Minimum)
    }
}

macro_rules! comparison_methods {
    ($($name:ident, $name_out:ident, $op:expr, $doc:literal;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("`", $doc, "` element-wise, as a bool tensor.")]
                #[track_caller]
                pub fn $name<'a>(&self, other: impl Into<Other<'a>>) -> Result<Tensor> {
                    let ctx = OpContext::enter(stringify!($name));
                    binary(&ctx, self, other.into(), $op)
                }

                #[doc = concat!("`", $doc, "` written into `out` (PyTorch's `", stringify!($name),
                    "(..., out=out)`): the bool result is stored in `out`'s dtype, whichever it is.")]
                #[track_caller]
                pub fn $name_out<'a>(&self, other: impl Into<Other<'a>>, out: &Tensor) -> Result<Tensor> {
                    let ctx = OpContext::enter(stringify!($name_out));
                    binary_out(&ctx, self, other.into(), $op, out)
                }
            )*
        }
    };
}

comparison_methods! {
    eq, eq_out, BinaryOp::Eq, "self == other";
    ne, ne_out, BinaryOp::Ne, "self != other";
    lt, lt_out, BinaryOp::Lt, "self < other";
    le, le_out, BinaryOp::Le, "self <= other";
    gt, gt_out, BinaryOp::Gt, "self > other";
    ge, ge_out, BinaryOp::Ge, "self >= other";
}

impl Tensor {
    /// `self ** other` written into `out` (PyTorch's `pow(..., out=out)`); `out`'s dtype must
    /// hold the promoted result (a float result cannot go into an integer tensor).
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2., 3.], &[3])?;
    /// let out = Tensor::zeros(&[3], DType::F64)?;
    /// x.pow_out(2i64, &out)?;
    /// assert_eq!(out.to_vec::<f64>()?, vec![1., 4., 9.]);
    /// assert!(x.pow_out(2i64, &Tensor::zeros(&[3], DType::I64)?).is_err());
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn pow_out<'a>(&self, other: impl Into<Other<'a>>, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("pow_out");
        binary_out(&ctx, self, other.into(), BinaryOp::Pow, out)
    }

    /// [`Tensor::maximum`] written into `out`, whose dtype must hold the promoted result.
    #[track_caller]
    pub fn maximum_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("maximum_out");
        binary_out(&ctx, self, Other::Tensor(other), BinaryOp::Maximum, out)
    }

    /// [`Tensor::minimum`] written into `out`, whose dtype must hold the promoted result.
    #[track_caller]
    pub fn minimum_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("minimum_out");
        binary_out(&ctx, self, Other::Tensor(other), BinaryOp::Minimum, out)
    }
}
