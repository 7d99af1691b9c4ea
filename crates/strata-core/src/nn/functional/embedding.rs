//! `embedding`: rows of a weight matrix picked by index.

use super::check::ndim_in;
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::op::OpContext;
use crate::tensor::index_elements;
use crate::{DType, Error, Result, Tensor};

/// The rows `weight[index]` for a weight of shape `[num_embeddings, dim]` and an integer
/// (i64 or i32) `index` of any shape; the result has shape `index.shape() + [dim]`
/// (PyTorch's `F.embedding`). The gradient of `weight` adds each output row's gradient into
/// the row it came from (repeated indices accumulate); only the index is saved.
///
/// ```
/// use strata_core::nn::functional::embedding;
/// use strata_core::Tensor;
/// let w = Tensor::from_vec(vec![0.0f32, 0.5, 1.0, 1.5, 2.0, 2.5], &[3, 2])?;
/// let idx = Tensor::from_vec(vec![2i64, 0, 2], &[3])?;
/// let e = embedding(&idx, &w)?;
/// assert_eq!(e.to_vec::<f32>()?, vec![2.0, 2.5, 0.0, 0.5, 2.0, 2.5]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn embedding(index: &Tensor, weight: &Tensor) -> Result<Tensor> {
    Entry::new("embedding", &[index, weight])?.run_composite(|ctx, t| forward(ctx, t[0], t[1]))
}

/// [`embedding`] with PyTorch's `padding_idx`: the row `padding_idx` (negative counts from
/// the end) is looked up like any other but gets no gradient. One node that saves only the
/// index.
///
/// ```
/// use strata_core::nn::functional::embedding_with;
/// use strata_core::Tensor;
/// let w = Tensor::from_vec(vec![0.0f32, 0.5, 1.0, 1.5], &[2, 2])?.requires_grad_(true)?;
/// let idx = Tensor::from_vec(vec![0i64, 1, 1], &[3])?;
/// embedding_with(&idx, &w, Some(-1))?.sum(None, false)?.backward()?;
/// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![1.0, 1.0, 0.0, 0.0]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn embedding_with(index: &Tensor, weight: &Tensor, padding_idx: Option<i64>) -> Result<Tensor> {
    let Some(padding_idx) = padding_idx else {
        return embedding(index, weight);
    };
    Entry::new("embedding", &[index, weight])?.run(
        |ctx, t| {
            let rows = t[1]
                .dim()
                .checked_sub(1)
                .map(|_| t[1].shape()[0])
                .unwrap_or(0) as i64;
            if padding_idx < -rows || padding_idx >= rows {
                return Err(Error::argument(
                    ctx.op(),
                    format!("padding_idx {padding_idx} must be within the weight's {rows} rows"),
                    Some("use an index in -num_embeddings..num_embeddings"),
                ));
            }
            let _off = crate::mode::GradModeGuard::no_grad();
            forward(ctx, t[0], t[1])
        },
        |ctx, t, out| {
            let rows = t[1].shape()[0] as i64;
            let pad = if padding_idx < 0 {
                padding_idx + rows
            } else {
                padding_idx
            };
            backward(ctx, t[0], t[1], out, pad)
        },
    )
}

/// Records `out = embedding(index, weight)` whose row `pad` gets no gradient.
fn backward(
    ctx: &OpContext,
    index: &Tensor,
    weight: &Tensor,
    out: &Tensor,
    pad: i64,
) -> Result<()> {
    let (rows, dim) = (weight.shape()[0], weight.shape()[1]);
    record(ctx, "EmbeddingBackward0", &[weight], out, |rec| {
        let saved = rec.save(index)?;
        Ok(move |g: Tensor| -> Grads {
            let idx = saved.get()?.reshape(&[-1, 1])?.to(DType::I64)?;
            let g = g.reshape(&[-1, dim as i64])?;
            let idx = idx.expand_to(&g.shape())?;
            let gw = Tensor::on(g.device())
                .zeros(&[rows, dim], g.dtype())?
                .scatter_add(0, &idx, &g)?;
            gw.select(0, pad)?.zero_()?;
            Ok(vec![Some(gw)])
        })
    })
}

/// `weight[index]`, checked, recorded by its parts.
fn forward(ctx: &OpContext, index: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let op = ctx.op();
    ndim_in(op, "the weight", weight, &[2])?;
    if !matches!(index.dtype(), DType::I64 | DType::I32) {
        return Err(Error::dtype(
            op,
            format!("the index must be i64 or i32, got {}", index.dtype()),
            Some("convert it with .to(DType::I64)"),
        ));
    }
    let rows = weight.shape()[0];
    if let Some((pos, &bad)) = index_elements(op, index)?
        .iter()
        .enumerate()
        .find(|(_, &i)| i < 0 || i as u64 >= rows as u64)
    {
        return Err(Error::argument(
            op,
            format!(
                "the index holds {bad} (at flat position {pos}), but the weight has {rows} \
                 rows (valid: 0..={})",
                rows as i64 - 1
            ),
            Some("indices count from 0 and must be below num_embeddings"),
        ));
    }
    let mut shape = index.shape().to_vec();
    shape.push(weight.shape()[1]);
    weight
        .index_select(0, &index.reshape(&[-1])?)?
        .view_to(&shape)
}
