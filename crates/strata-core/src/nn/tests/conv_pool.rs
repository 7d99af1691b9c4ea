//! conv2d and max_pool2d.

use super::{close, f64s, gradcheck, leaf};
use crate::nn::functional::{conv2d, max_pool2d, Pair};
use crate::{DType, Error, Tensor};

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
