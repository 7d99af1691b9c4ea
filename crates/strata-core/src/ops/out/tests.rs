//! Tests of the element-wise `out=` forms (binary, comparisons, unary, `where`, `addcmul`,
//! `masked_fill`) and of the checks they share.

use super::testing::{check_dtype_refused, check_out_form, peak_during};
use crate::mode::no_grad;
use crate::{DType, Error, Scalar, Tensor};

/// A `[2, 3]` tensor of mixed-sign values of `dtype`.
fn sample(dtype: DType) -> Tensor {
    Tensor::from_vec(vec![-1.5f64, 0.0, 0.25, 2.0, -3.0, 4.5], &[2, 3])
        .unwrap()
        .to(dtype)
        .unwrap()
}

fn row() -> Tensor {
    Tensor::from_vec(vec![0.5f32, -1.0, 3.0], &[3]).unwrap()
}

#[test]
fn binary_out_forms_match_their_ops() {
    let (a, b) = (sample(DType::F32), row());
    check_out_form(&a.pow(&b).unwrap(), 0.0, |o| a.pow_out(&b, o));
    check_out_form(&a.pow(2i64).unwrap(), 0.0, |o| a.pow_out(2i64, o));
    check_out_form(&a.maximum(&b).unwrap(), 0.0, |o| a.maximum_out(&b, o));
    check_out_form(&a.minimum(&b).unwrap(), 0.0, |o| a.minimum_out(&b, o));
    type Cmp = fn(&Tensor, &Tensor) -> crate::Result<Tensor>;
    type CmpOut = fn(&Tensor, &Tensor, &Tensor) -> crate::Result<Tensor>;
    let cases: [(Cmp, CmpOut); 6] = [
        (|a, b| a.eq(b), |a, b, o| a.eq_out(b, o)),
        (|a, b| a.ne(b), |a, b, o| a.ne_out(b, o)),
        (|a, b| a.lt(b), |a, b, o| a.lt_out(b, o)),
        (|a, b| a.le(b), |a, b, o| a.le_out(b, o)),
        (|a, b| a.gt(b), |a, b, o| a.gt_out(b, o)),
        (|a, b| a.ge(b), |a, b, o| a.ge_out(b, o)),
    ];
    for (op, op_out) in cases {
        check_out_form(&op(&a, &b).unwrap(), 0.0, |o| op_out(&a, &b, o));
    }
}

#[test]
fn comparisons_write_any_dtype_and_promotions_must_fit() {
    let (a, b) = (sample(DType::F32), row());
    let want = a.gt(&b).unwrap().to_vec::<f64>().unwrap();
    for dtype in [DType::F32, DType::I64, DType::U8, DType::Bool] {
        let out = Tensor::full(&[2, 3], 9, dtype).unwrap();
        a.gt_out(&b, &out).unwrap();
        assert_eq!(out.to_vec::<f64>().unwrap(), want, "{dtype}");
    }
    // A float result cannot be stored in an integer tensor (PyTorch: "result type Float
    // can't be cast to the desired output type Long"); widening is fine.
    check_dtype_refused(&[2, 3], DType::I64, |o| a.pow_out(&b, o));
    check_dtype_refused(&[2, 3], DType::I64, |o| a.maximum_out(&b, o));
    let wide = Tensor::zeros(&[2, 3], DType::F64).unwrap();
    a.minimum_out(&b, &wide).unwrap();
    assert_eq!(
        wide.to_vec::<f64>().unwrap(),
        a.minimum(&b).unwrap().to_vec::<f64>().unwrap()
    );
}

#[test]
fn unary_out_forms_match_their_ops() {
    type Un = fn(&Tensor) -> crate::Result<Tensor>;
    type UnOut = fn(&Tensor, &Tensor) -> crate::Result<Tensor>;
    let cases: [(Un, UnOut); 13] = [
        (|x| x.neg(), |x, o| x.neg_out(o)),
        (|x| x.abs(), |x, o| x.abs_out(o)),
        (|x| x.relu(), |x, o| x.relu_out(o)),
        (|x| x.exp(), |x, o| x.exp_out(o)),
        (|x| x.log(), |x, o| x.log_out(o)),
        (|x| x.sqrt(), |x, o| x.sqrt_out(o)),
        (|x| x.rsqrt(), |x, o| x.rsqrt_out(o)),
        (|x| x.sin(), |x, o| x.sin_out(o)),
        (|x| x.cos(), |x, o| x.cos_out(o)),
        (|x| x.tanh(), |x, o| x.tanh_out(o)),
        (|x| x.sigmoid(), |x, o| x.sigmoid_out(o)),
        (|x| x.gelu(), |x, o| x.gelu_out(o)),
        (|x| x.silu(), |x, o| x.silu_out(o)),
    ];
    for dtype in [DType::F32, DType::F64] {
        let x = sample(dtype);
        for (op, op_out) in cases {
            check_out_form(&op(&x).unwrap(), 0.0, |o| op_out(&x, o));
        }
        let (lo, hi) = (Some(Scalar::Float(-1.0)), Some(Scalar::Float(2.0)));
        check_out_form(&x.clamp(lo, hi).unwrap(), 0.0, |o| x.clamp_out(lo, hi, o));
    }
    // Integer inputs of the floating functions give f32, computed as the op computes them.
    let i = Tensor::arange(6, DType::I64)
        .unwrap()
        .view(&[2, 3])
        .unwrap();
    check_out_form(&i.sqrt().unwrap(), 0.0, |o| i.sqrt_out(o));
    check_out_form(&i.neg().unwrap(), 0.0, |o| i.neg_out(o));
}

#[test]
fn unary_out_dtype_rules_follow_pytorch() {
    let x = sample(DType::F32);
    // The floating functions write any floating dtype: computed in f32, stored as f64.
    let wide = Tensor::zeros(&[2, 3], DType::F64).unwrap();
    x.exp_out(&wide).unwrap();
    assert_eq!(
        wide.to_vec::<f64>().unwrap(),
        x.exp()
            .unwrap()
            .to(DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    );
    check_dtype_refused(&[2, 3], DType::I64, |o| x.exp_out(o));
    check_dtype_refused(&[2, 3], DType::I64, |o| x.sigmoid_out(o));
    // The dtype-keeping ops and the activations gelu/silu take exactly the result's dtype
    // (PyTorch: "Found dtype Double but expected Float").
    check_dtype_refused(&[2, 3], DType::F64, |o| x.neg_out(o));
    check_dtype_refused(&[2, 3], DType::F64, |o| x.abs_out(o));
    check_dtype_refused(&[2, 3], DType::F64, |o| x.relu_out(o));
    check_dtype_refused(&[2, 3], DType::F64, |o| x.gelu_out(o));
    check_dtype_refused(&[2, 3], DType::F64, |o| x.silu_out(o));
    let i = Tensor::arange(6, DType::I64)
        .unwrap()
        .view(&[2, 3])
        .unwrap();
    let (lo, hi) = (Some(Scalar::Int(1)), Some(Scalar::Int(3)));
    check_dtype_refused(&[2, 3], DType::F32, |o| i.clamp_out(lo, hi, o));
    // A float bound makes the result floating: an integer output is refused.
    let flo = Some(Scalar::Float(1.5));
    check_dtype_refused(&[2, 3], DType::I64, |o| i.clamp_out(flo, hi, o));
    check_out_form(&i.clamp(flo, hi).unwrap(), 0.0, |o| i.clamp_out(flo, hi, o));
}

#[test]
fn where_addcmul_and_masked_fill_out_forms() {
    let (a, b) = (sample(DType::F32), row());
    let c = a.gt(&b).unwrap();
    check_out_form(&Tensor::where_cond(&c, &a, &b).unwrap(), 0.0, |o| {
        Tensor::where_out(&c, &a, &b, o)
    });
    check_out_form(&a.addcmul(&a, &b, 0.5).unwrap(), 0.0, |o| {
        a.addcmul_out(&a, &b, 0.5, o)
    });
    check_out_form(&a.masked_fill(&c, -7.0).unwrap(), 0.0, |o| {
        a.masked_fill_out(&c, -7.0, o)
    });
    // The mask broadcasts against self: the result has the broadcast shape.
    let m = Tensor::from_vec(vec![true, false], &[2, 1]).unwrap();
    check_out_form(&b.masked_fill(&m, 1.0).unwrap(), 0.0, |o| {
        b.masked_fill_out(&m, 1.0, o)
    });
    // where and masked_fill take exactly the result's dtype; addcmul converts.
    check_dtype_refused(&[2, 3], DType::F64, |o| Tensor::where_out(&c, &a, &b, o));
    check_dtype_refused(&[2, 3], DType::F64, |o| a.masked_fill_out(&c, 0.0, o));
    check_dtype_refused(&[2, 3], DType::I64, |o| a.addcmul_out(&a, &b, 1.0, o));
    let i = Tensor::zeros(&[2, 3], DType::I64).unwrap();
    assert!(matches!(
        i.masked_fill_out(&i, 1i64, &i),
        Err(Error::DType { .. })
    ));
}

#[test]
fn out_forms_write_into_their_input_but_refuse_partial_overlap_and_grad() {
    // The output may be the input itself.
    let x = sample(DType::F64);
    let want = x.exp().unwrap();
    x.exp_out(&x).unwrap();
    assert_eq!(x.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
    assert_eq!(x.version(), 1);
    // An output overlapping an input at other positions is refused, and nothing changes.
    let y = Tensor::arange(8, DType::F32).unwrap();
    let (src, dst) = (y.narrow(0, 0, 6).unwrap(), y.narrow(0, 2, 6).unwrap());
    for r in [
        src.exp_out(&dst),
        src.add_out(&src, 1i64, &dst),
        src.gt_out(0i64, &dst),
        src.masked_fill_out(&src.gt(1i64).unwrap(), 0.0, &dst),
    ] {
        assert!(matches!(r, Err(Error::Overlap { .. })), "{r:?}");
    }
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        (0..8).map(|v| v as f32).collect::<Vec<_>>()
    );
    assert_eq!(y.version(), 0);
    // An expanded output is refused.
    let e = Tensor::zeros(&[3], DType::F32)
        .unwrap()
        .expand(&[2, 3])
        .unwrap();
    assert!(matches!(
        sample(DType::F32).neg_out(&e),
        Err(Error::Overlap { .. })
    ));
    // Operands that require grad are refused with grad mode on, as for add_out.
    let leaf = sample(DType::F32).requires_grad_(true).unwrap();
    let out = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    assert!(matches!(
        leaf.sigmoid_out(&out),
        Err(Error::Autograd { .. })
    ));
    assert!(matches!(
        leaf.eq_out(&leaf, &out),
        Err(Error::Autograd { .. })
    ));
    assert_eq!(out.version(), 0);
    no_grad(|| leaf.sigmoid_out(&out)).unwrap();
    assert_eq!(out.version(), 1);
}

#[test]
fn a_resized_output_with_elements_keeps_its_storage_when_it_fits() {
    let a = sample(DType::F32);
    let out = Tensor::zeros(&[8], DType::F32).unwrap();
    let id = out.storage_id();
    let (r, peak) = peak_during(|| a.neg_out(&out));
    r.unwrap();
    assert_eq!(
        (out.shape().to_vec(), out.stride()),
        (vec![2, 3], vec![3, 1])
    );
    assert_eq!(out.storage_id(), id);
    assert_eq!(peak, 0, "the storage was large enough");
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        a.neg().unwrap().to_vec::<f32>().unwrap()
    );
}

#[test]
fn an_output_that_would_overlap_an_input_once_resized_is_refused_before_it_changes() {
    // `out` holds nothing yet, but resized to the result's shape at its offset it would
    // cover the input's memory one element further on.
    let base = Tensor::arange(6, DType::F32).unwrap();
    let x = base.narrow(0, 0, 5).unwrap();
    let out = base.narrow(0, 1, 0).unwrap();
    let before = (out.shape().to_vec(), out.stride(), out.data_ptr());
    for r in [
        x.exp_out(&out),
        x.add_out(&x, 1i64, &out),
        x.sum_out(Some(&[0]), true, &out.unsqueeze(0).unwrap()),
    ] {
        assert!(matches!(r, Err(Error::Overlap { .. })), "{r:?}");
    }
    assert_eq!((out.shape().to_vec(), out.stride(), out.data_ptr()), before);
    assert_eq!(out.version(), 0);
    assert_eq!(
        base.to_vec::<f32>().unwrap(),
        (0..6).map(|v| v as f32).collect::<Vec<_>>()
    );
    // An output that is the input exactly may still receive the result.
    x.exp_out(&x).unwrap();
}

#[test]
fn matrix_products_may_write_into_an_operand_or_resize_an_expanded_output() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let want = a.mm(&a).unwrap().to_vec::<f32>().unwrap();
    // Into an operand itself: computed through a private buffer, then copied in.
    a.mm_out(&a.deep_clone().unwrap(), &a).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), want);
    // An expanded output of another shape is resized, as PyTorch's products do.
    let b = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let e = Tensor::zeros(&[3], DType::F32)
        .unwrap()
        .expand(&[4, 3])
        .unwrap();
    b.mm_out(&b, &e).unwrap();
    assert_eq!((e.shape().to_vec(), e.stride()), (vec![2, 2], vec![2, 1]));
    assert_eq!(e.to_vec::<f32>().unwrap(), want);
    // One of the right shape is refused: its elements share memory.
    let e = Tensor::zeros(&[2], DType::F32)
        .unwrap()
        .expand(&[2, 2])
        .unwrap();
    assert!(matches!(b.mm_out(&b, &e), Err(Error::Overlap { .. })));
}
