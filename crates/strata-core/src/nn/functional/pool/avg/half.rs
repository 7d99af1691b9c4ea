//! `avg_pool2d` of an f16 or bf16 input, rounded as PyTorch's CPU kernels round it.
//!
//! Forward: each window is summed and divided in f32, and rounded once. Backward: each
//! output's gradient share `g / size` is rounded to the input's dtype once, then added into
//! the input gradient in that dtype, output after output in row-major order (each addition
//! rounded), as PyTorch's kernel does; overlapping windows therefore round as PyTorch's do.

use super::super::{padded, windows_of, Windows};
use super::{divisors, Divisor};
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::op::OpContext;
use crate::{DType, Result, Scalar, Tensor};

/// The average pool of the half-precision `xb` (`[N, C, H, W]`), squeezed back to `[C, OH,
/// OW]` when the caller's input was `unbatched`.
pub(super) fn avg_pool2d_half(xb: &Tensor, win: &Windows, unbatched: bool) -> Result<Tensor> {
    let win = *win;
    let y = Entry::new("avg_pool2d", &[xb])?.run(
        |_, t| forward(t[0], &win),
        |ctx, t, out| backward(ctx, t[0], out, win),
    )?;
    if unbatched {
        y.squeeze(Some(&[0]))
    } else {
        Ok(y)
    }
}

/// Window sums and divisions in f32, rounded once to `x`'s dtype.
fn forward(x: &Tensor, win: &Windows) -> Result<Tensor> {
    let sums = windows_of(&padded(x, win, Scalar::from(0.0))?, win)?
        .to(DType::F32)?
        .sum(Some(&[4]), false)?;
    divide(&sums, win)?.to(x.dtype())
}

/// `t` (f32, `[.., OH, OW]`) divided by each window's divisor.
fn divide(t: &Tensor, win: &Windows) -> Result<Tensor> {
    match divisors(win) {
        Divisor::Same(d) => t.div(d as f64),
        Divisor::Each(d) => t.div(&Tensor::on(t.device()).from_vec(d, &[win.oh, win.ow])?),
    }
}

/// Records `out = avg_pool2d(x)`.
fn backward(ctx: &OpContext, x: &Tensor, out: &Tensor, win: Windows) -> Result<()> {
    let (shape, dtype) = (x.shape().to_vec(), x.dtype());
    record(ctx, "AvgPool2DBackward0", &[x], out, |_| {
        Ok(move |g: Tensor| -> Grads {
            let _ctx = OpContext::enter("avg_pool2d_backward");
            Ok(vec![Some(input_grad(&g, &shape, dtype, &win)?)])
        })
    })
}

/// The gradient of the input (`shape`, `dtype`) from the output's gradient `g`.
fn input_grad(g: &Tensor, shape: &[usize], dtype: DType, win: &Windows) -> Result<Tensor> {
    let share = divide(&g.to(DType::F32)?, win)?.to(dtype)?;
    let ext = win.extent();
    let gp = Tensor::on(g.device()).zeros(&[shape[0], shape[1], ext.0, ext.1], dtype)?;
    let (kh, kw) = (win.kernel.0, win.kernel.1);
    let views = gp
        .unfold(2, kh, win.stride.0)?
        .unfold(3, kw, win.stride.1)?
        .narrow(2, 0, win.oh)?
        .narrow(3, 0, win.ow)?;
    // An input position receives the shares of the windows covering it in row-major output
    // order, which is descending order of its offset (dy, dx) inside those windows.
    for dy in (0..kh).rev() {
        for dx in (0..kw).rev() {
            let at = views.select(5, dx as i64)?.select(4, dy as i64)?;
            at.copy_(&at.add(&share)?)?;
        }
    }
    gp.narrow(2, win.padding.0 as i64, win.h)?
        .narrow(3, win.padding.1 as i64, win.w)?
        .contiguous()
}

#[cfg(test)]
mod tests {
    use crate::nn::functional::{avg_pool2d, Pool2dOptions};
    use crate::{DType, Tensor};

    fn bf16(v: &[f32], shape: &[usize]) -> Tensor {
        Tensor::from_vec(v.to_vec(), shape)
            .and_then(|t| t.to(DType::BF16))
            .unwrap()
    }

    #[test]
    fn bf16_windows_are_summed_and_divided_in_f32_and_rounded_once() {
        let v = [
            3.546875,
            1.8046875,
            3.203125,
            0.59765625,
            1.609375,
            111.0 / 512.0,
            1.8359375,
            0.703125,
            3.796875,
        ];
        let y = avg_pool2d(&bf16(&v, &[1, 1, 3, 3]), Pool2dOptions::new(3)).unwrap();
        assert_eq!(y.dtype(), DType::BF16);
        let got = y.to(DType::F32).unwrap().to_vec::<f32>().unwrap();
        // f32: 17.3 / 9 rounds to 1.921875; the sum rounded to bf16 first gives 1.9296875.
        assert_eq!(got, vec![1.921875]);
    }

    #[test]
    fn bf16_gradient_shares_accumulate_in_bf16_in_row_major_window_order() {
        let x = Tensor::zeros(&[1, 1, 3, 3], DType::BF16)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let opts = Pool2dOptions {
            stride: Some((1, 1).into()),
            ..Pool2dOptions::new(2)
        };
        let g = bf16(&[2.546875, 2.625, 1.9453125, 0.64453125], &[1, 1, 2, 2]);
        avg_pool2d(&x, opts)
            .unwrap()
            .backward_with(Some(&g), false)
            .unwrap();
        let gx = x
            .grad()
            .unwrap()
            .to(DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        // The centre takes all four shares: PyTorch's order gives 1.9453125, where the f32
        // sum rounded once (or the reverse order) gives 1.9375.
        assert_eq!(gx[4], 1.9453125);
    }
}
