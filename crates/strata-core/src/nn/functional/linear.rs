//! `linear`: `x @ w.T + b`.

use super::check::{dtype_is, floating, ndim_in, shape};
use crate::api::entry::Entry;
use crate::op::OpContext;
use crate::{Result, Tensor};

/// `x @ w.T + b` for `x` of shape `[.., in]`, `w` of shape `[out, in]` and an optional bias
/// of shape `[out]` (PyTorch's `F.linear`). Differentiable in all three through the
/// product, which saves only views of its operands. As in PyTorch, the bias is added inside
/// the product (`addmm`, rounded once in bf16 and f16) when the input is 2-d or contiguous,
/// and after it otherwise.
///
/// ```
/// use strata_core::nn::functional::linear;
/// use strata_core::Tensor;
/// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2])?;
/// let w = Tensor::from_vec(vec![1.0f32, 0.0, 1.0, 1.0, 0.0, -1.0], &[3, 2])?;
/// let b = Tensor::from_vec(vec![0.5f32, 0.0, 1.0], &[3])?;
/// let y = linear(&x, &w, Some(&b))?;
/// assert_eq!(y.to_vec::<f32>()?, vec![1.5, 3.0, -1.0]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let mut inputs = vec![x, w];
    inputs.extend(b);
    Entry::new("linear", &inputs)?
        .run_composite(|ctx, t| forward(ctx, t[0], t[1], t.get(2).copied()))
}

/// `x @ w.T + b`, checked, recorded by its parts.
fn forward(ctx: &OpContext, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let op = ctx.op();
    if x.dtype() == crate::DType::Bool {
        // Integer inputs are accepted, as in PyTorch; bool is not.
        floating(op, "the input", x)?;
    }
    dtype_is(op, "the weight", w, x.dtype())?;
    ndim_in(op, "the weight", w, &[2])?;
    if x.dim() == 0 {
        return Err(shape(
            op,
            "the input must have at least one dimension, got a 0-d tensor".into(),
            vec![x.shape().to_vec()],
            "give the input the shape [.., in_features]",
        ));
    }
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    if xs[xs.len() - 1] != ws[1] {
        return Err(shape(
            op,
            format!(
                "the input's last dimension ({}) must equal the weight's in_features ({}): \
                 input {xs:?}, weight {ws:?}",
                xs[xs.len() - 1],
                ws[1]
            ),
            vec![xs, ws],
            "the weight has shape [out_features, in_features]",
        ));
    }
    if let Some(b) = b {
        dtype_is(op, "the bias", b, x.dtype())?;
        if b.shape().as_slice() != [ws[0]] && b.numel() != 1 {
            return Err(shape(
                op,
                format!(
                    "the bias must have shape [{}] (out_features), got {:?}",
                    ws[0],
                    b.shape()
                ),
                vec![b.shape().to_vec(), ws],
                "give the bias one value per output feature",
            ));
        }
    }
    match b {
        // PyTorch adds the bias inside the product (one rounding in bf16 and f16) for a 2-d
        // input, and for a contiguous input of any rank through a 2-d view of it.
        Some(b) if b.dim() <= 1 && (x.dim() == 2 || x.is_contiguous()) => {
            let rows = x.reshape(&[-1, xs[xs.len() - 1] as i64])?;
            let y = b.addmm(&rows, &w.t()?, 1i64, 1i64)?;
            if x.dim() == 2 {
                return Ok(y);
            }
            let mut out = xs[..xs.len() - 1].to_vec();
            out.push(ws[0]);
            y.reshape_to(&out)
        }
        Some(b) => x.matmul(&w.t()?)?.add(b),
        None => x.matmul(&w.t()?),
    }
}
