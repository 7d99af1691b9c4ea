//! `max_pool2d`, as one node that saves the argmax positions (not a mask).

use super::check::{ndim_in, shape};
use super::Pair;
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::op::OpContext;
use crate::{DType, Error, Result, Tensor};

/// The maximum of each `kernel` window of `x` (`[N, C, H, W]` or `[C, H, W]`), windows
/// `stride` apart (the kernel size when `None`), without padding (PyTorch's
/// `F.max_pool2d`). The result is `[N, C, OH, OW]` with `OH = (H - kh) / sh + 1`.
///
/// Backward routes each output's gradient to the position its maximum came from (the first
/// one on ties); the node saves those positions as i64 indices into each `H·W` plane.
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
    let kernel = kernel.into();
    let stride = stride.unwrap_or(kernel);
    Entry::new("max_pool2d", &[x])?
        .run(
            |ctx, x| forward(ctx, x[0], kernel, stride),
            |ctx, x, (out, indices)| backward(ctx, x[0], out, indices),
        )
        .map(|(out, _)| out)
}

/// The pooled values, and the flat position in its plane each came from.
fn forward(ctx: &OpContext, x: &Tensor, kernel: Pair, stride: Pair) -> Result<(Tensor, Tensor)> {
    let op = ctx.op();
    ndim_in(op, "the input", x, &[3, 4])?;
    if x.dtype() == DType::Bool {
        return Err(Error::dtype(
            op,
            "the input must be numeric, got bool",
            Some("convert it with .to(DType::F32)"),
        ));
    }
    if kernel.0 == 0 || kernel.1 == 0 || stride.0 == 0 || stride.1 == 0 {
        return Err(Error::argument(
            op,
            format!("the kernel {kernel:?} and stride {stride:?} must be positive"),
            Some("a 2x2 pooling is kernel 2 (stride defaults to the kernel)"),
        ));
    }
    let unbatched = x.dim() == 3;
    let xs = x.shape().to_vec();
    let nd = xs.len();
    let (h, w) = (xs[nd - 2], xs[nd - 1]);
    if h < kernel.0 || w < kernel.1 {
        return Err(shape(
            op,
            format!(
                "the input's {h}x{w} planes are smaller than the kernel {}x{}",
                kernel.0, kernel.1
            ),
            vec![xs],
            "use a smaller kernel or a larger input",
        ));
    }
    let (oh, ow) = ((h - kernel.0) / stride.0 + 1, (w - kernel.1) / stride.1 + 1);
    let xb = if unbatched {
        x.unsqueeze(0)?
    } else {
        x.clone()
    };
    let (n, c) = (xb.shape()[0] as i64, xb.shape()[1] as i64);
    let kk = (kernel.0 * kernel.1) as i64;
    let windows = |t: &Tensor, n: i64, c: i64| -> Result<Tensor> {
        t.unfold(2, kernel.0, stride.0)?
            .unfold(3, kernel.1, stride.1)?
            .reshape(&[n, c, oh as i64, ow as i64, kk])
    };
    let (values, local) = windows(&xb, n, c)?.max_dim(4, false)?;
    // Each window's flat positions in its plane, picked at the argmax.
    let positions = Tensor::on(xb.device())
        .arange(h * w, DType::I64)?
        .view(&[1, 1, h as i64, w as i64])?;
    let positions = windows(&positions, 1, 1)?.expand(&[n, c, oh as i64, ow as i64, kk])?;
    let indices = positions
        .gather(4, &local.unsqueeze(4)?)?
        .squeeze(Some(&[4]))?;
    if unbatched {
        Ok((values.squeeze(Some(&[0]))?, indices.squeeze(Some(&[0]))?))
    } else {
        Ok((values, indices))
    }
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
