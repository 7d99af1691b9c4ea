//! Non-reentrant checkpointing beyond one region with one output: regions nested inside
//! regions, several outputs (one of them unused), and inputs that are not differentiable.
//! The gradients must equal the unchecked ones exactly, and a nested region must hold no
//! more than its outputs after the forward.
//!
//! Selective checkpointing: the forward keeps exactly the outputs of the ops the policy
//! saves, the recomputation reuses them without running those ops again, the gradients equal
//! the unchecked ones bit for bit, a composite's name covers the ops it runs, kept outputs
//! count as activations, and misuse (an in-place change of a kept output, a second
//! backward) is an `Err`.

use std::sync::Arc;

use strata_alloc::{DeviceAllocator, HostBacking, HostCachingAllocator};
use strata_core::autograd::{checkpoint, checkpoint_selective, CheckpointPolicy, SelectivePolicy};
use strata_core::nn::functional::{embedding, linear};
use strata_core::{with_allocator, Category, DType, Result, Tensor};

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

/// Two products with pointwise ops between: `tanh(gelu(x·w1ᵀ)·w2ᵀ)`.
fn mlp(t: &[Tensor]) -> Result<Vec<Tensor>> {
    let h = t[0].matmul(&t[1].t()?)?.gelu()?;
    Ok(vec![h.matmul(&t[2].t()?)?.tanh()?])
}

/// The same through `linear`, a composite op that runs `matmul`.
fn mlp_linear(t: &[Tensor]) -> Result<Vec<Tensor>> {
    let h = linear(&t[0], &t[1], None)?.gelu()?;
    Ok(vec![linear(&h, &t[2], None)?.tanh()?])
}

/// What one way of running the region holds after its forward, how many blocks its
/// backward allocates, and the gradients it gives.
struct Run {
    held: usize,
    backward_allocations: i64,
    grads: Vec<Vec<f32>>,
}

fn measure(
    cache: &HostCachingAllocator,
    inputs: &[Tensor],
    forward: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Run {
    let all: Vec<&Tensor> = inputs.iter().collect();
    let base = cache.memory_allocated();
    let out = forward(inputs).unwrap().remove(0);
    let held = cache.memory_allocated() - base;
    let loss = out.sum(None, false).unwrap();
    let before = cache.memory_stats().allocation.all.allocated;
    loss.backward().unwrap();
    let backward_allocations = cache.memory_stats().allocation.all.allocated - before;
    let grads = grads(&all);
    drop((loss, out));
    clear(&all);
    assert_eq!(cache.memory_allocated(), base, "everything is freed");
    Run {
        held,
        backward_allocations,
        grads,
    }
}

#[test]
fn saved_products_are_kept_reused_and_give_plain_gradients() {
    let cache = Arc::new(HostCachingAllocator::new(HostBacking::new()));
    let dynamic: Arc<dyn DeviceAllocator> = cache.clone();
    with_allocator(&dynamic, || {
        let inputs = [
            param(&[64, 32], 1),
            param(&[48, 32], 2),
            param(&[16, 48], 3),
        ];
        let (h1, h2, out) = (64 * 48 * 4, 64 * 16 * 4, 64 * 16 * 4);
        let products = SelectivePolicy::saving(&["matmul"]);

        let plain = measure(&cache, &inputs, mlp);
        let full = measure(&cache, &inputs, |t| checkpoint(mlp, t));
        let selective = measure(&cache, &inputs, |t| checkpoint_selective(mlp, t, &products));

        // Plain keeps the first product (gelu's input), gelu's output (the second product's
        // input) and tanh's output; full keeps the output alone; selective the output and
        // both products, which nothing but the policy keeps.
        assert_eq!(plain.held, h1 + h1 + out);
        assert_eq!(full.held, out);
        assert_eq!(selective.held, out + h1 + h2);
        // The recomputation runs gelu and tanh but neither product: two blocks fewer.
        assert_eq!(
            full.backward_allocations - selective.backward_allocations,
            2
        );
        assert_eq!(selective.grads, plain.grads);
        assert_eq!(full.grads, plain.grads);

        // A composite's name covers the ops it runs: `linear` saves its product.
        let linears = SelectivePolicy::saving(&["linear"]);
        let by_linear = measure(&cache, &inputs, |t| {
            checkpoint_selective(mlp_linear, t, &linears)
        });
        assert_eq!(by_linear.held, selective.held);
        assert_eq!(by_linear.grads, plain.grads);

        // A rule that saves nothing is full checkpointing.
        let nothing = SelectivePolicy::from_fn(|_| CheckpointPolicy::PreferRecompute);
        let none = measure(&cache, &inputs, |t| checkpoint_selective(mlp, t, &nothing));
        assert_eq!(none.held, full.held);
        assert_eq!(none.backward_allocations, full.backward_allocations);
    });
}

#[test]
fn a_kept_output_changed_in_place_is_an_error() {
    let inputs = [param(&[8, 4], 1), param(&[6, 4], 2)];
    let region = |t: &[Tensor]| -> Result<Vec<Tensor>> {
        let h = t[0].matmul(&t[1].t()?)?;
        let y = h.sigmoid()?;
        h.add_(1.0)?;
        Ok(vec![y.mul(&h)?])
    };
    let policy = SelectivePolicy::saving(&["matmul"]);
    let out = checkpoint_selective(region, &inputs, &policy).unwrap();
    let err = out[0].sum(None, false).unwrap().backward().unwrap_err();
    assert!(
        err.to_string().contains("modified in place"),
        "unexpected error: {err}"
    );
}

#[test]
fn kept_outputs_serve_one_backward() {
    let inputs = [param(&[8, 4], 1), param(&[6, 4], 2)];
    let policy = SelectivePolicy::saving(&["matmul"]);
    let region =
        |t: &[Tensor]| -> Result<Vec<Tensor>> { Ok(vec![t[0].matmul(&t[1].t()?)?.tanh()?.exp()?]) };
    let out = checkpoint_selective(region, &inputs, &policy).unwrap();
    let loss = out[0].sum(None, false).unwrap();
    loss.backward_with(None, true).unwrap();
    let err = loss.backward().unwrap_err();
    assert!(
        err.to_string().contains("one backward"),
        "unexpected error: {err}"
    );
}

#[test]
fn a_policy_sees_the_composites_an_op_runs_inside() {
    let policy = SelectivePolicy::saving(&["linear", "scaled_dot_product_attention"]);
    assert_eq!(
        policy.policy_for("matmul", &["linear"]),
        CheckpointPolicy::MustSave
    );
    assert_eq!(
        policy.policy_for(
            "_scaled_dot_product_flash_attention_for_cpu",
            &["scaled_dot_product_attention"]
        ),
        CheckpointPolicy::MustSave
    );
    assert_eq!(
        policy.policy_for("matmul", &[]),
        CheckpointPolicy::PreferRecompute
    );
    assert_eq!(
        policy.policy_for("gelu", &["other"]),
        CheckpointPolicy::PreferRecompute
    );
}

#[test]
fn kept_outputs_count_as_activations_until_the_recomputation_takes_them() {
    let inputs = [param(&[8, 4], 1), param(&[6, 4], 2)];
    // The product is also an output of the region, so its memory can be looked at.
    let region = |t: &[Tensor]| -> Result<Vec<Tensor>> {
        let h = t[0].matmul(&t[1].t()?)?;
        Ok(vec![h.tanh()?, h])
    };
    let full = checkpoint(region, &inputs).unwrap();
    assert_eq!(full[1].memory_category(), Category::Temporary);
    let policy = SelectivePolicy::saving(&["matmul"]);
    let out = checkpoint_selective(region, &inputs, &policy).unwrap();
    assert_eq!(out[1].memory_category(), Category::Activation);
    out[0].sum(None, false).unwrap().backward().unwrap();
    // The recomputation took the product back; tanh saved its own output, not the product.
    assert_eq!(out[1].memory_category(), Category::Temporary);
}
