//! `max_pool2d`, as one node that saves the argmax positions (not a mask).

use super::super::Pair;
use super::{check, padded, windows_of, Pool2dOptions, Windows};
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::op::OpContext;
use crate::{DType, Error, Result, Scalar, Tensor};

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

/// PyTorch's `F.max_pool2d` with padding (never chosen: padded positions hold the lowest
/// value) and `ceil_mode`. Padding may be at most half the kernel.
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

/// The lowest value of `dtype`: what padding holds so that no maximum comes from it.
fn lowest(dtype: DType) -> Scalar {
    match dtype {
        DType::U8 | DType::Bool => Scalar::from(0i64),
        DType::I32 => Scalar::from(i32::MIN),
        DType::I64 => Scalar::from(i64::MIN),
        _ => Scalar::from(f64::NEG_INFINITY),
    }
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
    let unbatched = x.dim() == 3;
    let xb = if unbatched {
        x.unsqueeze(0)?
    } else {
        x.clone()
    };
    let (values, local) =
        windows_of(&padded(&xb, &win, lowest(x.dtype()))?, &win)?.max_dim(4, false)?;
    let indices = positions(&xb, &win)?
        .gather(4, &local.unsqueeze(4)?)?
        .squeeze(Some(&[4]))?;
    let values = values.contiguous()?;
    if unbatched {
        Ok((values.squeeze(Some(&[0]))?, indices.squeeze(Some(&[0]))?))
    } else {
        Ok((values, indices))
    }
}

/// Each window's flat positions in the input plane (`[n, c, OH, OW, kh·kw]`, expanded; a
/// padded position holds 0 and is never picked).
fn positions(xb: &Tensor, win: &Windows) -> Result<Tensor> {
    let (n, c) = (xb.shape()[0] as i64, xb.shape()[1] as i64);
    let plane = Tensor::on(xb.device())
        .arange(win.h * win.w, DType::I64)?
        .view(&[1, 1, win.h as i64, win.w as i64])?;
    windows_of(&padded(&plane, win, Scalar::from(0i64))?, win)?.expand(&[
        n,
        c,
        win.oh as i64,
        win.ow as i64,
        (win.kernel.0 * win.kernel.1) as i64,
    ])
}

/// Records `out = max_pool2d(x)`, whose maxima came from `indices`.
fn backward(ctx: &OpContext, x: &Tensor, out: &Tensor, indices: &Tensor) -> Result<()> {
    if !x.dtype().is_floating() {
        return Ok(());
    }
    let xs = x.shape();
    let nd = xs.len();
    let (h, w) = (xs[nd - 2], xs[nd - 1]);
    let os = out.shape();
    let (oh, ow) = (os[nd - 2], os[nd - 1]);
    record(ctx, "MaxPool2DWithIndicesBackward0", &[x], out, |rec| {
        let saved = rec.save(indices)?;
        Ok(move |g: Tensor| -> Grads {
            let idx = saved.get()?;
            let planes = &xs[..nd - 2];
            let mut flat: Vec<usize> = planes.to_vec();
            flat.push(h * w);
            let mut flat_out: Vec<i64> = planes.iter().map(|&s| s as i64).collect();
            flat_out.push((oh * ow) as i64);
            let gx = Tensor::on(g.device())
                .zeros(&flat, g.dtype())?
                .scatter_add(
                    nd as i64 - 2,
                    &idx.reshape(&flat_out)?,
                    &g.reshape(&flat_out)?,
                )?;
            let full: Vec<i64> = xs.iter().map(|&s| s as i64).collect();
            Ok(vec![Some(gx.view(&full)?)])
        })
    })
}
