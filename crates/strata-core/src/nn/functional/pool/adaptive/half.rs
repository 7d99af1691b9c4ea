//! `adaptive_avg_pool2d` of an f16 or bf16 input, rounded as PyTorch's CPU kernels round it.
//!
//! A 1×1 output is PyTorch's `mean` over the plane: the f32 sum divided by the count, rounded
//! once (its backward rounds `g / count` once). Any other output: each window's sum in f32,
//! divided by its height and then its width, rounded once; the backward rounds `g / kh` and
//! then `/ kw` to the input's dtype and adds the share into each position of the window in
//! that dtype, window after window in row-major output order (each addition rounded).

use super::spans;
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::nn::functional::Pair;
use crate::op::OpContext;
use crate::{DType, Result, Tensor};

/// `x` (`[.., H, W]`, f16 or bf16) averaged to `output` (`[.., OH, OW]`, contiguous).
pub(super) fn adaptive_avg_pool2d_half(x: &Tensor, output: Pair) -> Result<Tensor> {
    let nd = x.dim() as i64;
    if output == Pair(1, 1) {
        return x
            .to(DType::F32)?
            .mean(Some(&[nd - 2, nd - 1]), true)?
            .to(x.dtype());
    }
    Entry::new("adaptive_avg_pool2d", &[x])?.run(
        |_, t| forward(t[0], output),
        |ctx, t, out| backward(ctx, t[0], out, output),
    )
}

/// Window sums in f32, divided by each window's height and then its width, rounded once.
fn forward(x: &Tensor, output: Pair) -> Result<Tensor> {
    let nd = x.dim() as i64;
    let (h, w) = (x.shape()[nd as usize - 2], x.shape()[nd as usize - 1]);
    let xf = x.to(DType::F32)?;
    let mut lines = Vec::with_capacity(output.0);
    for (r0, kh) in spans(h, output.0) {
        let mut line = Vec::with_capacity(output.1);
        for (c0, kw) in spans(w, output.1) {
            line.push(
                xf.narrow(nd - 2, r0 as i64, kh)?
                    .narrow(nd - 1, c0 as i64, kw)?
                    .sum(Some(&[nd - 2, nd - 1]), false)?
                    .div(kh as f64)?
                    .div(kw as f64)?,
            );
        }
        lines.push(Tensor::stack(&line.iter().collect::<Vec<_>>(), -1)?);
    }
    Tensor::stack(&lines.iter().collect::<Vec<_>>(), -2)?.to(x.dtype())
}

/// Records `out = adaptive_avg_pool2d(x)`.
fn backward(ctx: &OpContext, x: &Tensor, out: &Tensor, output: Pair) -> Result<()> {
    let (shape, dtype) = (x.shape().to_vec(), x.dtype());
    record(ctx, "AdaptiveAvgPool2DBackward0", &[x], out, |_| {
        Ok(move |g: Tensor| -> Grads {
            let _ctx = OpContext::enter("adaptive_avg_pool2d_backward");
            Ok(vec![Some(input_grad(&g, &shape, dtype, output)?)])
        })
    })
}

/// The gradient of the input (`shape`, `dtype`) from the output's gradient `g`.
fn input_grad(g: &Tensor, shape: &[usize], dtype: DType, output: Pair) -> Result<Tensor> {
    let nd = shape.len() as i64;
    let (h, w) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let g = g.to(dtype)?;
    let gx = Tensor::on(g.device()).zeros(shape, dtype)?;
    for (oh, (r0, kh)) in spans(h, output.0).into_iter().enumerate() {
        for (ow, (c0, kw)) in spans(w, output.1).into_iter().enumerate() {
            let share = g
                .narrow(nd - 2, oh as i64, 1)?
                .narrow(nd - 1, ow as i64, 1)?
                .div(kh as f64)?
                .div(kw as f64)?;
            let at = gx
                .narrow(nd - 2, r0 as i64, kh)?
                .narrow(nd - 1, c0 as i64, kw)?;
            at.copy_(&at.add(&share)?)?;
        }
    }
    Ok(gx)
}

#[cfg(test)]
mod tests {
    use crate::nn::functional::adaptive_avg_pool2d;
    use crate::{DType, Tensor};

    fn bf16(v: &[f32], shape: &[usize]) -> Tensor {
        Tensor::from_vec(v.to_vec(), shape)
            .and_then(|t| t.to(DType::BF16))
            .unwrap()
    }

    #[test]
    fn bf16_windows_round_once_not_per_axis() {
        let v = [
            3.796875,
            99.0 / 2048.0,
            0.72265625,
            0.75,
            1.171875,
            2.40625,
            0.484375,
            235.0 / 512.0,
            1.046875,
        ];
        let y = adaptive_avg_pool2d(&bf16(&v, &[1, 1, 3, 3]), 2).unwrap();
        let got = y.to(DType::F32).unwrap().to_vec::<f32>().unwrap();
        // Averaging rows and then columns, each rounded to bf16, gives 0.71875 third.
        assert_eq!(got, vec![1.4453125, 1.0859375, 0.71484375, 1.2734375]);
    }

    #[test]
    fn bf16_gradient_shares_accumulate_in_bf16_in_row_major_window_order() {
        let x = Tensor::zeros(&[1, 1, 3, 3], DType::BF16)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let g = bf16(
            &[2.421875, 0.41796875, 79.0 / 512.0, 205.0 / 1024.0],
            &[1, 1, 2, 2],
        );
        adaptive_avg_pool2d(&x, 2)
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
        // The centre is in all four windows: 0.796875 if summed in f32 and rounded once.
        assert_eq!(gx[4], 0.80078125);
    }
}
