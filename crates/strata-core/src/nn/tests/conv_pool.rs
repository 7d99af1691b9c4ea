//! conv2d and max_pool2d.

use super::{close, f32_copies, f64s, gradcheck, leaf};
use crate::nn::functional::{conv2d, max_pool2d, Pair};
use crate::{DType, Error, Generator, Tensor};

#[test]
fn conv2d_values() {
    let x = Tensor::arange(16, DType::F64)
        .unwrap()
        .view(&[1, 1, 4, 4])
        .unwrap();
    let w = f64s(&[1.0, 0.0, 0.0, -1.0], &[1, 1, 2, 2]);
    let b = f64s(&[10.0], &[1]);
    // x[i][j] - x[i+1][j+1] = -5 everywhere.
    let y = conv2d(&x, &w, Some(&b), 1, 0).unwrap();
    assert_eq!(y.shape().as_slice(), vec![1, 1, 3, 3]);
    close(&y.to_vec::<f64>().unwrap(), &[5.0; 9], 1e-12);
    // Padding 1, stride 2: the top-left output sees only x[0][0] under the -1 tap.
    let y = conv2d(&x, &w, None, 2, 1).unwrap();
    assert_eq!(y.shape().as_slice(), vec![1, 1, 3, 3]);
    close(&y.to_vec::<f64>().unwrap()[..2], &[0.0, -2.0], 1e-12);
}

#[test]
fn conv2d_gradients_match_finite_differences() {
    for (stride, padding) in [
        (Pair(1, 1), Pair(0, 0)),
        (Pair(2, 1), Pair(1, 2)),
        (Pair(2, 2), Pair(1, 1)),
    ] {
        let (x, w, b) = (
            leaf(&[2, 3, 5, 4], 1),
            leaf(&[4, 3, 3, 2], 2),
            leaf(&[4], 3),
        );
        gradcheck(
            |t| conv2d(&t[0], &t[1], Some(&t[2]), stride, padding),
            &[x, w, b],
        );
    }
    // Unbatched, no bias.
    gradcheck(
        |t| conv2d(&t[0], &t[1], None, 1, 1),
        &[leaf(&[2, 3, 3], 4), leaf(&[1, 2, 2, 2], 5)],
    );
    let e = conv2d(&leaf(&[1, 2, 3, 3], 6), &leaf(&[1, 3, 2, 2], 7), None, 1, 0).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
}

/// An input shape, a weight shape, the padding, and whether there is a bias.
type Case = (&'static [usize], [usize; 4], (usize, usize), bool);

/// The direct f32 convolution (stride 1, one group: the CPU convolves f32 straight from the
/// image) against the same convolution in f64 (which builds columns): the output and the
/// gradients of the input, the weight and the bias, within f32's rounding of sums of up to
/// a few hundred terms.
#[test]
fn direct_f32_conv2d_matches_the_f64_columns() {
    let cases: [Case; 6] = [
        (&[3, 5, 9, 7], [6, 5, 3, 3], (1, 1), true),
        (&[2, 1, 28, 28], [32, 1, 3, 3], (1, 1), true),
        (&[2, 32, 14, 14], [64, 32, 3, 3], (1, 1), true),
        (&[2, 8, 6, 11], [5, 8, 2, 4], (1, 3), false),
        (&[1, 4, 7, 7], [3, 4, 1, 1], (0, 0), true),
        (&[4, 10, 10], [7, 4, 5, 5], (2, 0), true),
    ];
    for (seed, (xs, ws, padding, with_bias)) in cases.into_iter().enumerate() {
        let seed = 10 * seed as u64;
        let wide = [
            leaf(xs, seed),
            leaf(&ws, seed + 1),
            leaf(&[ws[0]], seed + 2),
        ];
        let narrow = f32_copies(&wide, true);
        let run = |t: &[Tensor]| {
            let y = conv2d(&t[0], &t[1], with_bias.then_some(&t[2]), 1, padding).unwrap();
            let probe = Tensor::randn_with(&y.shape(), DType::F64, &mut Generator::new(seed))
                .unwrap()
                .to(y.dtype())
                .unwrap();
            y.mul(&probe)
                .unwrap()
                .sum(None, false)
                .unwrap()
                .backward()
                .unwrap();
            let mut out = vec![y.to_vec::<f64>().unwrap()];
            let used = if with_bias { 3 } else { 2 };
            out.extend(
                t[..used]
                    .iter()
                    .map(|t| t.grad().unwrap().to_vec::<f64>().unwrap()),
            );
            out
        };
        let (want, got) = (run(&wide), run(&narrow));
        let what = [
            "output",
            "input gradient",
            "weight gradient",
            "bias gradient",
        ];
        for ((g, w), what) in got.iter().zip(&want).zip(what) {
            let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (e, (g, w)) in g.iter().zip(w).enumerate() {
                assert!(
                    (g - w).abs() <= 2e-5 * scale,
                    "{xs:?} by {ws:?}, padding {padding:?}: {what} element {e} is {g}, \
                     f64 gives {w}"
                );
            }
        }
    }
}

#[test]
fn max_pool2d_values_indices_and_gradients() {
    let x = f64s(
        &[1.0, 5.0, 2.0, 0.0, 3.0, 4.0, 9.0, 8.0, 7.0, 6.0, 1.0, 2.0],
        &[1, 1, 3, 4],
    );
    let y = max_pool2d(&x, 2, None).unwrap();
    assert_eq!(y.shape().as_slice(), vec![1, 1, 1, 2]);
    close(&y.to_vec::<f64>().unwrap(), &[5.0, 9.0], 0.0);
    let y = max_pool2d(&x, (2, 2), Some(Pair(1, 2))).unwrap();
    close(&y.to_vec::<f64>().unwrap(), &[5.0, 9.0, 7.0, 9.0], 0.0);
    gradcheck(|t| max_pool2d(&t[0], 2, None), &[leaf(&[2, 3, 4, 6], 8)]);
    gradcheck(
        |t| max_pool2d(&t[0], (3, 2), Some(Pair(1, 2))),
        &[leaf(&[2, 5, 5], 9)],
    );
    // Overlapping windows sharing one maximum add their gradients there.
    let x = x.requires_grad_(true).unwrap();
    max_pool2d(&x, 2, Some(Pair(1, 1)))
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let g = x.grad().unwrap().to_vec::<f64>().unwrap();
    close(
        &g,
        &[0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 1.0, 0.0, 0.0, 0.0],
        0.0,
    );
    assert!(max_pool2d(&x, 4, None).is_err());
}
