//! Argument checks shared by the functional ops; each error says what is wrong and how to
//! fix it.

use crate::{DType, Error, Result, Tensor};

/// `t` (called `what` in messages) must have a floating dtype.
pub(super) fn floating(op: &'static str, what: &str, t: &Tensor) -> Result<()> {
    if t.dtype().is_floating() {
        return Ok(());
    }
    Err(Error::dtype(
        op,
        format!("{what} must be a floating tensor, got {}", t.dtype()),
        Some("convert it with .to(DType::F32)"),
    ))
}

/// `t` (called `what`) must have dtype `want`, the dtype of the op's main input.
pub(super) fn dtype_is(op: &'static str, what: &str, t: &Tensor, want: DType) -> Result<()> {
    if t.dtype() == want {
        return Ok(());
    }
    Err(Error::dtype(
        op,
        format!("{what} is {} but the input is {want}", t.dtype()),
        Some("convert both to the same dtype with .to(..)"),
    ))
}

/// `t` (called `what`) must have `ndim` dimensions.
pub(super) fn ndim_in(op: &'static str, what: &str, t: &Tensor, ndims: &[usize]) -> Result<()> {
    if ndims.contains(&t.dim()) {
        return Ok(());
    }
    let want: Vec<String> = ndims.iter().map(|d| format!("{d}-d")).collect();
    Err(Error::shape(
        op,
        format!(
            "{what} must be {}, got shape {:?}",
            want.join(" or "),
            t.shape()
        ),
        vec![t.shape().to_vec()],
    ))
}

/// A shape error with a hint.
pub(super) fn shape(
    op: &'static str,
    message: String,
    shapes: Vec<Vec<usize>>,
    hint: &str,
) -> Error {
    Error::shape(op, message, shapes).with_hint(hint)
}
