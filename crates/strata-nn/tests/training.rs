//! A small model end to end: build, train a few steps with a hand-written optimizer that
//! holds the parameters, convert it, save, reload, and evaluate.

use strata_core::autograd::no_grad;
use strata_core::nn::functional::{cross_entropy, Reduction};
use strata_core::{DType, Generator, Tensor};
use strata_nn::state::{LoadOptions, StateDictExt};
use strata_nn::{checkpoint_sequential, BatchNorm1d, Dropout, Linear, Module, ReLU, Sequential};

fn model() -> Sequential {
    Sequential::new()
        .append(Linear::new(4, 16, true).unwrap())
        .unwrap()
        .append(BatchNorm1d::new(16).unwrap())
        .unwrap()
        .append(ReLU::new())
        .unwrap()
        .append(Dropout::new(0.1).unwrap())
        .unwrap()
        .append(Linear::new(16, 3, true).unwrap())
        .unwrap()
}

/// A separable problem: the class is the index of the largest of the first three features.
fn batch(g: &mut Generator) -> (Tensor, Tensor) {
    let x = Tensor::randn_with(&[64, 4], DType::F32, g).unwrap();
    let v = x.to_vec::<f32>().unwrap();
    let y: Vec<i64> = v
        .chunks(4)
        .map(|r| (0..3).max_by(|&a, &b| r[a].total_cmp(&r[b])).unwrap_or(0) as i64)
        .collect();
    (x, Tensor::from_vec(y, &[64]).unwrap())
}

fn sgd_step(params: &[Tensor], lr: f64) {
    no_grad(|| {
        for p in params {
            if let Some(g) = p.grad() {
                p.sub_(&g.mul(lr).unwrap()).unwrap();
            }
        }
    });
}

#[test]
fn a_model_trains_converts_saves_and_reloads() {
    let mut g = Generator::new(11);
    let net = model();
    let optimizer_params = net.parameters();
    let mut first = None;
    let mut last = 0.0;
    for step in 0..60 {
        let (x, y) = batch(&mut g);
        // Half the steps run checkpointed, which must train the same way.
        let logits = if step % 2 == 0 {
            net.call(&x).unwrap()
        } else {
            checkpoint_sequential(&net, 2, &x.requires_grad_(true).unwrap()).unwrap()
        };
        let loss = cross_entropy(&logits, &y, Reduction::Mean).unwrap();
        last = loss.item::<f32>().unwrap();
        first.get_or_insert(last);
        net.zero_grad().unwrap();
        loss.backward().unwrap();
        sgd_step(&optimizer_params, 0.2);
    }
    let first = first.unwrap_or(0.0);
    assert!(last < first * 0.7, "loss went from {first} to {last}");
    let tracked = net
        .state_dict()
        .get("1.num_batches_tracked")
        .unwrap()
        .item::<i64>()
        .unwrap();
    assert!(tracked >= 30, "{tracked}");

    // Converting keeps the optimizer's handles pointing at the model's parameters.
    // SAFETY: no other thread uses the model.
    unsafe { net.to_dtype(DType::F64).unwrap() };
    assert!(optimizer_params.iter().all(|p| p.dtype() == DType::F64));
    let buffers = net.named_buffers();
    let nbt = buffers
        .iter()
        .find(|(n, _)| n == "1.num_batches_tracked")
        .unwrap();
    assert_eq!(nbt.1.dtype(), DType::I64);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("net.safetensors");
    net.save(&path).unwrap();
    let again = model();
    // SAFETY: as above.
    unsafe { again.to_dtype(DType::F64).unwrap() };
    again.load(&path, LoadOptions::default()).unwrap();
    net.eval();
    again.eval();
    let (x, _) = batch(&mut g);
    let x = x.to(DType::F64).unwrap();
    let a = no_grad(|| net.call(&x)).unwrap().to_vec::<f64>().unwrap();
    let b = no_grad(|| again.call(&x)).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(a, b);
}
