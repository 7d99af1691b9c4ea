//! Unary element-wise ops: `neg`, `abs`, the floating functions, activations, `clamp`, out of
//! place, in place and into a given tensor (`_out`). Forward in [`crate::ops::unary`],
//! backward in [`crate::autograd::formulas::unary`].

use super::entry::Entry;
use crate::autograd::formulas::unary as grad;
use crate::ops::unary::{self as fwd, FloatOp, SameOp};
use crate::{Result, Scalar, Tensor};

#[track_caller]
fn float(x: &Tensor, name: &'static str, f: FloatOp) -> Result<Tensor> {
    Entry::new(name, &[x])?.run(
        |ctx, x| fwd::float(ctx, f, x[0]),
        |ctx, x, out| grad::float_unary(ctx, f, x[0], out),
    )
}

#[track_caller]
fn float_(x: &Tensor, name: &'static str, f: FloatOp) -> Result<Tensor> {
    Entry::new(name, &[x])?.run_inplace(
        |ctx, x| grad::float_unary_inplace_begin(ctx, f, x[0]),
        |ctx, x| fwd::float_(ctx, f, x[0]),
        |rec, x| grad::float_unary_inplace_finish(f, x[0], rec),
    )
}

#[track_caller]
fn float_out(x: &Tensor, name: &'static str, f: FloatOp, out: &Tensor) -> Result<Tensor> {
    Entry::new(name, &[x])?.run_out(out, |ctx, x| fwd::float_out(ctx, f, x[0], out))
}

#[track_caller]
fn same(x: &Tensor, name: &'static str, s: SameOp) -> Result<Tensor> {
    Entry::new(name, &[x])?.run(
        |ctx, x| fwd::same(ctx, s, x[0]),
        |ctx, x, out| grad::same_unary(ctx, s, x[0], out),
    )
}

#[track_caller]
fn same_(x: &Tensor, name: &'static str, s: SameOp) -> Result<Tensor> {
    Entry::new(name, &[x])?.run_inplace(
        |ctx, x| grad::same_unary_inplace_begin(ctx, s, x[0]),
        |ctx, x| fwd::same_(ctx, s, x[0]),
        |rec, x| grad::same_unary_inplace_finish(s, x[0], rec),
    )
}

#[track_caller]
fn same_out(x: &Tensor, name: &'static str, s: SameOp, out: &Tensor) -> Result<Tensor> {
    Entry::new(name, &[x])?.run_out(out, |ctx, x| fwd::same_out(ctx, s, x[0], out))
}

impl Tensor {
    /// d/dx gelu(x) = Φ(x) + x φ(x), for gelu's backward (recorded, so that a second
    /// derivative through it is refused with a clear error rather than silently zero).
    #[track_caller]
    pub(crate) fn gelu_derivative(&self) -> Result<Tensor> {
        float(self, "gelu_backward", FloatOp::GeluDerivative)
    }

    /// d/dx of gelu's tanh approximation, for its backward (recorded for the same reason).
    #[track_caller]
    pub(crate) fn gelu_tanh_derivative(&self) -> Result<Tensor> {
        float(self, "gelu_backward", FloatOp::GeluTanhDerivative)
    }
}

impl Tensor {
    /// `-self`.
    #[track_caller]
    pub fn neg(&self) -> Result<Tensor> {
        same(self, "neg", SameOp::Neg)
    }

    /// `|self|`.
    #[track_caller]
    pub fn abs(&self) -> Result<Tensor> {
        same(self, "abs", SameOp::Abs)
    }

    /// `max(self, 0)`.
    #[track_caller]
    pub fn relu(&self) -> Result<Tensor> {
        same(self, "relu", SameOp::Relu)
    }

    /// In place `max(self, 0)`.
    #[track_caller]
    pub fn relu_(&self) -> Result<Tensor> {
        same_(self, "relu_", SameOp::Relu)
    }

    /// Limits every element to `[min, max]` (either bound may be absent). Numbers promote
    /// like operands: an integer tensor clamped with a float bound becomes floating.
    #[track_caller]
    pub fn clamp(&self, min: Option<Scalar>, max: Option<Scalar>) -> Result<Tensor> {
        same(self, "clamp", SameOp::Clamp(min, max))
    }

    /// In-place [`Tensor::clamp`].
    #[track_caller]
    pub fn clamp_(&self, min: Option<Scalar>, max: Option<Scalar>) -> Result<Tensor> {
        same_(self, "clamp_", SameOp::Clamp(min, max))
    }

    /// [`Tensor::clamp`] written into `out`, which must have the result's dtype (an integer
    /// tensor clamped with a float bound gives a float result).
    #[track_caller]
    pub fn clamp_out(
        &self,
        min: Option<Scalar>,
        max: Option<Scalar>,
        out: &Tensor,
    ) -> Result<Tensor> {
        same_out(self, "clamp_out", SameOp::Clamp(min, max), out)
    }

    /// In place `e^self`.
    #[track_caller]
    pub fn exp_(&self) -> Result<Tensor> {
        float_(self, "exp_", FloatOp::Exp)
    }
}

macro_rules! out_doc {
    ($name:ident, $rule:literal) => {
        concat!(
            "[`Tensor::",
            stringify!($name),
            "`] written into `out` (the `out=` form of `",
            stringify!($name),
            "`), ",
            $rule,
            " An `out` of the result's shape is ",
            "written where it is, without allocating; one of another shape is resized. Returns ",
            "`out`, whose version goes up by one."
        )
    };
}

macro_rules! same_out_methods {
    ($($name:ident, $name_out:ident, $op:expr;)*) => {
        impl Tensor {
            $(
                #[doc = out_doc!($name, "which must have `self`'s dtype.")]
                #[track_caller]
                pub fn $name_out(&self, out: &Tensor) -> Result<Tensor> {
                    same_out(self, stringify!($name_out), $op, out)
                }
            )*
        }
    };
}

same_out_methods! {
    neg, neg_out, SameOp::Neg;
    abs, abs_out, SameOp::Abs;
    relu, relu_out, SameOp::Relu;
}

macro_rules! float_methods {
    ($($name:ident, $name_out:ident, $op:expr, $doc:literal, $rule:literal;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("`", $doc, "` element-wise; integer tensors give f32.")]
                #[track_caller]
                pub fn $name(&self) -> Result<Tensor> {
                    float(self, stringify!($name), $op)
                }

                #[doc = out_doc!($name, $rule)]
                #[track_caller]
                pub fn $name_out(&self, out: &Tensor) -> Result<Tensor> {
                    float_out(self, stringify!($name_out), $op, out)
                }
            )*
        }
    };
}

float_methods! {
    exp, exp_out, FloatOp::Exp, "e^x", "whose dtype must be floating.";
    log, log_out, FloatOp::Log, "ln(x)", "whose dtype must be floating.";
    sqrt, sqrt_out, FloatOp::Sqrt, "sqrt(x)", "whose dtype must be floating.";
    rsqrt, rsqrt_out, FloatOp::Rsqrt, "1/sqrt(x)", "whose dtype must be floating.";
    sin, sin_out, FloatOp::Sin, "sin(x)", "whose dtype must be floating.";
    cos, cos_out, FloatOp::Cos, "cos(x)", "whose dtype must be floating.";
    tanh, tanh_out, FloatOp::Tanh, "tanh(x)", "whose dtype must be floating.";
    sigmoid, sigmoid_out, FloatOp::Sigmoid, "1/(1+e^-x)", "whose dtype must be floating.";
    gelu, gelu_out, FloatOp::Gelu, "x/2 * (1 + erf(x/sqrt(2)))", "which must have `self`'s dtype.";
    silu, silu_out, FloatOp::Silu, "x * sigmoid(x)", "which must have `self`'s dtype.";
    gelu_tanh, gelu_tanh_out, FloatOp::GeluTanh, "x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))", "which must have `self`'s dtype.";
}
