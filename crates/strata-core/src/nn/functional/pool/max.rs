//! `max_pool2d`, as one node that saves the argmax positions (not a mask).

use super::super::Pair;
use super::{check, Pool2dOptions, Windows};
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::backend::kernel::PoolWindows;
use crate::op::OpContext;
use crate::{DType, Error, Result, Tensor};

/// The maximum of each `kernel` window of `x` (`[N, C, H, W]` or `[C, H, W]`), windows
/// `stride` apart (the kernel size when `None`), without padding; see [`max_pool2d_with`]
/// for padding and `ceil_mode`. The result is `[N, C, OH, OW]` with `OH = (H - kh) / sh + 1`.
///
/// ```
/// use strata_core::nn::functional::max_pool2d;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::arange(16, DType::F32)?.view(&[1, 1, 4, 4])?;
/// let y = max_pool2d(&x, 2, None)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn max_pool2d(x: &Tensor, kernel: impl Into<Pair>, stride: Option<Pair>) -> Result<Tensor> {
    let opts = Pool2dOptions {
        stride,
        ..Pool2dOptions::new(kernel)
    };
    max_pool2d_with(x, opts)
}

/// PyTorch's `F.max_pool2d` with padding (windows are clipped to the input, so padding is
/// never chosen) and `ceil_mode`. Padding may be at most half the kernel.
///
/// Backward routes each output's gradient to the position its maximum came from (the first
/// one on ties); the node saves those positions as i64 indices into each `H·W` plane.
///
/// ```
/// use strata_core::nn::functional::{max_pool2d_with, Pair, Pool2dOptions};
/// use strata_core::{DType, Tensor};
/// let x = Tensor::arange(9, DType::F32)?.view(&[1, 1, 3, 3])?;
/// let opts = Pool2dOptions { ceil_mode: true, ..Pool2dOptions::new(2) };
/// assert_eq!(max_pool2d_with(&x, opts)?.to_vec::<f32>()?, vec![4.0, 5.0, 7.0, 8.0]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn max_pool2d_with(x: &Tensor, opts: Pool2dOptions) -> Result<Tensor> {
    Entry::new("max_pool2d", &[x])?
        .run(
            |ctx, x| forward(ctx, x[0], &opts),
            |ctx, x, (out, indices)| backward(ctx, x[0], out, indices),
        )
        .map(|(out, _)| out)
}

/// The pooled values, and the flat position in its plane each came from.
fn forward(ctx: &OpContext, x: &Tensor, opts: &Pool2dOptions) -> Result<(Tensor, Tensor)> {
    let op = ctx.op();
    if x.dtype() == DType::Bool {
        return Err(Error::dtype(
            op,
            "the input must be numeric, got bool",
            Some("convert it with .to(DType::F32)"),
        ));
    }
    let win = check(op, x, opts)?;
    crate::ops::pool::max_pool2d(ctx, x, &kernel_windows(&win))
}

/// The checked windows as the kernel takes them.
fn kernel_windows(win: &Windows) -> PoolWindows {
    PoolWindows {
        h: win.h,
        w: win.w,
        oh: win.oh,
        ow: win.ow,
        kh: win.kernel.0,
        kw: win.kernel.1,
        sh: win.stride.0,
        sw: win.stride.1,
        ph: win.padding.0,
        pw: win.padding.1,
    }
}

/// Records `out = max_pool2d(x)`, whose maxima came from `indices`.
fn backward(ctx: &OpContext, x: &Tensor, out: &Tensor, indices: &Tensor) -> Result<()> {
    if !x.dtype().is_floating() {
        return Ok(());
    }
    let shape = x.shape().to_vec();
    record(ctx, "MaxPool2DWithIndicesBackward0", &[x], out, |rec| {
        let saved = rec.save(indices)?;
        Ok(move |g: Tensor| -> Grads {
            let ctx = OpContext::enter("max_pool2d_backward");
            let gx = crate::ops::pool::max_pool2d_backward(&ctx, &g, &saved.get()?, &shape)?;
            Ok(vec![Some(gx)])
        })
    })
}
