//! Tests of `cat` and `stack` and of their `out=` forms.

use crate::{DType, Error, Tensor};

fn arange_f64(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let shape: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
    Tensor::arange(n, DType::F64).unwrap().view(&shape).unwrap()
}

/// Row-major multi-index of position `k` in `shape`.
fn unravel(mut k: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = k % shape[d];
        k /= shape[d];
    }
    c
}

fn ravel(c: &[usize], shape: &[usize]) -> usize {
    c.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + i)
}

/// A [2, 3, 4] tensor seen through a permutation: strided, not contiguous.
fn permuted() -> Tensor {
    Tensor::arange(24, DType::F64)
        .unwrap()
        .mul(1.5)
        .unwrap()
        .view(&[4, 3, 2])
        .unwrap()
        .permute(&[2, 1, 0])
        .unwrap()
}

#[test]
fn cat_promotes_mixed_dtypes() {
    let a = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2]).unwrap();
    let b = Tensor::from_vec(vec![0.5f32, 1.5], &[1, 2])
        .unwrap()
        .to(DType::F16)
        .unwrap();
    let c = Tensor::cat(&[&a, &b], 0).unwrap();
    assert_eq!((c.dtype(), c.shape().to_vec()), (DType::F16, vec![3, 2]));
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![1., 2., 3., 4., 0.5, 1.5]);
    let t = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    let u = Tensor::from_vec(vec![7u8], &[1]).unwrap();
    let c = Tensor::cat(&[&t, &u], 0).unwrap();
    assert_eq!(
        (c.dtype(), c.to_vec::<i64>().unwrap()),
        (DType::U8, vec![1, 0, 7])
    );
    // A skipped [0] tensor still takes part in the promotion.
    let e = Tensor::zeros(&[0], DType::F64).unwrap();
    let c = Tensor::cat(&[&a, &e], 1).unwrap();
    assert_eq!((c.dtype(), c.shape().to_vec()), (DType::F64, vec![2, 2]));
}

#[test]
fn cat_matches_brute_force_on_strided_inputs() {
    let x = permuted(); // [2, 3, 4]
    let y = arange_f64(&[2, 3, 4]).narrow(2, 1, 2).unwrap(); // [2, 3, 2], gapped
    let c = Tensor::cat(&[&x, &y], -1).unwrap();
    assert_eq!(
        (c.shape().to_vec(), c.stride()),
        (vec![2, 3, 6], vec![18, 6, 1])
    );
    let (xv, yv, cv) = (
        x.to_vec::<f64>().unwrap(),
        y.to_vec::<f64>().unwrap(),
        c.to_vec::<f64>().unwrap(),
    );
    for (k, g) in cv.iter().enumerate() {
        let c3 = unravel(k, &[2, 3, 6]);
        let want = if c3[2] < 4 {
            xv[ravel(&c3, &[2, 3, 4])]
        } else {
            yv[ravel(&[c3[0], c3[1], c3[2] - 4], &[2, 3, 2])]
        };
        assert_eq!(*g, want, "element {k}");
    }
    // All-transposed inputs still give a contiguous result, as in PyTorch.
    let t = arange_f64(&[3, 2]).t().unwrap();
    let c = Tensor::cat(&[&t, &t], 0).unwrap();
    assert_eq!((c.shape().to_vec(), c.stride()), (vec![4, 3], vec![3, 1]));
    assert_eq!(
        c.to_vec::<f64>().unwrap(),
        vec![0., 2., 4., 1., 3., 5., 0., 2., 4., 1., 3., 5.]
    );
}

#[test]
fn cat_keeps_channels_last_when_every_input_has_it() {
    let cl = |c: usize| arange_f64(&[2, 4, 5, c]).permute(&[0, 3, 1, 2]).unwrap(); // [2, c, 4, 5]
    let (a, b) = (cl(3), cl(2));
    let c = Tensor::cat(&[&a, &b], 1).unwrap();
    assert_eq!(
        (c.shape().to_vec(), c.stride()),
        (vec![2, 5, 4, 5], vec![100, 1, 25, 5])
    );
    let (av, bv, cv) = (
        a.to_vec::<f64>().unwrap(),
        b.to_vec::<f64>().unwrap(),
        c.to_vec::<f64>().unwrap(),
    );
    for (k, g) in cv.iter().enumerate() {
        let i = unravel(k, &[2, 5, 4, 5]);
        let want = if i[1] < 3 {
            av[ravel(&i, &[2, 3, 4, 5])]
        } else {
            bv[ravel(&[i[0], i[1] - 3, i[2], i[3]], &[2, 2, 4, 5])]
        };
        assert_eq!(*g, want);
    }
    let plain = arange_f64(&[2, 2, 4, 5]);
    assert_eq!(
        Tensor::cat(&[&a, &plain], 1).unwrap().stride(),
        vec![100, 20, 5, 1]
    );
    // Stacking keeps the joined layout, as PyTorch's view of its cat does.
    let s = Tensor::stack(&[&a, &a], 0).unwrap();
    assert_eq!(
        (s.shape().to_vec(), s.stride()),
        (vec![2, 2, 3, 4, 5], vec![120, 60, 1, 15, 3])
    );
}

#[test]
fn cat_legacy_empty_and_errors() {
    let a = arange_f64(&[2, 3]);
    let e = Tensor::zeros(&[0], DType::F32).unwrap();
    let c = Tensor::cat(&[&e, &a, &e], 1).unwrap();
    assert_eq!(
        (c.shape().to_vec(), c.to_vec::<f64>().unwrap()),
        (vec![2, 3], a.to_vec::<f64>().unwrap())
    );
    let c = Tensor::cat(&[&e, &e], 5).unwrap();
    assert_eq!(c.shape().as_slice(), vec![0]);
    assert!(matches!(Tensor::cat(&[], 0), Err(Error::Argument { .. })));
    let s = Tensor::scalar(1.0, DType::F32).unwrap();
    assert!(matches!(Tensor::cat(&[&s], 0), Err(Error::Shape { .. })));
    let b = arange_f64(&[2, 4]);
    assert!(matches!(
        Tensor::cat(&[&a, &b], 0),
        Err(Error::Shape { .. })
    ));
    assert!(Tensor::cat(&[&a, &b], 1).is_ok());
    assert!(matches!(Tensor::cat(&[&a, &b], 2), Err(Error::Dim { .. })));
    let v = arange_f64(&[3]);
    assert!(matches!(
        Tensor::cat(&[&a, &v], 0),
        Err(Error::Shape { .. })
    ));
    let z = Tensor::zeros(&[2, 0], DType::F64).unwrap();
    assert!(matches!(
        Tensor::cat(&[&z, &a], 0),
        Err(Error::Shape { .. })
    ));
}

#[test]
fn stack_is_cat_of_unsqueezed() {
    let a = arange_f64(&[2, 3]);
    let b = arange_f64(&[3, 2]).t().unwrap().mul(-1.0).unwrap();
    for dim in -3i64..3 {
        let s = Tensor::stack(&[&a, &b], dim).unwrap();
        let d = if dim < 0 { dim + 3 } else { dim };
        let ua = a.unsqueeze(d).unwrap();
        let ub = b.unsqueeze(d).unwrap();
        let c = Tensor::cat(&[&ua, &ub], d).unwrap();
        assert_eq!(s.shape(), c.shape());
        assert!(s.is_contiguous());
        assert_eq!(
            s.to_vec::<f64>().unwrap(),
            c.to_vec::<f64>().unwrap(),
            "dim {dim}"
        );
    }
    assert!(matches!(
        Tensor::stack(&[&a, &b], 3),
        Err(Error::Dim { ndim: 3, .. })
    ));
    let c = arange_f64(&[2, 4]);
    assert!(matches!(
        Tensor::stack(&[&a, &c], 2),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(Tensor::stack(&[], 0), Err(Error::Argument { .. })));
    let (x, y) = (
        Tensor::scalar(1.0, DType::F32).unwrap(),
        Tensor::scalar(2, DType::I64).unwrap(),
    );
    let s = Tensor::stack(&[&x, &y], -1).unwrap();
    assert_eq!(
        (s.dtype(), s.shape().to_vec(), s.to_vec::<f32>().unwrap()),
        (DType::F32, vec![2], vec![1., 2.])
    );
    let e = Tensor::zeros(&[0], DType::F32).unwrap();
    let s = Tensor::stack(&[&e, &e], 0).unwrap();
    assert_eq!((s.shape().to_vec(), s.stride()), (vec![2, 0], vec![1, 1]));
    let s = Tensor::stack(&[&e, &e], 1).unwrap();
    assert_eq!((s.shape().to_vec(), s.stride()), (vec![0, 2], vec![2, 1]));
}

/// The `out=` forms.
mod out_forms {
    use crate::ops::out::testing::{check_dtype_refused, check_out_form};
    use crate::{DType, Error, Tensor};

    /// A `[2, 3]` f32 tensor seen transposed from `[3, 2]` storage.
    fn strided() -> Tensor {
        Tensor::arange(6, DType::F32)
            .unwrap()
            .mul(1.5)
            .unwrap()
            .view(&[3, 2])
            .unwrap()
            .t()
            .unwrap()
    }

    #[test]
    fn cat_and_stack_out_match_their_ops() {
        let a = strided();
        let b = Tensor::ones(&[2, 3], DType::I64).unwrap();
        for d in [0, 1, -1] {
            check_out_form(&Tensor::cat(&[&a, &b], d).unwrap(), 0.0, |o| {
                Tensor::cat_out(&[&a, &b], d, o)
            });
        }
        for d in [0, 1, 2, -1] {
            check_out_form(&Tensor::stack(&[&a, &b, &a], d).unwrap(), 0.0, |o| {
                Tensor::stack_out(&[&a, &b, &a], d, o)
            });
        }
        // The legacy [0]-shaped inputs are skipped.
        let e = Tensor::zeros(&[0], DType::F32).unwrap();
        check_out_form(&Tensor::cat(&[&e, &a], 1).unwrap(), 0.0, |o| {
            Tensor::cat_out(&[&e, &a], 1, o)
        });
        // 0-d inputs stack into a vector.
        let s = Tensor::scalar(2.0, DType::F32).unwrap();
        check_out_form(&Tensor::stack(&[&s, &s], 0).unwrap(), 0.0, |o| {
            Tensor::stack_out(&[&s, &s], 0, o)
        });
        // The promoted result converts to a wider dtype, not to a narrower kind.
        let wide = Tensor::zeros(&[4, 3], DType::F64).unwrap();
        Tensor::cat_out(&[&a, &b], 0, &wide).unwrap();
        assert_eq!(
            wide.to_vec::<f64>().unwrap(),
            Tensor::cat(&[&a, &b], 0).unwrap().to_vec::<f64>().unwrap()
        );
        check_dtype_refused(&[4, 3], DType::I64, |o| Tensor::cat_out(&[&a, &b], 0, o));
        check_dtype_refused(&[2, 2, 3], DType::Bool, |o| {
            Tensor::stack_out(&[&b, &b], 0, o)
        });
    }

    #[test]
    fn cat_out_resizes_to_channels_last_and_refuses_overlap() {
        let x = Tensor::arange(24, DType::F32)
            .unwrap()
            .view(&[1, 2, 3, 4])
            .unwrap()
            .permute(&[0, 2, 3, 1])
            .unwrap()
            .contiguous()
            .unwrap()
            .permute(&[0, 3, 1, 2])
            .unwrap();
        assert!(x.layout().is_channels_last_contiguous());
        let out = Tensor::zeros(&[0], DType::F32).unwrap();
        Tensor::cat_out(&[&x, &x], 0, &out).unwrap();
        let want = Tensor::cat(&[&x, &x], 0).unwrap();
        assert_eq!(out.stride(), want.stride(), "channels-last, as PyTorch");
        assert_eq!(out.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        // An output sharing memory with an input is refused (PyTorch's assert_no_overlap),
        // even at the position that input would be copied to.
        let buf = Tensor::zeros(&[4, 3], DType::F32).unwrap();
        let top = buf.narrow(0, 0, 2).unwrap();
        let r = Tensor::cat_out(&[&top, &strided()], 0, &buf);
        assert!(matches!(r, Err(Error::Overlap { .. })));
        let r = Tensor::stack_out(&[&top, &top], 0, &buf.view(&[2, 2, 3]).unwrap());
        assert!(matches!(r, Err(Error::Overlap { .. })));
        assert_eq!(buf.version(), 0);
        // Disjoint parts of one storage are fine.
        let s = Tensor::arange(8, DType::F32).unwrap();
        let (lo, mid, hi) = (
            s.narrow(0, 0, 2).unwrap(),
            s.narrow(0, 2, 2).unwrap(),
            s.narrow(0, 4, 4).unwrap(),
        );
        Tensor::cat_out(&[&lo, &mid], 0, &hi).unwrap();
        assert_eq!(
            s.to_vec::<f32>().unwrap(),
            vec![0., 1., 2., 3., 0., 1., 2., 3.]
        );
        // Grad.
        let leaf = strided().requires_grad_(true).unwrap();
        let o = Tensor::zeros(&[4, 3], DType::F32).unwrap();
        assert!(matches!(
            Tensor::cat_out(&[&leaf, &leaf], 0, &o),
            Err(Error::Autograd { .. })
        ));
    }
}
