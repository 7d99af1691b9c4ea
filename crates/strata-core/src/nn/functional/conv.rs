//! `conv2d` through im2col and the matmul: the input's patches become the columns of a
//! matrix that the weight multiplies; backward multiplies back and scatters the columns'
//! gradients onto the input (col2im).

use super::check::{dtype_is, floating, ndim_in, shape};
use super::Pair;
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, take, Grads};
use crate::op::OpContext;
use crate::{Result, Tensor};

/// The sizes of one convolution, checked.
#[derive(Clone, Copy)]
struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    kernel: Pair,
    stride: Pair,
    padding: Pair,
    oh: usize,
    ow: usize,
}

impl Geometry {
    /// Rows of the column matrix: `C·kh·kw`.
    fn patch(&self) -> usize {
        self.c * self.kernel.0 * self.kernel.1
    }
}

/// The 2-d convolution (cross-correlation) of `x` (`[N, C, H, W]`, or `[C, H, W]` for one
/// sample) with `weight` (`[O, C, kh, kw]`), plus `bias` (`[O]`) when given, with `stride`
/// and zero `padding` (PyTorch's `F.conv2d` without groups or dilation). The result is
/// `[N, O, OH, OW]` with `OH = (H + 2·ph - kh) / sh + 1`.
///
/// Its backward node saves the input and the weight (views, no copies) and rebuilds the
/// column matrix when the weight needs a gradient.
///
/// ```
/// use strata_core::nn::functional::conv2d;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::arange(9, DType::F32)?.view(&[1, 1, 3, 3])?;
/// let w = Tensor::ones(&[1, 1, 2, 2], DType::F32)?;
/// let y = conv2d(&x, &w, None, 1, 0)?;
/// assert_eq!(y.shape().as_slice(), [1, 1, 2, 2]);
/// assert_eq!(y.to_vec::<f32>()?, vec![8.0, 12.0, 20.0, 24.0]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn conv2d(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: impl Into<Pair>,
    padding: impl Into<Pair>,
) -> Result<Tensor> {
    let (stride, padding) = (stride.into(), padding.into());
    let mut inputs = vec![x, weight];
    inputs.extend(bias);
    Entry::new("conv2d", &inputs)?
        .run(
            |ctx, t| forward(ctx, t[0], t[1], t.get(2).copied(), stride, padding),
            |ctx, t, (out, g)| backward(ctx, t, out, *g),
        )
        .map(|(out, _)| out)
}

/// The convolution, and its checked sizes.
fn forward(
    ctx: &OpContext,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: Pair,
    padding: Pair,
) -> Result<(Tensor, Geometry)> {
    let g = check(ctx.op(), x, weight, bias, stride, padding)?;
    let unbatched = x.dim() == 3;
    let xb = if unbatched {
        x.unsqueeze(0)?
    } else {
        x.clone()
    };
    let cols = im2col(&xb, &g)?;
    let w2 = weight.reshape(&[g.o as i64, g.patch() as i64])?;
    let y = w2.matmul(&cols)?;
    let mut y = y.view(&[g.n as i64, g.o as i64, g.oh as i64, g.ow as i64])?;
    if let Some(b) = bias {
        y = y.add(&b.view(&[g.o as i64, 1, 1])?)?;
    }
    if unbatched {
        y = y.squeeze(Some(&[0]))?;
    }
    Ok((y, g))
}

/// Records `out = conv2d(inputs)` (the input, the weight, and the bias when there is one).
fn backward(ctx: &OpContext, inputs: &[&Tensor], out: &Tensor, g: Geometry) -> Result<()> {
    let (x, weight) = (inputs[0], inputs[1]);
    let has_b = inputs.len() > 2;
    let unbatched = x.dim() == 3;
    record(ctx, "ConvolutionBackward0", inputs, out, |rec| {
        let (need_x, need_w) = (rec.needs(0), rec.needs(1));
        let need_b = has_b && rec.needs(2);
        let sx = rec.save_if(need_w, x)?;
        let sw = rec.save_if(need_x, weight)?;
        Ok(move |grad: Tensor| -> Grads {
            let gy = grad.reshape(&[g.n as i64, g.o as i64, (g.oh * g.ow) as i64])?;
            let gx = if need_x {
                let w2 = take(&sw)?.reshape(&[g.o as i64, g.patch() as i64])?;
                let gx = col2im(&w2.t()?.matmul(&gy)?, &g)?;
                Some(if unbatched {
                    gx.squeeze(Some(&[0]))?
                } else {
                    gx
                })
            } else {
                None
            };
            let gw = if need_w {
                let x = take(&sx)?;
                let xb = if unbatched { x.unsqueeze(0)? } else { x };
                let cols = im2col(&xb, &g)?;
                let gw = gy.matmul(&cols.transpose(1, 2)?)?.sum(Some(&[0]), false)?;
                Some(gw.view(&[g.o as i64, g.c as i64, g.kernel.0 as i64, g.kernel.1 as i64])?)
            } else {
                None
            };
            let mut grads = vec![gx, gw];
            if has_b {
                grads.push(if need_b {
                    Some(gy.sum(Some(&[0, 2]), false)?)
                } else {
                    None
                });
            }
            Ok(grads)
        })
    })
}

fn check(
    op: &'static str,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: Pair,
    padding: Pair,
) -> Result<Geometry> {
    floating(op, "the input", x)?;
    dtype_is(op, "the weight", weight, x.dtype())?;
    ndim_in(op, "the input", x, &[3, 4])?;
    ndim_in(op, "the weight", weight, &[4])?;
    let xs = x.shape().to_vec();
    let xs4: Vec<usize> = if xs.len() == 3 {
        [&[1], &xs[..]].concat()
    } else {
        xs.clone()
    };
    let ws = weight.shape().to_vec();
    let (n, c, h, w) = (xs4[0], xs4[1], xs4[2], xs4[3]);
    let (o, kernel) = (ws[0], Pair(ws[2], ws[3]));
    if ws[1] != c {
        return Err(shape(
            op,
            format!(
                "the input has {c} channels but the weight {ws:?} expects {}",
                ws[1]
            ),
            vec![xs, ws],
            "the weight has shape [out_channels, in_channels, kh, kw]; groups are not supported",
        ));
    }
    if stride.0 == 0 || stride.1 == 0 {
        return Err(crate::Error::argument(
            op,
            format!("the stride must be positive, got {stride:?}"),
            Some("use stride 1 for a dense convolution"),
        ));
    }
    let (hp, wp) = (h + 2 * padding.0, w + 2 * padding.1);
    if kernel.0 == 0 || kernel.1 == 0 || hp < kernel.0 || wp < kernel.1 {
        return Err(shape(
            op,
            format!(
                "the padded input is {hp}x{wp}, smaller than the kernel {}x{} (or the kernel is \
                 empty)",
                kernel.0, kernel.1
            ),
            vec![xs, ws],
            "pad the input or use a smaller kernel",
        ));
    }
    if let Some(b) = bias {
        dtype_is(op, "the bias", b, x.dtype())?;
        if b.shape().as_slice() != [o] {
            return Err(shape(
                op,
                format!(
                    "the bias must have shape [{o}] (out_channels), got {:?}",
                    b.shape()
                ),
                vec![b.shape().to_vec(), ws],
                "give the bias one value per output channel",
            ));
        }
    }
    Ok(Geometry {
        n,
        c,
        h,
        w,
        o,
        kernel,
        stride,
        padding,
        oh: (hp - kernel.0) / stride.0 + 1,
        ow: (wp - kernel.1) / stride.1 + 1,
    })
}

/// The column matrix `[N, C·kh·kw, OH·OW]` of `x` (`[N, C, H, W]`): column `(i, j)` of
/// sample `n` holds the (zero-padded) patch under output position `(i, j)`.
fn im2col(x: &Tensor, g: &Geometry) -> Result<Tensor> {
    let xp = if g.padding == Pair(0, 0) {
        x.clone()
    } else {
        let shape = [g.n, g.c, g.h + 2 * g.padding.0, g.w + 2 * g.padding.1];
        let xp = Tensor::on(x.device()).zeros(&shape, x.dtype())?;
        xp.narrow(2, g.padding.0 as i64, g.h)?
            .narrow(3, g.padding.1 as i64, g.w)?
            .copy_(x)?;
        xp
    };
    xp.unfold(2, g.kernel.0, g.stride.0)?
        .unfold(3, g.kernel.1, g.stride.1)?
        .permute(&[0, 1, 4, 5, 2, 3])?
        .reshape(&[g.n as i64, g.patch() as i64, (g.oh * g.ow) as i64])
}

/// The inverse scatter of [`im2col`]: every column entry added back onto the input position
/// it was read from (overlapping patches accumulate; padding is dropped).
fn col2im(cols: &Tensor, g: &Geometry) -> Result<Tensor> {
    let (kh, kw) = (g.kernel.0, g.kernel.1);
    let shape = [g.n, g.c, g.h + 2 * g.padding.0, g.w + 2 * g.padding.1];
    let out = Tensor::on(cols.device()).zeros(&shape, cols.dtype())?;
    let cols = cols.view(&[
        g.n as i64,
        g.c as i64,
        kh as i64,
        kw as i64,
        g.oh as i64,
        g.ow as i64,
    ])?;
    for i in 0..kh {
        for j in 0..kw {
            let end_h = (i + g.stride.0 * (g.oh - 1) + 1) as i64;
            let end_w = (j + g.stride.1 * (g.ow - 1) + 1) as i64;
            let region = out
                .slice(2, Some(i as i64), Some(end_h), g.stride.0)?
                .slice(3, Some(j as i64), Some(end_w), g.stride.1)?;
            region.add_(&cols.select(2, i as i64)?.select(2, j as i64)?)?;
        }
    }
    if g.padding == Pair(0, 0) {
        return Ok(out);
    }
    out.narrow(2, g.padding.0 as i64, g.h)?
        .narrow(3, g.padding.1 as i64, g.w)?
        .contiguous()
}
