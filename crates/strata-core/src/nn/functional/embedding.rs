//! `embedding`: rows of a weight matrix picked by index.

use super::check::{ndim_in, to_i64};
use crate::api::entry::Entry;
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
    let mut shape = to_i64(&index.shape());
    shape.push(weight.shape()[1] as i64);
    weight.index_select(0, &index.reshape(&[-1])?)?.view(&shape)
}
