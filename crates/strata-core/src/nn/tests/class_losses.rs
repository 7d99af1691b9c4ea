//! cross_entropy, nll_loss and mse_loss.

use super::{close, f64s, gradcheck, leaf};
use crate::nn::functional::{cross_entropy, mse_loss, nll_loss, Reduction};
use crate::{Error, Tensor};

fn targets(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

#[test]
fn cross_entropy_matches_hand_computed_values() {
    let x = f64s(&[1.0, 2.0, 3.0, 0.0, 0.0, 0.0], &[2, 3]);
    let t = targets(&[2, 0], &[2]);
    let lse0 = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
    let l = [lse0 - 3.0, 3f64.ln()];
    let none = cross_entropy(&x, &t, Reduction::None).unwrap();
    close(&none.to_vec::<f64>().unwrap(), &l, 1e-12);
    let sum = cross_entropy(&x, &t, Reduction::Sum).unwrap();
    close(&[sum.item::<f64>().unwrap()], &[l[0] + l[1]], 1e-12);
    let mean = cross_entropy(&x, &t, Reduction::Mean).unwrap();
    close(
        &[mean.item::<f64>().unwrap()],
        &[(l[0] + l[1]) / 2.0],
        1e-12,
    );
    // One sample given as [C] with a 0-d target.
    let one = cross_entropy(
        &x.select(0, 0).unwrap(),
        &targets(&[2], &[]),
        Reduction::None,
    );
    assert_eq!(
        one.as_ref().unwrap().shape().as_slice(),
        Vec::<usize>::new()
    );
    close(&one.unwrap().to_vec::<f64>().unwrap(), &[l[0]], 1e-12);
}

#[test]
fn class_loss_gradients_match_finite_differences() {
    for r in [Reduction::Mean, Reduction::Sum, Reduction::None] {
        let t = targets(&[1, 0, 3], &[3]);
        gradcheck(|xs| cross_entropy(&xs[0], &t, r), &[leaf(&[3, 4], 1)]);
        gradcheck(|xs| nll_loss(&xs[0], &t, r), &[leaf(&[3, 4], 2)]);
        // Spatial targets: [N, C, d1, d2] with [N, d1, d2].
        let ts = targets(&[0, 2, 1, 1, 2, 0, 0, 1], &[2, 2, 2]);
        gradcheck(
            |xs| cross_entropy(&xs[0], &ts, r),
            &[leaf(&[2, 3, 2, 2], 3)],
        );
        gradcheck(|xs| nll_loss(&xs[0], &ts, r), &[leaf(&[2, 3, 2, 2], 4)]);
        gradcheck(
            |xs| mse_loss(&xs[0], &xs[1], r),
            &[leaf(&[2, 3], 5), leaf(&[2, 3], 6)],
        );
    }
    // Unbatched.
    let t = targets(&[2], &[]);
    gradcheck(
        |xs| cross_entropy(&xs[0], &t, Reduction::Mean),
        &[leaf(&[4], 7)],
    );
}

#[test]
fn nll_and_mse_values() {
    let lp = f64s(&[-0.5, -1.0, -2.0, -0.1], &[2, 2]);
    let t = targets(&[1, 0], &[2]);
    let v = nll_loss(&lp, &t, Reduction::Mean)
        .unwrap()
        .item::<f64>()
        .unwrap();
    close(&[v], &[1.5], 1e-12);
    let a = f64s(&[1.0, 2.0], &[2]);
    let b = f64s(&[0.0, 4.0], &[2]);
    let v = mse_loss(&a, &b, Reduction::Sum)
        .unwrap()
        .item::<f64>()
        .unwrap();
    close(&[v], &[5.0], 1e-12);
}

#[test]
fn bad_targets_are_clear_errors() {
    let x = f64s(&[0.0; 6], &[2, 3]);
    let e = cross_entropy(&x, &targets(&[0, 3], &[2]), Reduction::Mean).unwrap_err();
    assert!(
        matches!(e, Error::Argument { .. }) && e.to_string().contains("class index 3"),
        "{e}"
    );
    let e = nll_loss(&x, &targets(&[-1, 0], &[2]), Reduction::Mean).unwrap_err();
    assert!(e.to_string().contains("-1"), "{e}");
    let e = cross_entropy(&x, &targets(&[0, 1, 2], &[3]), Reduction::Mean).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    let float_t = f64s(&[0.0, 1.0], &[2]);
    let e = cross_entropy(&x, &float_t, Reduction::Mean).unwrap_err();
    assert!(matches!(e, Error::DType { .. }), "{e}");
    let int_x = targets(&[0; 6], &[2, 3]);
    assert!(cross_entropy(&int_x, &targets(&[0, 1], &[2]), Reduction::Mean).is_err());
    assert!("avg".parse::<Reduction>().is_err());
}
