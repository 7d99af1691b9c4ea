//! Tests of `ops::reduce::out`: the reductions written into a given tensor.

use crate::ops::out::testing::{check_dtype_refused, check_out_form_with_scratch, peak_during};

/// The working memory a reduction into `want` may use: its accumulators (at most three
/// buffers of 8 bytes per result) and the positions along the reduced dimension.
fn scratch(want: &Tensor, reduced: usize) -> usize {
    3 * 8 * want.numel().max(1) + 8 * reduced
}

/// `check_out_form` for a reduction over at most `reduced` positions.
fn check_out_form(want: &Tensor, tol: f64, run: impl Fn(&Tensor) -> crate::Result<Tensor>) {
    check_out_form_with_scratch(want, tol, scratch(want, 64), run);
}
use crate::Error;
use crate::{DType, Tensor};

/// A `[3, 4]` f32 tensor seen transposed (`[4, 3]`, not contiguous), mixed signs.
fn strided() -> Tensor {
    Tensor::arange(12, DType::F32)
        .unwrap()
        .mul(0.75)
        .unwrap()
        .sub(4.0)
        .unwrap()
        .view(&[3, 4])
        .unwrap()
        .t()
        .unwrap()
}

#[test]
fn reductions_into_out_match_the_out_of_place_ops() {
    let x = strided();
    let all: Option<&[i64]> = None;
    for (dims, keepdim) in [
        (Some(&[1i64][..]), false),
        (Some(&[0][..]), true),
        (all, false),
    ] {
        check_out_form(&x.sum(dims, keepdim).unwrap(), 0.0, |o| {
            x.sum_out(dims, keepdim, o)
        });
        check_out_form(&x.mean(dims, keepdim).unwrap(), 0.0, |o| {
            x.mean_out(dims, keepdim, o)
        });
        check_out_form(&x.prod(dims, keepdim).unwrap(), 0.0, |o| {
            x.prod_out(dims, keepdim, o)
        });
        check_out_form(&x.amax(dims, keepdim).unwrap(), 0.0, |o| {
            x.amax_out(dims, keepdim, o)
        });
        check_out_form(&x.amin(dims, keepdim).unwrap(), 0.0, |o| {
            x.amin_out(dims, keepdim, o)
        });
        check_out_form(&x.logsumexp(dims, keepdim).unwrap(), 0.0, |o| {
            x.logsumexp_out(dims, keepdim, o)
        });
        check_out_form(&x.var(dims, 1.0, keepdim).unwrap(), 0.0, |o| {
            x.var_out(dims, 1.0, keepdim, o)
        });
        check_out_form(&x.std(dims, 0.0, keepdim).unwrap(), 0.0, |o| {
            x.std_out(dims, 0.0, keepdim, o)
        });
        for p in [2.0, 1.0, 0.0, 3.0, f64::INFINITY, f64::NEG_INFINITY] {
            check_out_form(&x.norm(p, dims, keepdim).unwrap(), 0.0, |o| {
                x.norm_out(p, dims, keepdim, o)
            });
        }
    }
    let i = Tensor::arange(12, DType::I32)
        .unwrap()
        .view(&[3, 4])
        .unwrap();
    check_out_form(&i.sum(Some(&[0]), false).unwrap(), 0.0, |o| {
        i.sum_out(Some(&[0]), false, o)
    });
    check_out_form(&i.logsumexp(None, false).unwrap(), 0.0, |o| {
        i.logsumexp_out(None, false, o)
    });
    for d in [0, 1, -1] {
        check_out_form(&x.cumsum(d).unwrap(), 0.0, |o| x.cumsum_out(d, o));
        check_out_form(&i.cumsum(d).unwrap(), 0.0, |o| i.cumsum_out(d, o));
    }
}

#[test]
fn reductions_match_direct_computation() {
    // The rewritten folds (two-pass variance, the norms, logsumexp, the running sums) against
    // plain loops over the rows of a [4, 3] tensor.
    let x = strided();
    let rows: Vec<Vec<f64>> = (0..4)
        .map(|r| x.select(0, r).unwrap().to_vec::<f64>().unwrap())
        .collect();
    let close = |got: Vec<f64>, want: Vec<f64>| {
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                "{got:?} vs {want:?}"
            );
        }
    };
    let mean = |r: &[f64]| r.iter().sum::<f64>() / r.len() as f64;
    let var = |r: &[f64]| {
        let m = mean(r);
        r.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (r.len() as f64 - 1.0)
    };
    let one = Some(&[1i64][..]);
    close(
        x.var(one, 1.0, false).unwrap().to_vec().unwrap(),
        rows.iter().map(|r| var(r)).collect(),
    );
    close(
        x.std(one, 1.0, false).unwrap().to_vec().unwrap(),
        rows.iter().map(|r| var(r).sqrt()).collect(),
    );
    close(
        x.norm(3.0, one, false).unwrap().to_vec().unwrap(),
        rows.iter()
            .map(|r| r.iter().map(|v| v.abs().powi(3)).sum::<f64>().cbrt())
            .collect(),
    );
    close(
        x.norm(0.0, one, false).unwrap().to_vec().unwrap(),
        rows.iter()
            .map(|r| r.iter().filter(|v| **v != 0.0).count() as f64)
            .collect(),
    );
    close(
        x.logsumexp(one, false).unwrap().to_vec().unwrap(),
        rows.iter()
            .map(|r| r.iter().map(|v| v.exp()).sum::<f64>().ln())
            .collect(),
    );
    let running: Vec<f64> = rows
        .iter()
        .flat_map(|r| {
            r.iter()
                .scan(0.0, |s, v| {
                    *s += v;
                    Some(*s)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    close(x.cumsum(1).unwrap().to_vec().unwrap(), running);
}

#[test]
fn sum_prod_and_cumsum_compute_in_the_output_dtype() {
    // As PyTorch: each element is converted to the output's dtype before it is added.
    let f = Tensor::from_vec(vec![1.5f32, 1.7], &[2]).unwrap();
    let i64_out = Tensor::zeros(&(), DType::I64).unwrap();
    f.sum_out(None, false, &i64_out).unwrap();
    assert_eq!(i64_out.item::<i64>().unwrap(), 2);
    f.prod_out(None, false, &i64_out).unwrap();
    assert_eq!(i64_out.item::<i64>().unwrap(), 1);
    // Integers wrap in a narrower output.
    let big = Tensor::from_vec(vec![i32::MAX as i64, 1], &[2]).unwrap();
    let i32_out = Tensor::zeros(&(), DType::I32).unwrap();
    big.sum_out(None, false, &i32_out).unwrap();
    assert_eq!(i32_out.item::<i64>().unwrap(), i32::MIN as i64);
    // A wider output keeps what f32 would round away.
    let x = Tensor::from_vec(vec![16777216.0f32, 1.0, 1.0], &[3]).unwrap();
    let wide = Tensor::zeros(&[3], DType::F64).unwrap();
    x.cumsum_out(0, &wide).unwrap();
    assert_eq!(
        wide.to_vec::<f64>().unwrap(),
        vec![16777216.0, 16777217.0, 16777218.0]
    );
    let total = Tensor::zeros(&(), DType::F64).unwrap();
    x.sum_out(None, false, &total).unwrap();
    assert_eq!(total.item::<f64>().unwrap(), 16777218.0);
    x.mean_out(None, false, &total).unwrap();
    assert_eq!(total.item::<f64>().unwrap(), 16777218.0 / 3.0);
    let ints = Tensor::zeros(&[3], DType::I32).unwrap();
    big.cumsum_out(0, &ints.narrow(0, 0, 2).unwrap()).unwrap();
    assert_eq!(
        ints.to_vec::<i64>().unwrap(),
        vec![i32::MAX as i64, i32::MIN as i64, 0]
    );
    // Bool outputs hold "any non-zero".
    let b = Tensor::zeros(&[2], DType::Bool).unwrap();
    Tensor::from_vec(vec![0i64, 0, 0, 2], &[2, 2])
        .unwrap()
        .sum_out(Some(&[1]), false, &b)
        .unwrap();
    assert_eq!(b.to_vec::<bool>().unwrap(), vec![false, true]);
}

#[test]
fn reduction_out_dtype_rules_follow_pytorch() {
    let x = strided();
    let one = Some(&[1i64][..]);
    // The result's dtype exactly.
    check_dtype_refused(&[4], DType::F64, |o| x.amax_out(one, false, o));
    check_dtype_refused(&[4], DType::I64, |o| x.amin_out(one, false, o));
    check_dtype_refused(&[4], DType::F64, |o| x.norm_out(2.0, one, false, o));
    check_dtype_refused(&[4], DType::I32, |o| x.argmax_out(Some(1), false, o));
    check_dtype_refused(&[4], DType::F32, |o| x.argmin_out(Some(1), false, o));
    // A floating output of any width.
    check_dtype_refused(&[4], DType::I64, |o| x.mean_out(one, false, o));
    check_dtype_refused(&[4], DType::I64, |o| x.var_out(one, 1.0, false, o));
    check_dtype_refused(&[4], DType::I64, |o| x.std_out(one, 1.0, false, o));
    check_dtype_refused(&[4], DType::I64, |o| x.logsumexp_out(one, false, o));
    let half = Tensor::zeros(&[4], DType::F16).unwrap();
    x.std_out(one, 1.0, false, &half).unwrap();
    let want = x.std(one, 1.0, false).unwrap().to(DType::F16).unwrap();
    assert_eq!(half.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    // Integer inputs have no mean.
    let i = Tensor::arange(4, DType::I64).unwrap();
    let f = Tensor::zeros(&(), DType::F32).unwrap();
    assert!(matches!(
        i.mean_out(None, false, &f),
        Err(Error::DType { .. })
    ));
    assert_eq!(f.version(), 0);
}

#[test]
fn max_and_min_along_a_dim_write_both_outputs() {
    let x = strided();
    for keepdim in [false, true] {
        for (max, d) in [(true, 1), (false, 0)] {
            let (v, i) = if max {
                x.max_dim(d, keepdim).unwrap()
            } else {
                x.min_dim(d, keepdim).unwrap()
            };
            let run = |vo: &Tensor, io: &Tensor| {
                if max {
                    x.max_dim_out(d, keepdim, vo, io)
                } else {
                    x.min_dim_out(d, keepdim, vo, io)
                }
            };
            let vo = Tensor::full(&v.shape(), 9.0, DType::F32).unwrap();
            let io = Tensor::full(&i.shape(), 9, DType::I64).unwrap();
            let (r, peak) = peak_during(|| run(&vo, &io));
            let (rv, ri) = r.unwrap();
            assert!(rv.is_same(&vo) && ri.is_same(&io));
            assert!(peak <= scratch(&v, 64), "{peak}");
            assert_eq!((vo.version(), io.version()), (1, 1));
            assert_eq!(vo.to_vec::<f32>().unwrap(), v.to_vec::<f32>().unwrap());
            assert_eq!(io.to_vec::<i64>().unwrap(), i.to_vec::<i64>().unwrap());
            // Empty outputs are resized to the result's shape (PyTorch: [4] or [4, 1]).
            let (ve, ie) = (
                Tensor::zeros(&[0], DType::F32).unwrap(),
                Tensor::zeros(&[0], DType::I64).unwrap(),
            );
            run(&ve, &ie).unwrap();
            assert_eq!((ve.shape(), ie.shape()), (v.shape(), i.shape()));
            assert_eq!(ie.to_vec::<i64>().unwrap(), i.to_vec::<i64>().unwrap());
        }
    }
    // Dtypes exactly, outputs apart, and nothing written on error.
    let (vo, io) = (
        Tensor::zeros(&[4], DType::F32).unwrap(),
        Tensor::zeros(&[4], DType::I64).unwrap(),
    );
    let wrong_v = Tensor::zeros(&[4], DType::F64).unwrap();
    let wrong_i = Tensor::zeros(&[4], DType::I32).unwrap();
    assert!(matches!(
        x.max_dim_out(1, false, &wrong_v, &io),
        Err(Error::DType { .. })
    ));
    assert!(matches!(
        x.max_dim_out(1, false, &vo, &wrong_i),
        Err(Error::DType { .. })
    ));
    let shared = Tensor::zeros(&[8], DType::I64).unwrap();
    let (a, b) = (
        shared.narrow(0, 0, 4).unwrap(),
        shared.narrow(0, 4, 4).unwrap(),
    );
    let ix = Tensor::arange(12, DType::I64)
        .unwrap()
        .view(&[4, 3])
        .unwrap();
    assert!(matches!(
        ix.max_dim_out(1, false, &a, &b),
        Err(Error::Overlap { .. })
    ));
    assert_eq!((vo.version(), io.version(), shared.version()), (0, 0, 0));
    assert_eq!(io.to_vec::<i64>().unwrap(), vec![0; 4]);
    // A 0-d input: the value itself at index 0.
    let s = Tensor::scalar(2.5, DType::F32).unwrap();
    let (sv, si) = (
        Tensor::zeros(&[5], DType::F32).unwrap(),
        Tensor::zeros(&[5], DType::I64).unwrap(),
    );
    s.min_dim_out(0, true, &sv, &si).unwrap();
    assert_eq!((sv.shape().to_vec(), si.shape().to_vec()), (vec![], vec![]));
    assert_eq!(
        (sv.item::<f32>().unwrap(), si.item::<i64>().unwrap()),
        (2.5, 0)
    );
}

#[test]
fn argmax_and_argmin_into_out() {
    // Over everything, a strided input is flattened with a copy first (as PyTorch's
    // reshape(-1)); a contiguous one is read in place.
    let (x, c) = (strided(), strided().contiguous().unwrap());
    for (dim, keepdim) in [
        (Some(0), false),
        (Some(1), true),
        (None, false),
        (None, true),
    ] {
        let x = if dim.is_some() { &x } else { &c };
        check_out_form(&x.argmax(dim, keepdim).unwrap(), 0.0, |o| {
            x.argmax_out(dim, keepdim, o)
        });
        check_out_form(&x.argmin(dim, keepdim).unwrap(), 0.0, |o| {
            x.argmin_out(dim, keepdim, o)
        });
    }
    let o = Tensor::zeros(&(), DType::I64).unwrap();
    strided().argmax_out(None, false, &o).unwrap();
    assert_eq!(
        o.item::<i64>().unwrap(),
        strided()
            .argmax(None, false)
            .unwrap()
            .item::<i64>()
            .unwrap()
    );
    let x = strided();
    let o = Tensor::zeros(&[0], DType::I64).unwrap();
    x.argmax_out(None, true, &o).unwrap();
    assert_eq!(
        o.shape().as_slice(),
        vec![1, 1],
        "over everything with keepdim: all ones"
    );
}

#[test]
fn reduction_outs_refuse_overlap_and_grad_but_cumsum_may_write_its_input() {
    let x = Tensor::arange(6, DType::F32)
        .unwrap()
        .view(&[2, 3])
        .unwrap();
    // A row of x itself as the output of a reduction over rows overlaps it elsewhere.
    let row = x.select(0, 1).unwrap();
    assert!(matches!(
        x.sum_out(Some(&[0]), false, &row),
        Err(Error::Overlap { .. })
    ));
    assert!(matches!(
        x.max_dim_out(
            1,
            false,
            &x.view(&[6]).unwrap().narrow(0, 1, 2).unwrap(),
            &Tensor::zeros(&[2], DType::I64).unwrap()
        ),
        Err(Error::Overlap { .. })
    ));
    assert_eq!(x.version(), 0);
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![0., 1., 2., 3., 4., 5.]);
    // cumsum into itself, as PyTorch allows.
    let y = x.deep_clone().unwrap();
    y.cumsum_out(0, &y).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0., 1., 2., 3., 5., 7.]);
    assert_eq!(y.version(), 1);
    // An expanded output is refused.
    let e = Tensor::zeros(&[1], DType::F32)
        .unwrap()
        .expand(&[3])
        .unwrap();
    assert!(matches!(
        x.sum_out(Some(&[0]), false, &e),
        Err(Error::Overlap { .. })
    ));
    // Grad.
    let leaf = x.deep_clone().unwrap().requires_grad_(true).unwrap();
    let out = Tensor::zeros(&[3], DType::F32).unwrap();
    assert!(matches!(
        leaf.sum_out(Some(&[0]), false, &out),
        Err(Error::Autograd { .. })
    ));
    assert!(matches!(
        leaf.cumsum_out(0, &x),
        Err(Error::Autograd { .. })
    ));
    assert_eq!(out.version(), 0);
}
