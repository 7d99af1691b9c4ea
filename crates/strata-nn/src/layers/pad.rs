//! Building blocks the pooling and convolution layers compose from core ops: padding the
//! last two dimensions with a constant, and spreading a kernel's taps apart (dilation).

use strata_core::{Result, Tensor};

/// `x` with `before` and `after` elements of `value` added along dimension `dim`, by
/// concatenation (so gradients flow to `x`).
fn pad_dim(x: &Tensor, dim: usize, before: usize, after: usize, value: f64) -> Result<Tensor> {
    if before == 0 && after == 0 {
        return Ok(x.clone());
    }
    let block = |n: usize| {
        let mut shape = x.shape().to_vec();
        shape[dim] = n;
        Tensor::on(x.device()).full(&shape, value, x.dtype())
    };
    let (b, a) = (block(before)?, block(after)?);
    Tensor::cat(&[&b, x, &a], dim as i64)
}

/// Pads the last two dimensions: `top`/`bottom` rows and `left`/`right` columns of `value`.
pub(crate) fn pad2d(
    x: &Tensor,
    (top, bottom): (usize, usize),
    (left, right): (usize, usize),
    value: f64,
) -> Result<Tensor> {
    let nd = x.dim();
    let t = pad_dim(x, nd - 1, left, right, value)?;
    pad_dim(&t, nd - 2, top, bottom, value)
}

/// Spreads a `[O, I, kh, kw]` kernel's taps `dh`/`dw` apart with zeros between them: the
/// dense kernel equal to the dilated one.
pub(crate) fn dilate_kernel(w: &Tensor, dh: usize, dw: usize) -> Result<Tensor> {
    let spread = |w: &Tensor, dim: usize, d: usize| -> Result<Tensor> {
        let k = w.shape()[dim];
        if d <= 1 || k <= 1 {
            return Ok(w.clone());
        }
        let mut parts = Vec::with_capacity(2 * k - 1);
        for a in 0..k {
            let tap = w.narrow(dim as i64, a as i64, 1)?;
            if a + 1 < k {
                parts.push(pad_dim(&tap, dim, 0, d - 1, 0.0)?);
            } else {
                parts.push(tap);
            }
        }
        Tensor::cat(&parts.iter().collect::<Vec<_>>(), dim as i64)
    };
    spread(&spread(w, 2, dh)?, 3, dw)
}

#[cfg(test)]
mod tests {
    use strata_core::{DType, Tensor};

    use super::*;

    #[test]
    fn pads_and_dilates() {
        let x = Tensor::arange(4, DType::F32)
            .unwrap()
            .view(&[1, 1, 2, 2])
            .unwrap();
        let p = pad2d(&x, (1, 0), (0, 1), -1.0).unwrap();
        assert_eq!(p.shape().as_slice(), [1, 1, 3, 3]);
        assert_eq!(
            p.to_vec::<f32>().unwrap(),
            [-1.0, -1.0, -1.0, 0.0, 1.0, -1.0, 2.0, 3.0, -1.0]
        );
        let d = dilate_kernel(&x, 2, 3).unwrap();
        assert_eq!(d.shape().as_slice(), [1, 1, 3, 4]);
        assert_eq!(
            d.to_vec::<f32>().unwrap(),
            [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 3.0]
        );
    }
}
