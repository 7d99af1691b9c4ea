use strata_core::autograd::no_grad;
use strata_core::{DType, Tensor};

use super::*;

fn set(m: &dyn Module, name: &str, values: Vec<f32>) {
    let (_, p) = m
        .named_parameters()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap();
    let shape = p.shape().to_vec();
    no_grad(|| p.copy_(&Tensor::from_vec(values, &shape).unwrap())).unwrap();
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn names_shapes_and_initialisation() {
    let config = RnnConfig {
        num_layers: 2,
        ..RnnConfig::default()
    };
    let lstm = LSTM::with_config(3, 5, config).unwrap();
    let named = lstm.named_parameters();
    let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "weight_ih_l0",
            "weight_hh_l0",
            "bias_ih_l0",
            "bias_hh_l0",
            "weight_ih_l1",
            "weight_hh_l1",
            "bias_ih_l1",
            "bias_hh_l1"
        ]
    );
    assert_eq!(named[0].1.shape().as_slice(), [20, 3]);
    assert_eq!(named[4].1.shape().as_slice(), [20, 5]);
    let bound = 1.0 / 5f32.sqrt();
    for (_, p) in &named {
        assert!(p.to_vec::<f32>().unwrap().iter().all(|v| v.abs() <= bound));
    }
    let x = Tensor::randn(&[7, 2, 3], DType::F32).unwrap();
    let (out, (h, c)) = lstm.call_with(&x, None).unwrap();
    assert_eq!(out.shape().as_slice(), [7, 2, 5]);
    assert_eq!(h.shape().as_slice(), [2, 2, 5]);
    assert_eq!(c.shape().as_slice(), [2, 2, 5]);
    // The last output is the top layer's final state.
    assert_eq!(
        out.select(0, 6).unwrap().to_vec::<f32>().unwrap(),
        h.select(0, 1).unwrap().to_vec::<f32>().unwrap()
    );

    let gru = GRU::with_config(
        3,
        4,
        RnnConfig {
            batch_first: true,
            bias: false,
            ..RnnConfig::default()
        },
    )
    .unwrap();
    assert_eq!(gru.named_parameters().len(), 2);
    let (out, h) = gru
        .call_with(&Tensor::randn(&[2, 7, 3], DType::F32).unwrap(), None)
        .unwrap();
    assert_eq!(out.shape().as_slice(), [2, 7, 4]);
    assert_eq!(h.shape().as_slice(), [1, 2, 4]);

    let rnn = RNN::new(3, 4).unwrap();
    let (out, h) = rnn
        .call_with(&Tensor::randn(&[5, 3], DType::F32).unwrap(), None)
        .unwrap();
    assert_eq!(out.shape().as_slice(), [5, 4]);
    assert_eq!(h.shape().as_slice(), [1, 4]);
    assert!(rnn
        .call(&Tensor::randn(&[5, 2, 4], DType::F32).unwrap())
        .is_err());
    let bad_h0 = Tensor::zeros(&[2, 1, 4], DType::F32).unwrap();
    assert!(rnn
        .call_with(
            &Tensor::randn(&[5, 1, 3], DType::F32).unwrap(),
            Some(&bad_h0)
        )
        .is_err());
}

#[test]
fn gate_orders_are_pytorchs() {
    let x = Tensor::ones(&[1, 1, 1], DType::F32).unwrap();

    let lstm = LSTM::new(1, 1).unwrap();
    set(&lstm, "weight_ih_l0", vec![1.0, 2.0, 3.0, 4.0]);
    set(&lstm, "weight_hh_l0", vec![0.0; 4]);
    set(&lstm, "bias_ih_l0", vec![0.0; 4]);
    set(&lstm, "bias_hh_l0", vec![0.0; 4]);
    let c0 = Tensor::full(&[1, 1, 1], 0.5, DType::F32).unwrap();
    let h0 = Tensor::zeros(&[1, 1, 1], DType::F32).unwrap();
    let (_, (h, c)) = lstm.call_with(&x, Some((&h0, &c0))).unwrap();
    let want_c = sigmoid(2.0) * 0.5 + sigmoid(1.0) * 3f32.tanh();
    let want_h = sigmoid(4.0) * want_c.tanh();
    assert!((c.item::<f32>().unwrap() - want_c).abs() < 1e-6);
    assert!((h.item::<f32>().unwrap() - want_h).abs() < 1e-6);

    let gru = GRU::new(1, 1).unwrap();
    set(&gru, "weight_ih_l0", vec![1.0, 2.0, 3.0]);
    set(&gru, "weight_hh_l0", vec![0.0; 3]);
    set(&gru, "bias_ih_l0", vec![0.0; 3]);
    set(&gru, "bias_hh_l0", vec![0.0, 0.0, 0.5]);
    let h0 = Tensor::full(&[1, 1, 1], 0.25, DType::F32).unwrap();
    let (_, h) = gru.call_with(&x, Some(&h0)).unwrap();
    let (r, z) = (sigmoid(1.0), sigmoid(2.0));
    let n = (3.0 + r * 0.5f32).tanh();
    let want = (1.0 - z) * n + z * 0.25;
    assert!((h.item::<f32>().unwrap() - want).abs() < 1e-6);

    let rnn = RNN::new(1, 1).unwrap();
    set(&rnn, "weight_ih_l0", vec![0.5]);
    set(&rnn, "weight_hh_l0", vec![2.0]);
    set(&rnn, "bias_ih_l0", vec![0.1]);
    set(&rnn, "bias_hh_l0", vec![0.2]);
    let x2 = Tensor::ones(&[2, 1, 1], DType::F32).unwrap();
    let (out, _) = rnn.call_with(&x2, None).unwrap();
    let h1 = 0.8f32.tanh();
    let h2 = (0.8 + 2.0 * h1).tanh();
    let got = out.to_vec::<f32>().unwrap();
    assert!((got[0] - h1).abs() < 1e-6 && (got[1] - h2).abs() < 1e-6);
}

#[test]
fn gradients_flow_through_time() {
    let lstm = LSTM::new(2, 3).unwrap();
    let x = Tensor::randn(&[4, 2, 2], DType::F32).unwrap();
    let (out, _) = lstm.call_with(&x, None).unwrap();
    out.sum(None, false).unwrap().backward().unwrap();
    assert!(lstm.parameters().iter().all(|p| p.grad().is_some()));
}
