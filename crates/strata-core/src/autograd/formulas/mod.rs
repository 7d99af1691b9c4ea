//! The backward formula of every differentiable op, and the calls ops make to record
//! themselves. Formulas compute with ordinary ops (the engine runs them with recording off);
//! the engine sums a gradient down to its input's shape and converts it to its dtype, so a
//! formula may return a broadcast-shaped gradient.

pub(crate) mod binary;
pub(crate) mod copy;
pub(crate) mod index;
pub(crate) mod joining;
pub(crate) mod matmul;
pub(crate) mod reduce;
pub(crate) mod roll;
pub(crate) mod softmax;
pub(crate) mod ternary;
pub(crate) mod triangular;
pub(crate) mod unary;

use super::record::Recorder;
use crate::layout::int_arg::IntArg;
use crate::layout::wrap_dim;
use crate::op::OpContext;
use crate::{Result, Tensor};

/// The gradients of a node's inputs.
pub(crate) type Grads = Result<Vec<Option<Tensor>>>;

/// Records `out` as made from `inputs` by the op `name` when any of them requires grad:
/// `build` saves what the backward needs and returns it.
pub(crate) fn record<F>(
    ctx: &OpContext,
    name: &'static str,
    inputs: &[&Tensor],
    out: &Tensor,
    build: impl FnOnce(&mut Recorder) -> Result<F>,
) -> Result<()>
where
    F: FnMut(Tensor) -> Grads + Send + 'static,
{
    let Some(rec) = Recorder::begin(ctx, name, inputs) else {
        return Ok(());
    };
    rec.finish_with(out, build)
}

/// The dimensions a reduction over `dims` covers (none given, or an empty list: all).
pub(crate) fn reduced_dims<D: IntArg>(dims: Option<&[D]>, ndim: usize) -> Vec<usize> {
    if ndim == 0 {
        // A 0-d tensor accepts dim 0 or -1 but has no dimension to reduce.
        return Vec::new();
    }
    let mut v: Vec<usize> = match dims {
        Some(d) if !d.is_empty() => d
            .iter()
            .filter_map(|x| wrap_dim(x.signed(), ndim))
            .collect(),
        _ => (0..ndim).collect(),
    };
    v.sort_unstable();
    v.dedup();
    v
}

/// A reduction's output gradient seen with the reduced dimensions kept (size 1).
pub(crate) fn keep_dims(g: &Tensor, dims: &[usize], keepdim: bool) -> Result<Tensor> {
    if keepdim {
        return Ok(g.clone());
    }
    let mut out = g.clone();
    for &d in dims {
        out = out.unsqueeze(d as i64)?;
    }
    Ok(out)
}

/// A reduction's output gradient broadcast back over its input's shape.
pub(crate) fn expand_back(
    g: &Tensor,
    shape: &[usize],
    dims: &[usize],
    keepdim: bool,
) -> Result<Tensor> {
    let kept = keep_dims(g, dims, keepdim)?;
    kept.expand_to(shape)
}

/// `x > 0` minus `x < 0`, in `x`'s dtype.
pub(crate) fn sign(x: &Tensor) -> Result<Tensor> {
    let dt = x.dtype();
    x.gt(0i64)?.to(dt)?.sub(&x.lt(0i64)?.to(dt)?)
}

/// A 0-d zero of `like`'s dtype on its device.
pub(crate) fn zero(like: &Tensor) -> Result<Tensor> {
    Tensor::on(like.device()).scalar(0i64, like.dtype())
}

/// Unwraps a saved tensor slot that the formula saved because it needed it.
pub(crate) fn take(saved: &Option<super::saved::SavedTensor>) -> Result<Tensor> {
    match saved {
        Some(s) => s.get(),
        None => Err(crate::Error::Autograd {
            message: "a backward formula needed a tensor that was not saved".into(),
        }),
    }
}
