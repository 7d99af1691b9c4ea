//! `roll`: elements shifted along dimensions, those pushed off one end coming back at the
//! other, as `torch.roll`. The forward joins two slices of each rolled dimension (as
//! PyTorch's CPU kernel does); the backward in [`crate::autograd::formulas::roll`] rolls the
//! gradient back and saves nothing.

use super::entry::Entry;
use crate::autograd::formulas::roll as grad;
use crate::error::Error;
use crate::layout::wrap_dim;
use crate::{Result, Tensor};

/// `x` rolled by `shift` along `dim`, contiguous: the last `shift` elements (modulo the
/// size) first, then the rest.
#[track_caller]
fn roll_one(x: &Tensor, shift: i64, dim: i64) -> Result<Tensor> {
    if x.numel() == 0 {
        return x.deep_clone();
    }
    let d = wrap_dim(dim, x.dim()).ok_or_else(|| {
        Error::argument(
            "roll",
            format!(
                "dimension {dim} is out of range for a tensor of {} dimensions",
                x.dim()
            ),
            Some("dims count from 0, or from -1 for the last"),
        )
    })?;
    let size = x.shape()[d] as i64;
    // (size - shift) mod size, without overflow for any shift.
    let start = (-(shift % size)).rem_euclid(size);
    let tail = x.narrow(d, start, (size - start) as usize)?;
    let head = x.narrow(d, 0i64, start as usize)?;
    Tensor::cat(&[&tail, &head], d as i64)
}

/// The forward: `shifts` and `dims` checked as PyTorch checks them, then one dimension at a
/// time (with no dims, the flattened tensor rolls and takes its shape back).
#[track_caller]
fn rolled(x: &Tensor, shifts: &[i64], dims: &[i64]) -> Result<Tensor> {
    if shifts.is_empty() {
        return Err(Error::argument(
            "roll",
            "`shifts` required",
            Some("pass one shift per rolled dimension"),
        ));
    }
    if dims.is_empty() && shifts.len() == 1 {
        return roll_one(&x.flatten(0i64, -1i64)?, shifts[0], 0)?.view(&x.shape());
    }
    if shifts.len() != dims.len() {
        return Err(Error::argument(
            "roll",
            format!(
                "shifts and dimensions must align. shifts: {}, dims:{}",
                shifts.len(),
                dims.len()
            ),
            Some("give one dimension per shift, or a single shift and no dims to roll the flattened tensor"),
        ));
    }
    let mut out = roll_one(x, shifts[0], dims[0])?;
    for (&shift, &dim) in shifts.iter().zip(dims).skip(1) {
        out = roll_one(&out, shift, dim)?;
    }
    Ok(out)
}

impl Tensor {
    /// `self` rolled by `shifts[i]` along `dims[i]`, as `torch.roll`: elements pushed past
    /// the end come back at the start (negative shifts roll the other way). With `dims`
    /// empty and one shift, the flattened tensor rolls and keeps `self`'s shape. The result
    /// is contiguous.
    ///
    /// ```
    /// use strata_core::Tensor;
    /// let x = Tensor::from_vec(vec![0i64, 1, 2, 3, 4, 5], &[2, 3])?;
    /// assert_eq!(x.roll(&[1], &[1])?.to_vec::<i64>()?, vec![2, 0, 1, 5, 3, 4]);
    /// assert_eq!(x.roll(&[2], &[])?.to_vec::<i64>()?, vec![4, 5, 0, 1, 2, 3]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn roll(&self, shifts: &[i64], dims: &[i64]) -> Result<Tensor> {
        Entry::new("roll", &[self])?.run(
            |_, x| rolled(x[0], shifts, dims),
            |ctx, x, out| grad::roll(ctx, shifts, dims, x[0], out),
        )
    }
}
