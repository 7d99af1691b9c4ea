//! Validation shared by the class-index losses (`cross_entropy`, `nll_loss`).

use super::check::{floating, shape};
use crate::tensor::index_elements;
use crate::{DType, Error, Result, Tensor};

/// The checked shapes of an input `[N, C, d1, ..]` (or `[C]`, one sample) and its target
/// `[N, d1, ..]` (or `[]`).
#[derive(Clone)]
pub(super) struct ClassShapes {
    /// Number of classes.
    pub classes: usize,
    /// The input was `[C]`: seen as `[1, C]`, the target as `[1]`.
    pub unbatched: bool,
    /// The target's shape as given.
    pub target_shape: Vec<usize>,
    /// The input's shape as given.
    pub input_shape: Vec<usize>,
    /// The target value that marks an element to ignore.
    pub ignore_index: i64,
    /// How many target elements hold `ignore_index`.
    pub ignored: usize,
}

impl ClassShapes {
    /// `input` seen as `[N, C, ..]`.
    pub fn batched_input(&self, input: &Tensor) -> Result<Tensor> {
        if self.unbatched {
            input.unsqueeze(0)
        } else {
            Ok(input.clone())
        }
    }

    /// `target` seen as `[N, 1, d1, ..]`: the index tensor for gathering along the class
    /// dimension.
    pub fn class_index(&self, target: &Tensor) -> Result<Tensor> {
        if self.unbatched {
            target.reshape(&[1, 1])
        } else {
            target.unsqueeze(1)
        }
    }

    /// Number of target elements that are not ignored (the divisor of the mean).
    pub fn count(&self) -> usize {
        self.target_shape.iter().product::<usize>() - self.ignored
    }

    /// `target` with its ignored elements replaced by class 0 (safe to gather with), and
    /// the mask of those elements. Both are made whether or not any element is ignored, so
    /// the loss allocates the same whatever the labels hold (and the meta device, which
    /// has no labels, predicts it exactly).
    pub fn safe_target(&self, target: &Tensor) -> Result<(Tensor, Tensor)> {
        let mask = target.eq(self.ignore_index)?;
        Ok((target.masked_fill(&mask, 0i64)?, mask))
    }
}

/// Checks `input` against the class-index `target` (dtypes, shapes, every index in `0..C`
/// or equal to `ignore_index`), reading nothing but the target's values and allocating no
/// tensor.
pub(super) fn check(
    op: &'static str,
    input: &Tensor,
    target: &Tensor,
    ignore_index: i64,
) -> Result<ClassShapes> {
    floating(op, "the input", input)?;
    if target.dtype() != DType::I64 {
        return Err(Error::dtype(
            op,
            format!(
                "the target must hold class indices as i64, got {}",
                target.dtype()
            ),
            Some("convert it with .to(DType::I64); class probabilities are not supported"),
        ));
    }
    let (is, ts) = (input.shape().to_vec(), target.shape().to_vec());
    if is.is_empty() {
        return Err(shape(
            op,
            "the input must be [C] or [N, C, ..], got a 0-d tensor".into(),
            vec![is, ts],
            "give the scores of each class along dimension 1",
        ));
    }
    let unbatched = is.len() == 1;
    let (classes, want): (usize, Vec<usize>) = if unbatched {
        (is[0], vec![])
    } else {
        let mut w = vec![is[0]];
        w.extend_from_slice(&is[2..]);
        (is[1], w)
    };
    if ts != want {
        return Err(shape(
            op,
            format!("an input of shape {is:?} needs a target of shape {want:?}, got {ts:?}"),
            vec![is, ts],
            "the target holds one class index per sample: the input's shape without the \
             class dimension (dimension 1)",
        ));
    }
    let values = index_elements(op, target)?;
    if let Some((pos, &bad)) = values
        .iter()
        .enumerate()
        .find(|(_, &v)| v != ignore_index && (v < 0 || v as u64 >= classes as u64))
    {
        return Err(Error::argument(
            op,
            format!(
                "the target holds class index {bad} (at flat position {pos}), but the input \
                 has {classes} classes (valid: 0..={})",
                classes as i64 - 1
            ),
            Some(
                "class indices count from 0 (the ignored index excepted); check the labels \
                 against the number of classes",
            ),
        ));
    }
    let ignored = values.iter().filter(|&&v| v == ignore_index).count();
    Ok(ClassShapes {
        classes,
        unbatched,
        target_shape: ts,
        input_shape: is,
        ignore_index,
        ignored,
    })
}

crate::autograd::selective::kept_as_copies!(ClassShapes);
