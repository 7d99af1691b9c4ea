//! `avg_pool2d`: window sums divided by the window's size, padding counted.

mod half;

use super::super::check::floating;
use super::{check, padded, windows_of, Pool2dOptions, Windows};
use crate::api::entry::Entry;
use crate::{DType, Result, Scalar, Tensor};

/// PyTorch's `F.avg_pool2d` (`count_include_pad=True`): the mean of each window of `x`
/// (`[N, C, H, W]` or `[C, H, W]`), padded positions counted as zeros in the divisor. With
/// `ceil_mode` a last window that reaches past the padding divides by the part of it inside
/// the padded input. Recorded through its parts (window views, a sum, a division), which
/// save nothing of the input's size.
///
/// ```
/// use strata_core::nn::functional::{avg_pool2d, Pair, Pool2dOptions};
/// use strata_core::{DType, Tensor};
/// let x = Tensor::ones(&[1, 1, 2, 2], DType::F32)?;
/// let opts = Pool2dOptions { padding: Pair(1, 1), ..Pool2dOptions::new(2) };
/// assert_eq!(avg_pool2d(&x, opts)?.to_vec::<f32>()?, vec![0.25; 4]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn avg_pool2d(x: &Tensor, opts: Pool2dOptions) -> Result<Tensor> {
    Entry::new("avg_pool2d", &[x])?.run_composite(|ctx, t| {
        let x = t[0];
        floating(ctx.op(), "the input", x)?;
        let win = check(ctx.op(), x, &opts)?;
        let unbatched = x.dim() == 3;
        let xb = if unbatched {
            x.unsqueeze(0)?
        } else {
            x.clone()
        };
        if matches!(x.dtype(), DType::F16 | DType::BF16) {
            return half::avg_pool2d_half(&xb, &win, unbatched);
        }
        let sums =
            windows_of(&padded(&xb, &win, Scalar::from(0.0))?, &win)?.sum(Some(&[4]), false)?;
        let y = match divisors(&win) {
            Divisor::Same(d) => sums.div(d as f64)?,
            Divisor::Each(d) => {
                let d = Tensor::on(x.device()).from_vec(d, &[win.oh, win.ow])?;
                sums.div(&d.to(x.dtype())?)?
            }
        };
        if unbatched {
            y.squeeze(Some(&[0]))
        } else {
            Ok(y)
        }
    })
}

/// The divisor of every output: one number, or one per output position.
enum Divisor {
    Same(usize),
    Each(Vec<f32>),
}

/// Each window's size clipped to the padded input (PyTorch's `count_include_pad` divisor).
fn divisors(win: &Windows) -> Divisor {
    let along = |out: usize, size: usize, k: usize, s: usize, p: usize| -> Vec<usize> {
        (0..out)
            .map(|o| (o * s + k).min(size + 2 * p) - o * s)
            .collect()
    };
    let rows = along(win.oh, win.h, win.kernel.0, win.stride.0, win.padding.0);
    let cols = along(win.ow, win.w, win.kernel.1, win.stride.1, win.padding.1);
    let full = win.kernel.0 * win.kernel.1;
    if rows.iter().all(|&r| r == win.kernel.0) && cols.iter().all(|&c| c == win.kernel.1) {
        return Divisor::Same(full);
    }
    Divisor::Each(
        rows.iter()
            .flat_map(|&r| cols.iter().map(move |&c| (r * c) as f32))
            .collect(),
    )
}
