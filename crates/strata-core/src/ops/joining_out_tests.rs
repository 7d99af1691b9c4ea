//! Tests of `joining_out.rs`.

use super::*;
use crate::ops::out::testing::{check_dtype_refused, check_out_form};

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

fn ids(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

#[test]
fn gathering_out_forms_match_their_ops() {
    let x = strided();
    let i = ids(&[1, 0, 1, 0, 0, 1], &[2, 3]);
    let i32s = i.to(DType::I32).unwrap();
    check_out_form(&x.gather(0, &i).unwrap(), 0.0, |o| x.gather_out(0, &i, o));
    check_out_form(&x.gather(0, &i32s).unwrap(), 0.0, |o| {
        x.gather_out(0, &i32s, o)
    });
    let j = ids(&[2, 0, 1, 1], &[2, 2]);
    check_out_form(&x.gather(1, &j).unwrap(), 0.0, |o| x.gather_out(1, &j, o));
    let src = Tensor::ones(&[2, 3], DType::F32).unwrap();
    check_out_form(&x.scatter_add(0, &i, &src).unwrap(), 0.0, |o| {
        x.scatter_add_out(0, &i, &src, o)
    });
    check_out_form(&x.scatter_add(1, &j, &src).unwrap(), 0.0, |o| {
        x.scatter_add_out(1, &j, &src, o)
    });
    let k = ids(&[2, 0], &[2]);
    check_out_form(&x.index_select(1, &k).unwrap(), 0.0, |o| {
        x.index_select_out(1, &k, o)
    });
    // The indexed ops take self's dtype exactly.
    check_dtype_refused(&[2, 3], DType::F64, |o| x.gather_out(0, &i, o));
    check_dtype_refused(&[2, 3], DType::F64, |o| x.scatter_add_out(0, &i, &src, o));
    // Bad indices are refused before anything is written.
    let out = Tensor::full(&[2, 3], 4.0, DType::F32).unwrap();
    let bad = ids(&[0, 2, 0, 0, 0, 0], &[2, 3]);
    assert!(matches!(
        x.gather_out(0, &bad, &out),
        Err(Error::Index { .. })
    ));
    assert!(matches!(
        x.scatter_add_out(0, &bad, &src, &out),
        Err(Error::Index { .. })
    ));
    assert_eq!(
        (out.version(), out.to_vec::<f32>().unwrap()),
        (0, vec![4.0; 6])
    );
}

#[test]
fn scatter_add_out_may_write_into_self_but_not_into_its_other_inputs() {
    let x = strided().contiguous().unwrap().deep_clone().unwrap();
    let i = ids(&[1, 0, 1, 0, 0, 1], &[2, 3]);
    let src = Tensor::ones(&[2, 3], DType::F32).unwrap();
    let want = x.scatter_add(0, &i, &src).unwrap();
    x.scatter_add_out(0, &i, &src, &x).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    assert_eq!(x.version(), 1);
    // As PyTorch: gather into its input, or scatter_add into src, is refused.
    let y = strided().contiguous().unwrap().deep_clone().unwrap();
    assert!(matches!(
        y.gather_out(0, &i, &y),
        Err(Error::Overlap { .. })
    ));
    assert!(matches!(
        x.scatter_add_out(0, &i, &y, &y),
        Err(Error::Overlap { .. })
    ));
    assert_eq!(y.version(), 0);
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
