//! conv2d's dilation and groups, and the batch slices of its column buffer.

use super::{close, gradcheck, leaf};
use crate::nn::functional::{conv2d, conv2d_with, Conv2dOptions, Pair};
use crate::{DType, Error, Generator, Tensor};

fn opts(stride: usize, padding: usize, dilation: usize, groups: usize) -> Conv2dOptions {
    Conv2dOptions {
        stride: Pair::from(stride),
        padding: Pair::from(padding),
        dilation: Pair::from(dilation),
        groups,
    }
}

#[test]
fn grouped_conv_is_one_conv_per_group() {
    let x = leaf(&[2, 4, 5, 5], 11);
    let w = leaf(&[6, 2, 3, 3], 12);
    let o = opts(1, 1, 1, 2);
    let y = conv2d_with(&x, &w, None, o).unwrap();
    for g in 0..2 {
        let xg = x.narrow(1, 2 * g, 2).unwrap();
        let wg = w.narrow(0, 3 * g, 3).unwrap();
        let want = conv2d(&xg, &wg, None, 1, 1).unwrap();
        let got = y.narrow(1, 3 * g, 3).unwrap();
        close(
            &got.to_vec::<f64>().unwrap(),
            &want.to_vec::<f64>().unwrap(),
            1e-12,
        );
    }
}

#[test]
fn dilated_conv_reads_spread_taps() {
    // A 2x2 kernel with dilation 2 over a 3x3 input reads the four corners.
    let x = Tensor::arange(9, DType::F64)
        .unwrap()
        .view(&[1, 1, 3, 3])
        .unwrap();
    let w = Tensor::ones(&[1, 1, 2, 2], DType::F64).unwrap();
    let y = conv2d_with(&x, &w, None, opts(1, 0, 2, 1)).unwrap();
    assert_eq!(y.shape().as_slice(), [1, 1, 1, 1]);
    close(&y.to_vec::<f64>().unwrap(), &[0.0 + 2.0 + 6.0 + 8.0], 1e-12);
}

#[test]
fn dilation_and_groups_gradients_match_finite_differences() {
    for (stride, padding, dilation, groups) in
        [(1, 1, 2, 1), (2, 2, 2, 2), (1, 0, 1, 4), (2, 1, 3, 2)]
    {
        let (x, w, b) = (
            leaf(&[2, 4, 6, 5], 21),
            leaf(&[4, 4 / groups, 2, 3], 22),
            leaf(&[4], 23),
        );
        gradcheck(
            |t| {
                conv2d_with(
                    &t[0],
                    &t[1],
                    Some(&t[2]),
                    opts(stride, padding, dilation, groups),
                )
            },
            &[x, w, b],
        );
    }
    // A 1x1 kernel with stride 1 and no padding multiplies the input directly.
    gradcheck(
        |t| conv2d_with(&t[0], &t[1], None, opts(1, 0, 1, 2)),
        &[leaf(&[3, 4, 2, 3], 24), leaf(&[6, 2, 1, 1], 25)],
    );
}

#[test]
fn bad_groups_are_clear_errors() {
    let x = leaf(&[1, 4, 5, 5], 31);
    for (w, groups) in [(leaf(&[6, 2, 3, 3], 32), 3), (leaf(&[4, 3, 3, 3], 33), 2)] {
        let e = conv2d_with(&x, &w, None, opts(1, 0, 1, groups)).unwrap_err();
        assert!(matches!(e, Error::Shape { .. }), "{e}");
    }
    let e = conv2d_with(&x, &leaf(&[4, 4, 3, 3], 34), None, opts(1, 0, 1, 0)).unwrap_err();
    assert!(matches!(e, Error::Argument { .. }), "{e}");
    // A dilated kernel wider than the padded input.
    let e = conv2d_with(&x, &leaf(&[4, 4, 3, 3], 35), None, opts(1, 0, 3, 1)).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
}

#[test]
fn batch_slices_give_the_same_result_as_one_sample_at_a_time() {
    // 32 channels, 3x3, 28x28 in f32: 903,168 bytes of columns per sample, so 9 samples per
    // slice and a batch of 20 runs as slices of 9, 9 and 2.
    let mut gen = Generator::new(41);
    let x = Tensor::randn_with(&[20, 32, 28, 28], DType::F32, &mut gen)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let w = Tensor::randn_with(&[8, 32, 3, 3], DType::F32, &mut gen)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let o = opts(1, 1, 1, 1);
    let y = conv2d_with(&x, &w, None, o).unwrap();
    let probe = Tensor::randn_with(&y.shape(), DType::F32, &mut gen).unwrap();
    y.mul(&probe)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let (gx, gw) = (x.grad().unwrap(), w.grad().unwrap());
    let mut gw_sum = vec![0.0f64; gw.numel()];
    for n in 0..20 {
        let xn = x
            .detach()
            .unwrap()
            .narrow(0, n, 1)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let wn = w.detach().unwrap().requires_grad_(true).unwrap();
        let yn = conv2d_with(&xn, &wn, None, o).unwrap();
        let got = y.narrow(0, n, 1).unwrap().to_vec::<f32>().unwrap();
        let want = yn.to_vec::<f32>().unwrap();
        got.iter()
            .zip(&want)
            .for_each(|(a, b)| assert!((a - b).abs() < 1e-4, "{a} vs {b}"));
        let pn = probe.narrow(0, n, 1).unwrap();
        yn.mul(&pn)
            .unwrap()
            .sum(None, false)
            .unwrap()
            .backward()
            .unwrap();
        let got = gx.narrow(0, n, 1).unwrap().to_vec::<f32>().unwrap();
        let want = xn.grad().unwrap().to_vec::<f32>().unwrap();
        got.iter()
            .zip(&want)
            .for_each(|(a, b)| assert!((a - b).abs() < 1e-4, "{a} vs {b}"));
        let part = wn.grad().unwrap().to_vec::<f32>().unwrap();
        gw_sum
            .iter_mut()
            .zip(part)
            .for_each(|(s, p)| *s += p as f64);
    }
    let got = gw.to_vec::<f32>().unwrap();
    for (a, b) in got.iter().zip(&gw_sum) {
        assert!((*a as f64 - b).abs() < 1e-3 * (1.0 + b.abs()), "{a} vs {b}");
    }
}
