//! lstm_cell and gru_cell against their op-by-op compositions, the new losses, and
//! embedding's padding_idx.

use super::{close, gradcheck, leaf, leaf_of};
use crate::nn::functional::{
    binary_cross_entropy_with_logits, cross_entropy, cross_entropy_with, embedding_with, gru_cell,
    l1_loss, linear, lstm_cell, CrossEntropyOptions, Reduction,
};
use crate::{DType, Result, Tensor};

fn composed_lstm(t: &[Tensor]) -> Result<(Tensor, Tensor)> {
    let gates = linear(&t[1], &t[4], Some(&t[6]))?.add(&linear(&t[0], &t[3], Some(&t[5]))?)?;
    let q = gates.chunk(4, 1)?;
    let c1 = q[1]
        .sigmoid()?
        .mul(&t[2])?
        .add(&q[0].sigmoid()?.mul(&q[2].tanh()?)?)?;
    let h1 = q[3].sigmoid()?.mul(&c1.tanh()?)?;
    Ok((h1, c1))
}

fn lstm_inputs() -> Vec<Tensor> {
    let (b, i, h) = (3, 4, 5);
    vec![
        leaf(&[b, i], 1),
        leaf(&[b, h], 2),
        leaf(&[b, h], 3),
        leaf(&[4 * h, i], 4),
        leaf(&[4 * h, h], 5),
        leaf(&[4 * h], 6),
        leaf(&[4 * h], 7),
    ]
}

#[test]
fn lstm_cell_matches_its_composition_and_gradients() {
    let t = lstm_inputs();
    let (h1, c1) = lstm_cell(&t[0], &t[1], &t[2], &t[3], &t[4], Some(&t[5]), Some(&t[6])).unwrap();
    let (wh, wc) = composed_lstm(&t).unwrap();
    close(
        &h1.to_vec::<f64>().unwrap(),
        &wh.to_vec::<f64>().unwrap(),
        1e-12,
    );
    close(
        &c1.to_vec::<f64>().unwrap(),
        &wc.to_vec::<f64>().unwrap(),
        1e-12,
    );
    let cell =
        |t: &[Tensor]| lstm_cell(&t[0], &t[1], &t[2], &t[3], &t[4], Some(&t[5]), Some(&t[6]));
    gradcheck(|t| cell(t).map(|(h, _)| h), &t);
    gradcheck(|t| cell(t).map(|(_, c)| c), &t);
    gradcheck(|t| cell(t).and_then(|(h, c)| h.mul(&c)), &t);
}

#[test]
fn gru_cell_matches_pytorch_formula_and_gradients() {
    let (b, i, h) = (2, 3, 4);
    let t = vec![
        leaf(&[b, i], 11),
        leaf(&[b, h], 12),
        leaf(&[3 * h, i], 13),
        leaf(&[3 * h, h], 14),
        leaf(&[3 * h], 15),
        leaf(&[3 * h], 16),
    ];
    let h1 = gru_cell(&t[0], &t[1], &t[2], &t[3], Some(&t[4]), Some(&t[5])).unwrap();
    let gi = linear(&t[0], &t[2], Some(&t[4]))
        .unwrap()
        .chunk(3, 1)
        .unwrap();
    let gh = linear(&t[1], &t[3], Some(&t[5]))
        .unwrap()
        .chunk(3, 1)
        .unwrap();
    let r = gh[0].add(&gi[0]).unwrap().sigmoid().unwrap();
    let z = gh[1].add(&gi[1]).unwrap().sigmoid().unwrap();
    let n = gi[2].add(&gh[2].mul(&r).unwrap()).unwrap().tanh().unwrap();
    let want = t[1].sub(&n).unwrap().mul(&z).unwrap().add(&n).unwrap();
    close(
        &h1.to_vec::<f64>().unwrap(),
        &want.to_vec::<f64>().unwrap(),
        1e-12,
    );
    gradcheck(
        |t| gru_cell(&t[0], &t[1], &t[2], &t[3], Some(&t[4]), Some(&t[5])),
        &t,
    );
    // Without biases, unbatched.
    let u = vec![
        leaf(&[i], 17),
        leaf(&[h], 18),
        leaf(&[3 * h, i], 19),
        leaf(&[3 * h, h], 20),
    ];
    gradcheck(|t| gru_cell(&t[0], &t[1], &t[2], &t[3], None, None), &u);
}

/// The GRU cell op by op, as PyTorch's CPU composition.
fn composed_gru(t: &[Tensor]) -> Result<Tensor> {
    let gi = linear(&t[0], &t[2], Some(&t[4]))?.chunk(3, 1)?;
    let gh = linear(&t[1], &t[3], Some(&t[5]))?.chunk(3, 1)?;
    let r = gh[0].add(&gi[0])?.sigmoid()?;
    let z = gh[1].add(&gi[1])?.sigmoid()?;
    let n = gi[2].add(&gh[2].mul(&r)?)?.tanh()?;
    t[1].sub(&n)?.mul(&z)?.add(&n)
}

#[test]
fn fused_gru_cell_in_f32_equals_its_composition() {
    // 37 units: two full chunks of columns and a short one.
    let (b, i, h) = (5, 3, 37);
    let make = || {
        vec![
            leaf_of(DType::F32, &[b, i], 31),
            leaf_of(DType::F32, &[b, h], 32),
            leaf_of(DType::F32, &[3 * h, i], 33),
            leaf_of(DType::F32, &[3 * h, h], 34),
            leaf_of(DType::F32, &[3 * h], 35),
            leaf_of(DType::F32, &[3 * h], 36),
        ]
    };
    let (t, u) = (make(), make());
    let h1 = gru_cell(&t[0], &t[1], &t[2], &t[3], Some(&t[4]), Some(&t[5])).unwrap();
    let want = composed_gru(&u).unwrap();
    // The forward rounds as the composition does, element by element.
    assert_eq!(h1.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    // A gradient that is not contiguous (sum's expands a scalar) reaches the fused backward.
    h1.sum(None, false).unwrap().backward().unwrap();
    want.sum(None, false).unwrap().backward().unwrap();
    for (k, (got, exp)) in t.iter().zip(&u).enumerate() {
        let got = got.grad().unwrap().to_vec::<f32>().unwrap();
        let exp = exp.grad().unwrap().to_vec::<f32>().unwrap();
        for (g, e) in got.iter().zip(&exp) {
            assert!(
                (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
                "input {k}: {g} against {e}"
            );
        }
    }
}

#[test]
fn fused_gru_cell_computes_only_the_gradients_asked_for() {
    let (b, i, h) = (2, 3, 4);
    let x = leaf_of(DType::F32, &[b, i], 41).detach().unwrap();
    let h0 = leaf_of(DType::F32, &[b, h], 42);
    let (w_ih, w_hh) = (
        leaf_of(DType::F32, &[3 * h, i], 43).detach().unwrap(),
        leaf_of(DType::F32, &[3 * h, h], 44),
    );
    let h1 = gru_cell(&x, &h0, &w_ih, &w_hh, None, None).unwrap();
    h1.sum(None, false).unwrap().backward().unwrap();
    assert!(x.grad().is_none() && w_ih.grad().is_none());
    assert_eq!(h0.grad().unwrap().shape().as_slice(), [b, h]);
    assert_eq!(w_hh.grad().unwrap().shape().as_slice(), [3 * h, h]);
}

#[test]
fn fused_cells_keep_less_alive_than_their_composition() {
    use std::sync::Arc;
    use strata_alloc::{DeviceAllocator, HostBacking, HostCachingAllocator};
    let t = lstm_inputs();
    // Bytes alive after forward (outputs and whatever the graph keeps), inputs excluded.
    let held = |f: &dyn Fn() -> (Tensor, Tensor)| {
        let cache = Arc::new(HostCachingAllocator::new(HostBacking::new()));
        let dynamic: Arc<dyn DeviceAllocator> = cache.clone();
        crate::with_allocator(&dynamic, || {
            let out = f();
            let bytes = cache.memory_allocated();
            drop(out);
            bytes
        })
    };
    let fused =
        held(&|| lstm_cell(&t[0], &t[1], &t[2], &t[3], &t[4], Some(&t[5]), Some(&t[6])).unwrap());
    let composed = held(&|| composed_lstm(&t).unwrap());
    // Fused: the gates, c1 and h1. The composition also keeps four activations, tanh(c1)
    // and the products' intermediates.
    assert!(
        2 * fused < composed,
        "fused keeps {fused} bytes, composed {composed}"
    );
}

#[test]
fn new_losses_match_their_definitions_and_gradients() {
    let (x, y) = (leaf(&[3, 4], 21), leaf(&[3, 4], 22));
    let l1 = l1_loss(&x, &y, Reduction::Mean)
        .unwrap()
        .item::<f64>()
        .unwrap();
    let want = x
        .sub(&y)
        .unwrap()
        .abs()
        .unwrap()
        .mean(None, false)
        .unwrap()
        .item::<f64>()
        .unwrap();
    assert!((l1 - want).abs() < 1e-12);
    gradcheck(
        |t| l1_loss(&t[0], &t[1], Reduction::Sum),
        &[x.clone(), y.clone()],
    );
    let p = y
        .sigmoid()
        .unwrap()
        .detach()
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let bce = binary_cross_entropy_with_logits(&x, &p, Reduction::None).unwrap();
    let s = x.sigmoid().unwrap();
    let want = p
        .mul(&s.log().unwrap())
        .unwrap()
        .add(
            &p.neg()
                .unwrap()
                .add(1.0)
                .unwrap()
                .mul(&s.neg().unwrap().add(1.0).unwrap().log().unwrap())
                .unwrap(),
        )
        .unwrap()
        .neg()
        .unwrap();
    close(
        &bce.to_vec::<f64>().unwrap(),
        &want.to_vec::<f64>().unwrap(),
        1e-12,
    );
    gradcheck(
        |t| binary_cross_entropy_with_logits(&t[0], &t[1], Reduction::Mean),
        &[x, p],
    );
}

#[test]
fn cross_entropy_with_smoothing_weights_and_ignored_targets() {
    let logits = leaf(&[4, 3], 31);
    let target = Tensor::from_vec(vec![0i64, 2, 1, 2], &[4]).unwrap();
    // No options: the single-node form.
    let plain = cross_entropy(&logits, &target, Reduction::Mean)
        .unwrap()
        .item::<f64>()
        .unwrap();
    let same = cross_entropy_with(&logits, &target, &CrossEntropyOptions::default()).unwrap();
    assert!((plain - same.item::<f64>().unwrap()).abs() < 1e-12);
    // Smoothing e: (1 - e)·nll + e/C·Σ -log p, averaged.
    let e = 0.2;
    let opts = CrossEntropyOptions {
        label_smoothing: e,
        ..Default::default()
    };
    let got = cross_entropy_with(&logits, &target, &opts)
        .unwrap()
        .item::<f64>()
        .unwrap();
    let lsm = logits.log_softmax(1).unwrap();
    let uniform = lsm
        .neg()
        .unwrap()
        .sum(Some(&[1]), false)
        .unwrap()
        .mean(None, false)
        .unwrap();
    let want = (1.0 - e) * plain + e / 3.0 * uniform.item::<f64>().unwrap();
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    // Weights: the mean divides by the targets' weights.
    let w = Tensor::from_vec(vec![1.0f64, 2.0, 0.5], &[3]).unwrap();
    let opts = CrossEntropyOptions {
        weight: Some(w.clone()),
        ignore_index: 1,
        ..Default::default()
    };
    let got = cross_entropy_with(&logits, &target, &opts)
        .unwrap()
        .item::<f64>()
        .unwrap();
    let nll = cross_entropy(&logits, &target, Reduction::None)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let tw = [1.0, 0.5, 0.0, 0.5];
    let want = nll.iter().zip(tw).map(|(l, w)| l * w).sum::<f64>() / tw.iter().sum::<f64>();
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    for opts in [
        CrossEntropyOptions {
            label_smoothing: 0.3,
            ignore_index: 2,
            ..Default::default()
        },
        CrossEntropyOptions {
            label_smoothing: 0.1,
            weight: Some(w.clone()),
            reduction: Reduction::Sum,
            ..Default::default()
        },
        CrossEntropyOptions {
            weight: Some(w),
            reduction: Reduction::None,
            ..Default::default()
        },
    ] {
        gradcheck(
            |t| cross_entropy_with(&t[0], &target, &opts),
            std::slice::from_ref(&logits),
        );
    }
    // Every target ignored: the mean is NaN and the gradient zero.
    let all = Tensor::from_vec(vec![1i64; 4], &[4]).unwrap();
    let opts = CrossEntropyOptions {
        label_smoothing: 0.1,
        ignore_index: 1,
        ..Default::default()
    };
    let l = cross_entropy_with(&logits, &all, &opts).unwrap();
    assert!(l.item::<f64>().unwrap().is_nan());
    logits.zero_grad(true).unwrap();
    l.backward().unwrap();
    assert!(logits
        .grad()
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .all(|&g| g == 0.0));
}

#[test]
fn embedding_padding_row_gets_no_gradient() {
    let w = leaf(&[5, 3], 41);
    let idx = Tensor::from_vec(vec![4i64, 0, 4, 2], &[2, 2]).unwrap();
    let e = embedding_with(&idx, &w, Some(4)).unwrap();
    assert_eq!(e.shape().as_slice(), [2, 2, 3]);
    close(
        &e.select(0, 0)
            .unwrap()
            .select(0, 0)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        &w.select(0, 4).unwrap().to_vec::<f64>().unwrap(),
        0.0,
    );
    e.sum(None, false).unwrap().backward().unwrap();
    let g = w.grad().unwrap().to_vec::<f64>().unwrap();
    close(
        &g,
        &[
            1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        ],
        0.0,
    );
    assert!(embedding_with(&idx, &w, Some(5)).is_err());
    assert!(embedding_with(&idx, &w, Some(-6)).is_err());
}
