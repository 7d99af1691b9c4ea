//! Non-reentrant checkpointing beyond one region with one output: regions nested inside
//! regions, several outputs (one of them unused), and inputs that are not differentiable.
//! The gradients must equal the unchecked ones exactly, and a nested region must hold no
//! more than its outputs after the forward.

use std::sync::Arc;

use strata_alloc::{DeviceAllocator, HostBacking, HostCachingAllocator};
use strata_core::autograd::checkpoint;
use strata_core::nn::functional::embedding;
use strata_core::{with_allocator, DType, Result, Tensor};

fn param(shape: &[usize], seed: u64) -> Tensor {
    let mut g = strata_core::Generator::new(seed);
    let t = Tensor::randn_with(shape, DType::F32, &mut g).unwrap();
    t.mul(1.0 / (shape[1] as f64).sqrt())
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

fn grads(ts: &[&Tensor]) -> Vec<Vec<f32>> {
    ts.iter()
        .map(|t| t.grad().expect("a gradient").to_vec::<f32>().unwrap())
        .collect()
}

fn clear(ts: &[&Tensor]) {
    for t in ts {
        t.zero_grad(true).unwrap();
    }
}

fn inner(t: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![t[0].matmul(&t[1].t()?)?.tanh()?])
}

fn outer(t: &[Tensor]) -> Result<Vec<Tensor>> {
    let h = checkpoint(inner, &[t[0].clone(), t[1].clone()])?;
    Ok(vec![h[0].matmul(&t[2].t()?)?.sigmoid()?])
}

fn plain(t: &[Tensor]) -> Result<Vec<Tensor>> {
    let h = inner(&[t[0].clone(), t[1].clone()])?;
    Ok(vec![h[0].matmul(&t[2].t()?)?.sigmoid()?])
}

#[test]
fn nested_checkpoints_give_plain_gradients_and_hold_only_the_output() {
    let cache = Arc::new(HostCachingAllocator::new(HostBacking::new()));
    let dynamic: Arc<dyn DeviceAllocator> = cache.clone();
    with_allocator(&dynamic, || {
        let x = param(&[64, 32], 1);
        let w1 = param(&[48, 32], 2);
        let w2 = param(&[16, 48], 3);
        let inputs = [x.clone(), w1.clone(), w2.clone()];
        let all = [&x, &w1, &w2];

        let out = plain(&inputs).unwrap().remove(0);
        out.sum(None, false).unwrap().backward().unwrap();
        let want = grads(&all);
        clear(&all);

        let base = cache.memory_allocated();
        let out = checkpoint(outer, &inputs).unwrap().remove(0);
        // Nothing but the output survives the forward: the inner region's activation and
        // the outer region's are both recomputed in backward.
        assert_eq!(cache.memory_allocated() - base, out.nbytes());
        out.sum(None, false).unwrap().backward().unwrap();
        assert_eq!(grads(&all), want);
        drop(out);
        clear(&all);
        assert_eq!(cache.memory_allocated(), base);
    });
}

fn two_outputs(t: &[Tensor]) -> Result<Vec<Tensor>> {
    let a = t[0].matmul(&t[1].t()?)?;
    let b = a.tanh()?.mul(&t[0].sum(Some(&[1]), true)?)?;
    let unused = a.exp()?;
    Ok(vec![a, b, unused])
}

#[test]
fn several_outputs_flow_into_one_backward_and_an_unused_one_costs_nothing() {
    let x = param(&[8, 6], 4);
    let w = param(&[5, 6], 5);
    let inputs = [x.clone(), w.clone()];
    let loss = |outs: &[Tensor]| -> Tensor {
        let a = outs[0].mul(&outs[0]).unwrap().sum(None, false).unwrap();
        a.add(&outs[1].sum(None, false).unwrap()).unwrap()
    };
    loss(&two_outputs(&inputs).unwrap()).backward().unwrap();
    let want = grads(&[&x, &w]);
    clear(&[&x, &w]);

    let outs = checkpoint(two_outputs, &inputs).unwrap();
    assert_eq!(outs.len(), 3);
    assert!(outs.iter().all(Tensor::requires_grad));
    loss(&outs).backward().unwrap();
    assert_eq!(grads(&[&x, &w]), want);
}

fn lookup(t: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![embedding(&t[0], &t[1])?.relu()?])
}

#[test]
fn an_index_input_is_kept_as_is_and_the_weight_gets_its_gradient() {
    let index = Tensor::from_vec(vec![3i64, 0, 3, 1], &[2, 2]).unwrap();
    let weight = param(&[4, 3], 6);
    let inputs = [index.clone(), weight.clone()];
    lookup(&inputs).unwrap()[0]
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let want = grads(&[&weight]);
    clear(&[&weight]);
    let out = checkpoint(lookup, &inputs).unwrap();
    out[0].sum(None, false).unwrap().backward().unwrap();
    assert_eq!(grads(&[&weight]), want);
    assert!(index.grad().is_none());
}
