//! Pooling with padding and ceil_mode, average and adaptive pooling, batch norm.

use super::{close, f64s, gradcheck, leaf};
use crate::nn::functional::{
    adaptive_avg_pool2d, avg_pool2d, batch_norm, max_pool2d_with, Pair, Pool2dOptions,
};
use crate::{DType, Error, Tensor};

fn pool(kernel: usize, stride: usize, padding: usize, ceil_mode: bool) -> Pool2dOptions {
    Pool2dOptions {
        kernel: Pair::from(kernel),
        stride: Some(Pair::from(stride)),
        padding: Pair::from(padding),
        ceil_mode,
    }
}

#[test]
fn max_pool_padding_is_never_chosen_and_ceil_mode_adds_a_window() {
    let x = Tensor::arange(9, DType::F64)
        .unwrap()
        .neg()
        .unwrap()
        .view(&[1, 1, 3, 3])
        .unwrap();
    // All values are <= 0: a zero in the padding would win; -inf padding never does.
    let y = max_pool2d_with(&x, pool(2, 2, 1, false)).unwrap();
    assert_eq!(y.shape().as_slice(), [1, 1, 2, 2]);
    close(&y.to_vec::<f64>().unwrap(), &[0.0, -1.0, -3.0, -4.0], 0.0);
    // 5 wide, kernel 2, stride 2: floor gives 2 windows, ceil 3.
    let x = leaf(&[1, 2, 5, 5], 3);
    assert_eq!(
        max_pool2d_with(&x, pool(2, 2, 0, false)).unwrap().shape()[3],
        2
    );
    assert_eq!(
        max_pool2d_with(&x, pool(2, 2, 0, true)).unwrap().shape()[3],
        3
    );
    for o in [
        pool(2, 2, 1, true),
        pool(3, 2, 1, false),
        pool(3, 1, 1, true),
    ] {
        gradcheck(|t| max_pool2d_with(&t[0], o), &[leaf(&[2, 2, 5, 6], 4)]);
    }
    let e = max_pool2d_with(&x, pool(2, 2, 2, false)).unwrap_err();
    assert!(matches!(e, Error::Argument { .. }), "{e}");
}

#[test]
fn avg_pool_counts_padding_and_clips_ceil_windows() {
    let x = Tensor::ones(&[1, 1, 3, 3], DType::F64).unwrap();
    // Padding 1, kernel 2, stride 2: every window holds 4 positions, some of them padding.
    let y = avg_pool2d(&x, pool(2, 2, 1, false)).unwrap();
    close(&y.to_vec::<f64>().unwrap(), &[0.25, 0.5, 0.5, 1.0], 1e-12);
    // ceil_mode on 3 wide, kernel 2, stride 2, no padding: the last window holds one column
    // and divides by 1·2.
    let y = avg_pool2d(&x, pool(2, 2, 0, true)).unwrap();
    close(&y.to_vec::<f64>().unwrap(), &[1.0; 4], 1e-12);
    for o in [
        pool(2, 2, 1, true),
        pool(3, 2, 1, false),
        pool(2, 1, 0, false),
    ] {
        gradcheck(|t| avg_pool2d(&t[0], o), &[leaf(&[2, 2, 5, 4], 5)]);
    }
}

#[test]
fn adaptive_avg_pool_uses_pytorch_windows() {
    // 5 inputs into 3 outputs: windows 0..=1, 1..=3, 3..=4.
    let x = f64s(&[1.0, 2.0, 3.0, 4.0, 5.0], &[1, 1, 1, 5]);
    let y = adaptive_avg_pool2d(&x, (1, 3)).unwrap();
    close(&y.to_vec::<f64>().unwrap(), &[1.5, 3.0, 4.5], 1e-12);
    assert!(y.is_contiguous());
    for size in [Pair(1, 1), Pair(2, 3), Pair(3, 2)] {
        gradcheck(
            |t| adaptive_avg_pool2d(&t[0], size),
            &[leaf(&[2, 3, 5, 4], 6)],
        );
    }
}

#[test]
fn batch_norm_trains_updates_running_stats_and_evaluates() {
    let x = leaf(&[4, 3, 2, 2], 7);
    let (w, b) = (leaf(&[3], 8), leaf(&[3], 9));
    let rm = Tensor::zeros(&[3], DType::F64).unwrap();
    let rv = Tensor::ones(&[3], DType::F64).unwrap();
    let y = batch_norm(
        &x,
        Some(&rm),
        Some(&rv),
        Some(&w),
        Some(&b),
        true,
        0.1,
        1e-5,
    )
    .unwrap();
    // Per channel, the output has mean b and (biased) std |w|.
    let m = y
        .mean(Some(&[0, 2, 3]), false)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    close(&m, &b.to_vec::<f64>().unwrap(), 1e-9);
    // Running stats moved 10% of the way, with the unbiased variance, and stayed at version 0.
    let batch_mean = x.mean(Some(&[0, 2, 3]), false).unwrap().mul(0.1).unwrap();
    close(
        &rm.to_vec::<f64>().unwrap(),
        &batch_mean.to_vec::<f64>().unwrap(),
        1e-12,
    );
    let var = x
        .var(Some(&[0, 2, 3]), 1.0, false)
        .unwrap()
        .mul(0.1)
        .unwrap()
        .add(0.9)
        .unwrap();
    close(
        &rv.to_vec::<f64>().unwrap(),
        &var.to_vec::<f64>().unwrap(),
        1e-12,
    );
    assert_eq!((rm.version(), rv.version()), (0, 0));
    let stats = || (rm.detach().unwrap(), rv.detach().unwrap());
    for training in [true, false] {
        gradcheck(
            |t| {
                let (m, v) = stats();
                batch_norm(
                    &t[0],
                    Some(&m),
                    Some(&v),
                    Some(&t[1]),
                    Some(&t[2]),
                    training,
                    0.0,
                    1e-5,
                )
            },
            &[x.clone(), w.clone(), b.clone()],
        );
    }
    // Without an affine part, and on [N, C] input.
    gradcheck(
        |t| batch_norm(&t[0], None, None, None, None, true, 0.1, 1e-5),
        &[leaf(&[5, 3], 10)],
    );
    let e = batch_norm(&leaf(&[1, 3], 11), None, None, None, None, true, 0.1, 1e-5).unwrap_err();
    assert!(
        e.to_string().contains("more than 1 value per channel"),
        "{e}"
    );
    let e = batch_norm(&x, None, None, None, None, false, 0.1, 1e-5).unwrap_err();
    assert!(matches!(e, Error::Argument { .. }), "{e}");
}

#[test]
fn batch_norm_accepts_bf16_input_with_f32_statistics() {
    let x = Tensor::randn(&[4, 2, 3], DType::F32).unwrap();
    let rm = Tensor::zeros(&[2], DType::F32).unwrap();
    let rv = Tensor::ones(&[2], DType::F32).unwrap();
    let w = Tensor::ones(&[2], DType::F32).unwrap();
    let y = batch_norm(
        &x.to(DType::BF16).unwrap(),
        Some(&rm),
        Some(&rv),
        Some(&w),
        None,
        true,
        0.1,
        1e-5,
    )
    .unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    assert_eq!(rm.dtype(), DType::F32);
    let want = batch_norm(&x, None, None, Some(&w), None, true, 0.1, 1e-5).unwrap();
    let (got, want) = (
        y.to(DType::F32).unwrap().to_vec::<f32>().unwrap(),
        want.to_vec::<f32>().unwrap(),
    );
    got.iter()
        .zip(&want)
        .for_each(|(a, b)| assert!((a - b).abs() < 0.05, "{a} vs {b}"));
}

#[test]
fn layer_norm_accepts_bf16_input_with_f32_weight_and_bias() {
    use crate::nn::functional::layer_norm;
    let x = Tensor::randn(&[3, 4], DType::F32).unwrap();
    let w = Tensor::ones(&[4], DType::F32)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let b = Tensor::zeros(&[4], DType::F32)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let xh = x.to(DType::BF16).unwrap().requires_grad_(true).unwrap();
    let y = layer_norm(&xh, &[4], Some(&w), Some(&b), 1e-5).unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    y.to(DType::F32)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(xh.grad().unwrap().dtype(), DType::BF16);
    assert_eq!(w.grad().unwrap().dtype(), DType::F32);
    assert_eq!(b.grad().unwrap().dtype(), DType::F32);
    let want = layer_norm(&x, &[4], None, None, 1e-5)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let got = y.to(DType::F32).unwrap().to_vec::<f32>().unwrap();
    got.iter()
        .zip(&want)
        .for_each(|(a, b)| assert!((a - b).abs() < 0.05, "{a} vs {b}"));
}
