//! linear, layer_norm, embedding and dropout.

use super::{close, f64s, gradcheck, leaf};
use crate::nn::functional::{dropout, dropout_with, embedding, layer_norm, linear};
use crate::{DType, Error, Generator, Tensor};

#[test]
fn linear_values_and_gradients() {
    let x = f64s(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let w = f64s(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
    let b = f64s(&[0.5, -0.5, 0.0], &[3]);
    let y = linear(&x, &w, Some(&b)).unwrap();
    assert_eq!(y.shape().as_slice(), vec![2, 3]);
    close(
        &y.to_vec::<f64>().unwrap(),
        &[1.5, 1.5, 3.0, 3.5, 3.5, 7.0],
        1e-12,
    );
    let (x, w, b) = (leaf(&[2, 3, 4], 1), leaf(&[5, 4], 2), leaf(&[5], 3));
    gradcheck(
        |t| linear(&t[0], &t[1], Some(&t[2])),
        &[x.clone(), w.clone(), b],
    );
    gradcheck(|t| linear(&t[0], &t[1], None), &[x, w]);
    let e = linear(&f64s(&[0.0; 3], &[1, 3]), &f64s(&[0.0; 4], &[2, 2]), None).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
}

#[test]
fn layer_norm_values_and_gradients() {
    let x = f64s(&[1.0, 2.0, 3.0, -1.0, 0.0, 1.0], &[2, 3]);
    let w = f64s(&[1.0, 2.0, 3.0], &[3]);
    let b = f64s(&[0.0, 0.0, 1.0], &[3]);
    let y = layer_norm(&x, &[3], Some(&w), Some(&b), 0.0).unwrap();
    let s = (1.5f64).sqrt(); // 1 / std of [-1, 0, 1]
    close(
        &y.to_vec::<f64>().unwrap(),
        &[-s, 0.0, 1.0 + 3.0 * s, -s, 0.0, 1.0 + 3.0 * s],
        1e-12,
    );
    let (x, w, b) = (leaf(&[2, 3, 4], 4), leaf(&[3, 4], 5), leaf(&[3, 4], 6));
    gradcheck(
        |t| layer_norm(&t[0], &[3, 4], Some(&t[1]), Some(&t[2]), 1e-5),
        &[x.clone(), w, b],
    );
    gradcheck(|t| layer_norm(&t[0], &[4], None, None, 1e-5), &[x]);
    let e = layer_norm(&f64s(&[0.0; 6], &[2, 3]), &[2], None, None, 1e-5).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
}

#[test]
fn embedding_values_gradients_and_errors() {
    let w = f64s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]);
    let idx = Tensor::from_vec(vec![2i64, 0, 2, 1], &[2, 2]).unwrap();
    let e = embedding(&idx, &w).unwrap();
    assert_eq!(e.shape().as_slice(), vec![2, 2, 2]);
    close(
        &e.to_vec::<f64>().unwrap(),
        &[4.0, 5.0, 0.0, 1.0, 4.0, 5.0, 2.0, 3.0],
        0.0,
    );
    gradcheck(|t| embedding(&idx, &t[0]), &[leaf(&[3, 2], 7)]);
    let bad = Tensor::from_vec(vec![3i64], &[1]).unwrap();
    let e = embedding(&bad, &w).unwrap_err();
    assert!(
        matches!(e, Error::Argument { .. }) && e.to_string().contains("3 rows"),
        "{e}"
    );
}

#[test]
fn dropout_masks_scales_and_redraws_from_a_restored_generator() {
    let x = leaf(&[4, 50], 8);
    let mut g = Generator::new(5);
    let state = g.get_state();
    let y = dropout_with(&x, 0.25, true, &mut g).unwrap();
    let (xv, yv) = (x.to_vec::<f64>().unwrap(), y.to_vec::<f64>().unwrap());
    let kept = xv
        .iter()
        .zip(&yv)
        .filter(|(a, b)| **b != 0.0 && (**b - **a / 0.75).abs() < 1e-12);
    let dropped = yv.iter().filter(|v| **v == 0.0).count();
    assert_eq!(kept.count() + dropped, xv.len());
    assert!(
        dropped > 20 && dropped < 80,
        "{dropped} of 200 dropped at p = 0.25"
    );
    y.sum(None, false).unwrap().backward().unwrap();
    let gv = x.grad().unwrap().to_vec::<f64>().unwrap();
    for (gi, yi) in gv.iter().zip(&yv) {
        assert_eq!(*gi, if *yi == 0.0 { 0.0 } else { 1.0 / 0.75 });
    }
    g.set_state(&state).unwrap();
    let again = dropout_with(&x.detach().unwrap(), 0.25, true, &mut g).unwrap();
    assert_eq!(again.to_vec::<f64>().unwrap(), yv);
    // p = 0, or evaluation: the input itself; p = 1: zeros.
    assert!(dropout(&x, 0.0, true).unwrap().is_same(&x));
    assert!(dropout(&x, 0.5, false).unwrap().is_same(&x));
    let z = dropout(&x, 1.0, true).unwrap();
    assert!(z.to_vec::<f64>().unwrap().iter().all(|v| *v == 0.0));
    assert!(dropout(&x, 1.5, true).is_err());
    assert!(dropout(&Tensor::ones(&[2], DType::I64).unwrap(), 0.5, true).is_err());
}
