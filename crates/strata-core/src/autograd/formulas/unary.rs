//! Backward of the unary element-wise ops: the floating functions, activations, `neg`,
//! `abs`, `relu` and `clamp`.

use super::{record, sign, zero, Grads};
use crate::autograd::record::InplaceRecorder;
use crate::op::OpContext;
use crate::ops::binary::{binary, BinaryOp, Other};
use crate::ops::unary::{FloatOp, SameOp};
use crate::{DType, Result, Tensor};

fn float_name(f: FloatOp) -> &'static str {
    match f {
        FloatOp::Exp => "ExpBackward0",
        FloatOp::Log => "LogBackward0",
        FloatOp::Sqrt => "SqrtBackward0",
        FloatOp::Rsqrt => "RsqrtBackward0",
        FloatOp::Sin => "SinBackward0",
        FloatOp::Cos => "CosBackward0",
        FloatOp::Tanh => "TanhBackward0",
        FloatOp::Sigmoid => "SigmoidBackward0",
        FloatOp::Gelu => "GeluBackward0",
        FloatOp::Silu => "SiluBackward0",
        FloatOp::GeluDerivative | FloatOp::GeluTanhDerivative => "GeluBackwardBackward0",
        FloatOp::GeluTanh => "GeluBackward0",
    }
}

/// Whether `f`'s gradient is computed from its output (else from its input).
fn uses_output(f: FloatOp) -> bool {
    matches!(
        f,
        FloatOp::Exp | FloatOp::Sqrt | FloatOp::Rsqrt | FloatOp::Tanh | FloatOp::Sigmoid
    )
}

/// `tanh` and `sigmoid`'s gradients from their output `y` in bf16 and f16, as PyTorch's
/// CPU `tanh_backward` and `sigmoid_backward` kernels compute them: in f32, rounded once,
/// except f16's sigmoid, which rounds after each step of `g·(1 - y)·y`.
fn half_slope_grad(f: FloatOp, g: &Tensor, y: &Tensor) -> Result<Tensor> {
    if f == FloatOp::Sigmoid && g.dtype() == DType::F16 {
        return g.mul(&y.neg()?.add(1i64)?)?.mul(y);
    }
    let (g32, y32) = (g.to(DType::F32)?, y.to(DType::F32)?);
    let d = match f {
        FloatOp::Tanh => g32.mul(&y32.mul(&y32)?.neg()?.add(1i64)?)?,
        _ => g32.mul(&y32.neg()?.add(1i64)?)?.mul(&y32)?,
    };
    d.to(g.dtype())
}

fn float_grad(f: FloatOp, g: &Tensor, v: &Tensor) -> Result<Tensor> {
    let half = |t: &Tensor| matches!(t.dtype(), DType::BF16 | DType::F16);
    if matches!(f, FloatOp::Tanh | FloatOp::Sigmoid) && half(g) && half(v) {
        return half_slope_grad(f, g, v);
    }
    if matches!(f, FloatOp::Gelu | FloatOp::GeluTanh | FloatOp::Silu) && half(g) && half(v) {
        // PyTorch's `gelu_backward` and `silu_backward` kernels compute bf16 and f16 in f32
        // and round once.
        let wide = float_grad(f, &g.to(DType::F32)?, &v.to(DType::F32)?)?;
        return wide.to(g.dtype());
    }
    match f {
        FloatOp::Exp => g.mul(v),
        FloatOp::Log => g.div(v),
        FloatOp::Sqrt => g.div(&v.mul(2i64)?),
        FloatOp::Rsqrt => g.mul(&v.mul(v)?.mul(v)?)?.mul(-0.5),
        FloatOp::Sin => g.mul(&v.cos()?),
        FloatOp::Cos => g.mul(&v.sin()?)?.neg(),
        FloatOp::Tanh => g.mul(&v.mul(v)?.neg()?.add(1i64)?),
        FloatOp::Sigmoid => g.mul(&v.mul(&v.neg()?.add(1i64)?)?),
        FloatOp::Gelu => slope_times(g, v.gelu_derivative()?),
        FloatOp::Silu => {
            let s = v.sigmoid()?;
            g.mul(&s.mul(&v.mul(&s.neg()?.add(1i64)?)?.add(1i64)?)?)
        }
        FloatOp::GeluTanh => slope_times(g, v.gelu_tanh_derivative()?),
        FloatOp::GeluDerivative | FloatOp::GeluTanhDerivative => Err(crate::Error::Autograd {
            message: "the gradient of gelu's derivative is not implemented".into(),
        }),
    }
}

/// `g · slope` for a fresh `slope` of `g`'s shape: multiplied into `slope` in place, so the
/// gradient takes one tensor's memory as PyTorch's fused `gelu_backward` does, unless the
/// backward is itself recorded (`create_graph`), which needs the product as a new node.
fn slope_times(g: &Tensor, slope: Tensor) -> Result<Tensor> {
    if crate::mode::is_grad_enabled() || slope.shape() != g.shape() || slope.dtype() != g.dtype() {
        return g.mul(&slope);
    }
    slope.mul_(g)
}

/// Records `out = f(x)`.
pub(crate) fn float_unary(ctx: &OpContext, f: FloatOp, x: &Tensor, out: &Tensor) -> Result<()> {
    record(ctx, float_name(f), &[x], out, |rec| {
        let saved = rec.save(if uses_output(f) { out } else { x })?;
        Ok(move |g: Tensor| -> Grads { Ok(vec![Some(float_grad(f, &g, &saved.get()?)?)]) })
    })
}

/// Prepares the in-place `x = f(x)` (before the write).
pub(crate) fn float_unary_inplace_begin(
    ctx: &OpContext,
    f: FloatOp,
    x: &Tensor,
) -> Result<Option<(InplaceRecorder, Option<crate::autograd::saved::SavedTensor>)>> {
    let Some(mut rec) = InplaceRecorder::begin(ctx, float_name(f), x, &[])? else {
        return Ok(None);
    };
    let before = if uses_output(f) {
        None
    } else {
        let copy = crate::mode::no_grad(|| x.deep_clone())?;
        Some(rec.save(&copy)?)
    };
    Ok(Some((rec, before)))
}

/// Records the in-place `x = f(x)` that just happened.
pub(crate) fn float_unary_inplace_finish(
    f: FloatOp,
    x: &Tensor,
    (mut rec, before): (InplaceRecorder, Option<crate::autograd::saved::SavedTensor>),
) -> Result<()> {
    let saved = match before {
        Some(b) => b,
        None => rec.save(x)?,
    };
    rec.finish(move |g: Tensor| -> Grads { Ok(vec![Some(float_grad(f, &g, &saved.get()?)?)]) });
    Ok(())
}

fn same_name(s: SameOp) -> &'static str {
    match s {
        SameOp::Neg => "NegBackward0",
        SameOp::Abs => "AbsBackward0",
        SameOp::Relu => "ReluBackward0",
        SameOp::Clamp(..) => "ClampBackward1",
        SameOp::ZeroInfinities => "ZeroInfinitiesBackward0",
    }
}

fn same_grad(s: SameOp, g: &Tensor, v: &Tensor) -> Result<Tensor> {
    match s {
        SameOp::Neg => g.neg(),
        SameOp::Abs => g.mul(&sign(v)?),
        // The derivative is 1 wherever it is defined (at finite x). No public op records
        // this map: reductions use it on their own accumulators.
        SameOp::ZeroInfinities => Ok(g.clone()),
        // Selected, not multiplied by a mask: an infinite or NaN gradient where the output
        // is clamped must still give 0 there. As PyTorch's threshold backward, the gradient
        // is zeroed where the output is <= 0, so a NaN output passes its gradient.
        SameOp::Relu => {
            let ctx = OpContext::enter("threshold_backward");
            binary(&ctx, g, Other::Tensor(v), BinaryOp::ReluGrad)
        }
        SameOp::Clamp(lo, hi) => {
            // The gradient passes where the input lies strictly within the bounds, as in
            // PyTorch (an input equal to a bound, or NaN, gets 0).
            let mut keep = v.eq(v)?;
            if let Some(lo) = lo {
                keep = keep.mul(&v.gt(lo)?)?;
            }
            if let Some(hi) = hi {
                keep = keep.mul(&v.lt(hi)?)?;
            }
            Tensor::where_cond(&keep, g, &zero(g)?)
        }
    }
}

/// Records `out = s(x)`.
pub(crate) fn same_unary(ctx: &OpContext, s: SameOp, x: &Tensor, out: &Tensor) -> Result<()> {
    if !x.dtype().is_floating() {
        return Ok(());
    }
    record(ctx, same_name(s), &[x], out, |rec| {
        let saved = match s {
            SameOp::Neg => None,
            SameOp::Relu => Some(rec.save(out)?),
            _ => Some(rec.save(x)?),
        };
        Ok(move |g: Tensor| -> Grads {
            let v = match &saved {
                Some(t) => t.get()?,
                None => g.clone(),
            };
            Ok(vec![Some(same_grad(s, &g, &v)?)])
        })
    })
}

/// Prepares the in-place `x = s(x)`.
pub(crate) fn same_unary_inplace_begin(
    ctx: &OpContext,
    s: SameOp,
    x: &Tensor,
) -> Result<Option<(InplaceRecorder, Option<crate::autograd::saved::SavedTensor>)>> {
    let Some(mut rec) = InplaceRecorder::begin(ctx, same_name(s), x, &[])? else {
        return Ok(None);
    };
    let before = match s {
        SameOp::Abs | SameOp::Clamp(..) => {
            let copy = crate::mode::no_grad(|| x.deep_clone())?;
            Some(rec.save(&copy)?)
        }
        _ => None,
    };
    Ok(Some((rec, before)))
}

/// Records the in-place `x = s(x)` that just happened.
pub(crate) fn same_unary_inplace_finish(
    s: SameOp,
    x: &Tensor,
    (mut rec, before): (InplaceRecorder, Option<crate::autograd::saved::SavedTensor>),
) -> Result<()> {
    let saved = match (s, before) {
        (_, Some(b)) => Some(b),
        (SameOp::Relu, None) => Some(rec.save(x)?),
        _ => None,
    };
    rec.finish(move |g: Tensor| -> Grads {
        let v = match &saved {
            Some(t) => t.get()?,
            None => g.clone(),
        };
        Ok(vec![Some(same_grad(s, &g, &v)?)])
    });
    Ok(())
}
