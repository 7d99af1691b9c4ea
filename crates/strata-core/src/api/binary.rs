//! Binary element-wise ops: arithmetic, `pow`, `maximum`/`minimum` and comparisons, with
//! tensors or numbers, out of place, in place and into a given tensor (`_out`). Forward in
//! [`crate::ops::binary`], backward in [`crate::autograd::formulas::binary`].

use super::entry::Entry;
use crate::autograd::formulas::binary as grad;
use crate::ops::binary::{self as fwd, BinaryOp, Other};
use crate::{Result, Scalar, Tensor};

/// The tensor operands, `a` and `other` when it is a tensor: an array and how much of it
/// is used.
fn operands<'t>(a: &'t Tensor, other: &Other<'t>) -> ([&'t Tensor; 2], usize) {
    match *other {
        Other::Tensor(b) => ([a, b], 2),
        Other::Scalar(_) => ([a, a], 1),
    }
}

/// The second operand as the op computes with it: the tensor `x[1]` (as the entry may have
/// cast it), or the number.
fn second<'t>(x: &[&'t Tensor], other: &Other<'_>) -> Other<'t> {
    match *other {
        Other::Tensor(_) => Other::Tensor(x[1]),
        Other::Scalar(s) => Other::Scalar(s),
    }
}

#[track_caller]
fn binary(a: &Tensor, other: Other<'_>, name: &'static str, op: BinaryOp) -> Result<Tensor> {
    let (inputs, n) = operands(a, &other);
    Entry::new(name, &inputs[..n])?.run(
        |ctx, x| fwd::binary(ctx, x[0], second(x, &other), op),
        |ctx, x, out| grad::binary(ctx, x[0], &second(x, &other), op, out),
    )
}

/// A comparison: a bool result, without a backward.
#[track_caller]
fn compare(a: &Tensor, other: Other<'_>, name: &'static str, op: BinaryOp) -> Result<Tensor> {
    debug_assert!(op.is_comparison());
    let (inputs, n) = operands(a, &other);
    Entry::new(name, &inputs[..n])?
        .run_untracked(|ctx, x| fwd::binary(ctx, x[0], second(x, &other), op))
}

#[track_caller]
fn binary_(a: &Tensor, other: Other<'_>, name: &'static str, op: BinaryOp) -> Result<Tensor> {
    let (inputs, n) = operands(a, &other);
    Entry::new(name, &inputs[..n])?.run_inplace(
        |ctx, x| grad::binary_inplace_begin(ctx, x[0], &second(x, &other), op),
        |ctx, x| fwd::binary_(ctx, x[0], second(x, &other), op),
        |rec, x| rec.finish(x[0], &second(x, &other)),
    )
}

#[track_caller]
fn binary_out(
    a: &Tensor,
    other: Other<'_>,
    name: &'static str,
    op: BinaryOp,
    out: &Tensor,
) -> Result<Tensor> {
    let (inputs, n) = operands(a, &other);
    Entry::new(name, &inputs[..n])?.run_out(out, |ctx, x| {
        fwd::binary_out(ctx, x[0], second(x, &other), op, out)
    })
}

macro_rules! binary_methods {
    ($($name:ident, $name_:ident, $op:expr, $doc:literal;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("`", $doc, "` element-wise with broadcasting and type promotion; `other` is a tensor or a number.")]
                #[track_caller]
                pub fn $name<'a>(&self, other: impl Into<Other<'a>>) -> Result<Tensor> {
                    binary(self, other.into(), stringify!($name), $op)
                }

                #[doc = concat!("In-place `", $doc, "`: writes into `self`, whose shape and dtype must hold the result.")]
                #[track_caller]
                pub fn $name_<'a>(&self, other: impl Into<Other<'a>>) -> Result<Tensor> {
                    binary_(self, other.into(), stringify!($name_), $op)
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
        binary(self, other.into(), "add", BinaryOp::Add(alpha.into()))
    }

    /// In place: `self += alpha * other`.
    #[track_caller]
    pub fn add_scaled_<'a>(
        &self,
        other: impl Into<Other<'a>>,
        alpha: impl Into<Scalar>,
    ) -> Result<Tensor> {
        binary_(self, other.into(), "add_", BinaryOp::Add(alpha.into()))
    }

    /// `self - alpha * other`.
    #[track_caller]
    pub fn sub_scaled<'a>(
        &self,
        other: impl Into<Other<'a>>,
        alpha: impl Into<Scalar>,
    ) -> Result<Tensor> {
        binary(self, other.into(), "sub", BinaryOp::Sub(alpha.into()))
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
        binary_out(
            self,
            other.into(),
            "add_out",
            BinaryOp::Add(alpha.into()),
            out,
        )
    }

    /// `self - alpha * other` written into `out` (PyTorch's `sub(..., out=out)`).
    #[track_caller]
    pub fn sub_out<'a>(
        &self,
        other: impl Into<Other<'a>>,
        alpha: impl Into<Scalar>,
        out: &Tensor,
    ) -> Result<Tensor> {
        binary_out(
            self,
            other.into(),
            "sub_out",
            BinaryOp::Sub(alpha.into()),
            out,
        )
    }

    /// `self * other` written into `out` (PyTorch's `mul(..., out=out)`).
    #[track_caller]
    pub fn mul_out<'a>(&self, other: impl Into<Other<'a>>, out: &Tensor) -> Result<Tensor> {
        binary_out(self, other.into(), "mul_out", BinaryOp::Mul, out)
    }

    /// `self / other` (true division) written into `out` (PyTorch's `div(..., out=out)`).
    #[track_caller]
    pub fn div_out<'a>(&self, other: impl Into<Other<'a>>, out: &Tensor) -> Result<Tensor> {
        binary_out(self, other.into(), "div_out", BinaryOp::Div, out)
    }

    /// In place: `self += value` for a number (shorthand for `add_(Scalar)`).
    #[track_caller]
    pub fn add_scalar_(&self, value: impl Into<Scalar>) -> Result<Tensor> {
        binary_(
            self,
            Other::Scalar(value.into()),
            "add_",
            BinaryOp::Add(Scalar::Int(1)),
        )
    }

    /// The larger of each pair of elements (NaN if either is NaN).
    #[track_caller]
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        binary(self, Other::Tensor(other), "maximum", BinaryOp::Maximum)
    }

    /// The smaller of each pair of elements (NaN if either is NaN).
    #[track_caller]
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        binary(self, Other::Tensor(other), "minimum", BinaryOp::Minimum)
    }
}

macro_rules! comparison_methods {
    ($($name:ident, $name_out:ident, $op:expr, $doc:literal;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("`", $doc, "` element-wise, as a bool tensor.")]
                #[track_caller]
                pub fn $name<'a>(&self, other: impl Into<Other<'a>>) -> Result<Tensor> {
                    compare(self, other.into(), stringify!($name), $op)
                }

                #[doc = concat!("`", $doc, "` written into `out` (PyTorch's `", stringify!($name),
                    "(..., out=out)`): the bool result is stored in `out`'s dtype, whichever it is.")]
                #[track_caller]
                pub fn $name_out<'a>(&self, other: impl Into<Other<'a>>, out: &Tensor) -> Result<Tensor> {
                    binary_out(self, other.into(), stringify!($name_out), $op, out)
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
        binary_out(self, other.into(), "pow_out", BinaryOp::Pow, out)
    }

    /// [`Tensor::maximum`] written into `out`, whose dtype must hold the promoted result.
    #[track_caller]
    pub fn maximum_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        binary_out(
            self,
            Other::Tensor(other),
            "maximum_out",
            BinaryOp::Maximum,
            out,
        )
    }

    /// [`Tensor::minimum`] written into `out`, whose dtype must hold the promoted result.
    #[track_caller]
    pub fn minimum_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        binary_out(
            self,
            Other::Tensor(other),
            "minimum_out",
            BinaryOp::Minimum,
            out,
        )
    }
}
