//! `adaptive_avg_pool2d`: averages over windows chosen to cover the input in a given number
//! of steps.

mod half;

use super::super::check::{floating, ndim_in};
use super::super::Pair;
use crate::api::entry::Entry;
use crate::{DType, Error, Result, Tensor};

/// PyTorch's `F.adaptive_avg_pool2d`: `x` (`[N, C, H, W]` or `[C, H, W]`) averaged to
/// `output` (`[.., OH, OW]`); output `i` of `o` along an axis of size `n` averages the inputs
/// `floor(i·n/o) ..= ceil((i+1)·n/o) - 1`. An output of 1×1 is a mean over the plane; an
/// output that divides the input is a fixed-window average; otherwise each output row and
/// column is averaged separately. Recorded through its parts.
///
/// ```
/// use strata_core::nn::functional::adaptive_avg_pool2d;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::arange(6, DType::F32)?.view(&[1, 1, 2, 3])?;
/// assert_eq!(adaptive_avg_pool2d(&x, 1)?.to_vec::<f32>()?, vec![2.5]);
/// assert_eq!(adaptive_avg_pool2d(&x, (1, 2))?.to_vec::<f32>()?, vec![2.0, 3.0]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn adaptive_avg_pool2d(x: &Tensor, output: impl Into<Pair>) -> Result<Tensor> {
    let output = output.into();
    Entry::new("adaptive_avg_pool2d", &[x])?.run_composite(|ctx, t| {
        let x = t[0];
        let op = ctx.op();
        floating(op, "the input", x)?;
        ndim_in(op, "the input", x, &[3, 4])?;
        if output.0 == 0 || output.1 == 0 {
            return Err(Error::argument(
                op,
                format!("the output size {output:?} must be positive"),
                Some("a global average pool is output size 1"),
            ));
        }
        let nd = x.dim() as i64;
        if matches!(x.dtype(), DType::F16 | DType::BF16) {
            return half::adaptive_avg_pool2d_half(x, output);
        }
        let rows = average_axis(x, nd - 2, output.0)?;
        average_axis(&rows, nd - 1, output.1)?.contiguous()
    })
}

/// The first input and the size of each of the `out` windows along an axis of size `n`.
fn spans(n: usize, out: usize) -> Vec<(usize, usize)> {
    (0..out)
        .map(|i| {
            let (start, end) = (i * n / out, ((i + 1) * n).div_ceil(out));
            (start, end - start)
        })
        .collect()
}

/// `x` averaged along `dim` into `out` steps.
fn average_axis(x: &Tensor, dim: i64, out: usize) -> Result<Tensor> {
    let n = x.shape()[dim as usize];
    if n == out {
        return Ok(x.clone());
    }
    if n.is_multiple_of(out) {
        let k = n / out;
        let last = x.dim() as i64;
        return x.unfold(dim, k, k)?.mean(Some(&[last]), false);
    }
    let parts = (0..out)
        .map(|i| {
            let (start, end) = (i * n / out, ((i + 1) * n).div_ceil(out));
            x.narrow(dim, start as i64, end - start)?
                .mean(Some(&[dim]), true)
        })
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&parts.iter().collect::<Vec<_>>(), dim)
}
