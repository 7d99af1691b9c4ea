//! Autocast regions, the policy as ops see it, the cast cache and checkpoint's restore.

use crate::autocast::*;
use crate::cast_scope::cache_len;
use crate::nn::functional::{cross_entropy, gru_cell, linear, lstm_cell, mse_loss, Reduction};
use crate::{DType, Tensor};

fn f32s(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i % 7) as f32 - 3.0) / 4.0).collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn param(shape: &[usize]) -> Tensor {
    f32s(shape).requires_grad_(true).unwrap()
}

#[test]
fn regions_nest_and_guards_restore_the_state_around_them() {
    assert_eq!(autocast_dtype(), None);
    let outer = autocast(DType::BF16).unwrap();
    assert_eq!(autocast_dtype(), Some(DType::BF16));
    {
        let _inner = autocast(DType::F16).unwrap();
        assert_eq!(autocast_dtype(), Some(DType::F16));
    }
    assert_eq!(autocast_dtype(), Some(DType::BF16));
    drop(outer);
    assert_eq!(autocast_dtype(), None);
    let r = with_autocast(DType::F16, autocast_dtype).unwrap();
    assert_eq!(r, Some(DType::F16));
    assert_eq!(autocast_dtype(), None);
    drop(autocast_default());
    assert_eq!(DEFAULT_CPU_AUTOCAST_DTYPE, DType::BF16);
}

#[test]
fn only_half_dtypes_open_a_region() {
    for d in [DType::F32, DType::F64, DType::I64] {
        let e = autocast(d).unwrap_err().to_string();
        assert!(e.contains("bf16 or f16"), "{e}");
        assert!(with_autocast(d, || ()).is_err());
    }
    assert_eq!(autocast_dtype(), None);
}

#[test]
fn lower_precision_ops_compute_in_the_region_dtype() {
    let (a, b) = (f32s(&[2, 3]), f32s(&[3, 2]));
    let c = f32s(&[2, 2]);
    let w = f32s(&[4, 3]);
    for d in [DType::BF16, DType::F16] {
        let _r = autocast(d).unwrap();
        assert_eq!(a.matmul(&b).unwrap().dtype(), d);
        assert_eq!(a.mm(&b).unwrap().dtype(), d);
        assert_eq!(c.addmm(&a, &b, 1, 1).unwrap().dtype(), d);
        let a3 = a.unsqueeze(0).unwrap();
        let b3 = b.unsqueeze(0).unwrap();
        assert_eq!(a3.bmm(&b3).unwrap().dtype(), d);
        assert_eq!(linear(&a, &w, None).unwrap().dtype(), d);
        // A half input of the other kind is cast too.
        let other = if d == DType::BF16 {
            DType::F16
        } else {
            DType::BF16
        };
        let ah = a.to(other).unwrap();
        assert_eq!(ah.matmul(&b).unwrap().dtype(), d);
    }
}

#[test]
fn fp32_ops_compute_in_f32_and_the_rest_runs_as_outside() {
    let x = f32s(&[3, 4]).to(DType::BF16).unwrap();
    let y = f32s(&[3, 4]).to(DType::BF16).unwrap();
    let t = Tensor::from_vec(vec![0i64, 1, 3], &[3]).unwrap();
    let _r = autocast(DType::BF16).unwrap();
    assert_eq!(
        mse_loss(&x, &y, Reduction::Mean).unwrap().dtype(),
        DType::F32
    );
    assert_eq!(
        cross_entropy(&x, &t, Reduction::Mean).unwrap().dtype(),
        DType::F32
    );
    assert_eq!(x.prod(None, false).unwrap().dtype(), DType::F32);
    // Not in the lists: in their inputs' dtypes.
    assert_eq!(x.softmax(1).unwrap().dtype(), DType::BF16);
    assert_eq!(x.exp().unwrap().dtype(), DType::BF16);
    assert_eq!(x.sum(None, false).unwrap().dtype(), DType::BF16);
    let f = f32s(&[3, 4]);
    assert_eq!(f.log_softmax(1).unwrap().dtype(), DType::F32);
}

#[test]
fn in_place_out_f64_and_integer_operands_are_never_cast() {
    let (a, b) = (f32s(&[2, 3]), f32s(&[3, 2]));
    let _r = autocast(DType::BF16).unwrap();
    let out = Tensor::zeros(&[2, 2], DType::F32).unwrap();
    assert_eq!(a.matmul_out(&b, &out).unwrap().dtype(), DType::F32);
    let c = f32s(&[2, 2]);
    c.add_(&out).unwrap();
    assert_eq!(c.dtype(), DType::F32);
    let (a64, b64) = (a.to(DType::F64).unwrap(), b.to(DType::F64).unwrap());
    assert_eq!(a64.matmul(&b64).unwrap().dtype(), DType::F64);
    let i = Tensor::arange(4, DType::I64)
        .unwrap()
        .view(&[2, 2])
        .unwrap();
    assert_eq!(i.matmul(&i).unwrap().dtype(), DType::I64);
    // An f64 operand of an f32 op stays f64.
    let p = a64.prod(None, false).unwrap();
    assert_eq!(p.dtype(), DType::F64);
}

#[test]
fn cat_and_stack_promote_and_refuse_the_other_half_dtype() {
    let f = f32s(&[2]);
    let b = f.to(DType::BF16).unwrap();
    let h = f.to(DType::F16).unwrap();
    let _r = autocast(DType::BF16).unwrap();
    assert_eq!(Tensor::cat(&[&b, &b], 0).unwrap().dtype(), DType::BF16);
    assert_eq!(Tensor::cat(&[&b, &f], 0).unwrap().dtype(), DType::F32);
    assert_eq!(Tensor::stack(&[&f, &h], 0).unwrap().dtype(), DType::F32);
    let e = Tensor::cat(&[&h, &f], 0).unwrap_err().to_string();
    assert!(e.contains("cat") && e.contains("f16"), "{e}");
    assert!(Tensor::stack(&[&b, &h], 0).is_err());
    // The out= form is not autocast: it joins as outside.
    let out = Tensor::zeros(&[0], DType::F32).unwrap();
    assert!(Tensor::cat_out(&[&b, &h], 0, &out).is_ok());
}

#[test]
fn gradients_come_back_in_the_inputs_dtypes() {
    let x = f32s(&[2, 3]);
    let w = param(&[4, 3]);
    let b = param(&[4]);
    let t = Tensor::from_vec(vec![0i64, 3], &[2]).unwrap();
    let loss = with_autocast(DType::BF16, || {
        let y = linear(&x, &w, Some(&b))?;
        assert_eq!(y.dtype(), DType::BF16);
        cross_entropy(&y, &t, Reduction::Mean)
    })
    .unwrap()
    .unwrap();
    assert_eq!(loss.dtype(), DType::F32);
    loss.backward().unwrap();
    assert_eq!(w.grad().unwrap().dtype(), DType::F32);
    assert_eq!(b.grad().unwrap().dtype(), DType::F32);
}

#[test]
fn a_parameter_is_cast_once_per_region_and_the_cache_clears_at_the_end() {
    let x = f32s(&[2, 3]);
    let w = param(&[4, 3]);
    let outer = autocast(DType::BF16).unwrap();
    let y1 = linear(&x, &w, None).unwrap();
    assert_eq!(cache_len(), 1);
    {
        let _inner = autocast(DType::BF16).unwrap();
        let y2 = linear(&x, &w, None).unwrap();
        assert_eq!(cache_len(), 1);
        y1.add(&y2)
            .unwrap()
            .sum(None, false)
            .unwrap()
            .backward()
            .unwrap();
    }
    // The inner region's exit keeps the cache; the outermost one's clears it.
    assert_eq!(cache_len(), 1);
    // Tensors that are not leaves requiring grad are not cached.
    let _ = x.matmul(&x.t().unwrap()).unwrap();
    assert_eq!(cache_len(), 1);
    drop(outer);
    assert_eq!(cache_len(), 0);
    // Both uses went through the one cast; the gradient is their sum.
    let g = w.grad().unwrap().to_vec::<f32>().unwrap();
    let col: Vec<f32> = (0..3)
        .map(|j| 2.0 * (x.to_vec::<f32>().unwrap()[j] + x.to_vec::<f32>().unwrap()[3 + j]))
        .collect();
    for (k, v) in g.iter().enumerate() {
        assert!((v - col[k % 3]).abs() < 0.05, "{g:?} vs {col:?}");
    }
}

#[test]
fn a_parameter_changed_in_place_is_cast_afresh() {
    let x = f32s(&[1, 3]);
    let w = param(&[1, 3]);
    let _r = autocast(DType::BF16).unwrap();
    let y1 = linear(&x, &w, None).unwrap().to_vec::<f32>().unwrap();
    crate::autograd::no_grad(|| w.mul_(2.0)).unwrap();
    let y2 = linear(&x, &w, None).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(y2[0], 2.0 * y1[0]);
}

#[test]
fn a_custom_policy_inside_a_region_decides_while_it_is_open() {
    use std::sync::Arc;
    struct Nothing;
    impl CastPolicy for Nothing {
        fn cast_dtype(&self, _: &'static str, _: &[&Tensor]) -> Option<DType> {
            None
        }
    }
    let (a, b) = (f32s(&[2, 3]), f32s(&[3, 2]));
    let _r = autocast(DType::BF16).unwrap();
    let c = with_cast_policy(Arc::new(Nothing), || a.matmul(&b)).unwrap();
    assert_eq!(c.dtype(), DType::F32);
    assert_eq!(autocast_dtype(), Some(DType::BF16));
    assert_eq!(a.matmul(&b).unwrap().dtype(), DType::BF16);
}

#[test]
fn cells_run_their_products_in_lower_precision_and_return_the_promoted_dtype() {
    let (b, i, h) = (2, 3, 4);
    let x = f32s(&[b, i]);
    let (h0, c0) = (f32s(&[b, h]), f32s(&[b, h]));
    let (w_ih, w_hh) = (param(&[4 * h, i]), param(&[4 * h, h]));
    let _r = autocast(DType::BF16).unwrap();
    let (h1, c1) = lstm_cell(&x, &h0, &c0, &w_ih, &w_hh, None, None).unwrap();
    assert_eq!((h1.dtype(), c1.dtype()), (DType::F32, DType::F32));
    let g_ih = w_ih.narrow(0, 0, 3 * h).unwrap();
    let g_hh = w_hh.narrow(0, 0, 3 * h).unwrap();
    let g1 = gru_cell(&x, &h0, &g_ih, &g_hh, None, None).unwrap();
    assert_eq!(g1.dtype(), DType::F32);
    // With half-precision states the results stay half.
    let hb = h0.to(DType::BF16).unwrap();
    let xb = x.to(DType::BF16).unwrap();
    let cb = c0.to(DType::BF16).unwrap();
    let (h1, c1) = lstm_cell(&xb, &hb, &cb, &w_ih, &w_hh, None, None).unwrap();
    assert_eq!((h1.dtype(), c1.dtype()), (DType::BF16, DType::BF16));
    h1.sum(None, false).unwrap().backward().unwrap();
    assert_eq!(w_ih.grad().unwrap().dtype(), DType::F32);
}

#[test]
fn checkpoint_recomputes_in_the_autocast_state_of_its_forward() {
    use crate::autograd::checkpoint;
    let x = f32s(&[2, 3]);
    let w = param(&[4, 3]);
    let region = |t: &[Tensor]| -> crate::Result<Vec<Tensor>> {
        let y = linear(&t[0], &t[1], None)?;
        Ok(vec![y.tanh()?])
    };
    // Reference: no checkpoint.
    let reference = with_autocast(DType::BF16, || region(&[x.clone(), w.clone()]))
        .unwrap()
        .unwrap();
    assert_eq!(reference[0].dtype(), DType::BF16);
    reference[0]
        .to(DType::F32)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let expected = w.grad().unwrap().to_vec::<f32>().unwrap();
    w.zero_grad(true).unwrap();
    // Checkpointed inside a region; backward outside it recomputes in bf16.
    let out = with_autocast(DType::BF16, || checkpoint(region, &[x.clone(), w.clone()]))
        .unwrap()
        .unwrap();
    assert_eq!(out[0].dtype(), DType::BF16);
    out[0]
        .to(DType::F32)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), expected);
    // Checkpointed outside any region; backward inside one still recomputes in f32.
    w.zero_grad(true).unwrap();
    let out = checkpoint(region, &[x.clone(), w.clone()]).unwrap();
    assert_eq!(out[0].dtype(), DType::F32);
    let loss = out[0].sum(None, false).unwrap();
    with_autocast(DType::BF16, || loss.backward())
        .unwrap()
        .unwrap();
    assert_eq!(w.grad().unwrap().dtype(), DType::F32);
    assert_eq!(autocast_dtype(), None);
}
