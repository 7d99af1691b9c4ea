//! Autograd's memory behaviour, measured in exact bytes on a private allocator per test: the
//! graph is freed by backward and by dropping it, a loss kept in a list keeps its graph,
//! checkpointing keeps only region inputs, saved-tensor hooks can shrink what is saved, and
//! a million-node chain drops and walks without recursion.

use std::sync::Arc;

use strata_alloc::{DeviceAllocator, HostBacking, HostCachingAllocator};
use strata_core::autograd::{self, checkpoint, saved_tensors_hooks};
use strata_core::nn::functional::{layer_norm, linear};
use strata_core::{with_allocator, DType, Result, Tensor};

fn caching() -> (Arc<HostCachingAllocator>, Arc<dyn DeviceAllocator>) {
    let a = Arc::new(HostCachingAllocator::new(HostBacking::new()));
    let d: Arc<dyn DeviceAllocator> = a.clone();
    (a, d)
}

fn param(shape: &[usize], seed: u64) -> Tensor {
    let mut g = strata_core::Generator::new(seed);
    let t = Tensor::randn_with(shape, DType::F32, &mut g).unwrap();
    let scale = 1.0 / (shape[shape.len() - 1] as f64).sqrt();
    t.mul(scale).unwrap().requires_grad_(true).unwrap()
}

fn bytes(ts: &[&Tensor]) -> usize {
    ts.iter().map(|t| t.nbytes()).sum()
}

struct Mlp {
    w1: Tensor,
    w2: Tensor,
}

impl Mlp {
    fn new() -> Mlp {
        Mlp {
            w1: param(&[256, 128], 1),
            w2: param(&[10, 256], 2),
        }
    }

    fn loss(&self, x: &Tensor) -> Result<Tensor> {
        let h = x.matmul(&self.w1.t()?)?.relu()?;
        h.matmul(&self.w2.t()?)?.tanh()?.mean(None, false)
    }
}

#[test]
fn backward_frees_the_graph_and_leaves_parameters_and_gradients() {
    let (cache, dynamic) = caching();
    with_allocator(&dynamic, || {
        let m = Mlp::new();
        let x = Tensor::ones(&[64, 128], DType::F32).unwrap();
        let params = bytes(&[&m.w1, &m.w2]);
        let base = cache.memory_allocated();
        let loss = m.loss(&x).unwrap();
        assert!(
            cache.memory_allocated() > base,
            "the forward holds activations"
        );
        loss.backward().unwrap();
        drop(loss);
        let grads = m.w1.grad().unwrap().nbytes() + m.w2.grad().unwrap().nbytes();
        assert_eq!(grads, params);
        assert_eq!(
            cache.memory_allocated(),
            base + grads,
            "after backward only parameters (and inputs) and gradients remain"
        );
        // set_to_none frees the gradients.
        m.w1.zero_grad(true).unwrap();
        m.w2.zero_grad(true).unwrap();
        assert_eq!(cache.memory_allocated(), base);
    });
}

#[test]
fn a_loss_kept_in_a_list_keeps_its_graph_and_an_item_does_not() {
    let (cache, dynamic) = caching();
    with_allocator(&dynamic, || {
        let m = Mlp::new();
        let x = Tensor::ones(&[256, 128], DType::F32).unwrap();
        // Keeping the loss tensors: every step's graph and activations stay alive.
        let mut kept = Vec::new();
        let mut sizes = vec![cache.memory_allocated()];
        for _ in 0..4 {
            kept.push(m.loss(&x).unwrap());
            sizes.push(cache.memory_allocated());
        }
        let steps: Vec<usize> = sizes.windows(2).map(|w| w[1] - w[0]).collect();
        // Activations of one step: relu's output (256x256 f32, saved by relu and by the
        // second product), tanh's output (256x10) and the loss.
        assert_eq!(steps[0], 256 * 256 * 4 + 256 * 10 * 4 + 512);
        assert!(steps.iter().all(|&s| s == steps[0]), "{steps:?}");
        drop(kept);
        // Keeping only the number: nothing grows.
        let start = cache.memory_allocated();
        let mut numbers = Vec::new();
        for _ in 0..4 {
            numbers.push(m.loss(&x).unwrap().item::<f32>().unwrap());
            assert_eq!(cache.memory_allocated(), start);
        }
        assert_eq!(numbers.len(), 4);
    });
}

fn block(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Result<Tensor> {
    let normed = layer_norm(x, &[x.shape()[1]], None, None, 1e-5)?;
    let h = linear(&normed, w1, None)?.gelu()?;
    x.add(&linear(&h, w2, None)?)
}

/// Runs 8 residual blocks (d = 256, hidden 1024, batch 1024) and returns the bytes held after
/// the forward and the peak during the step, both above the parameters and the input.
fn residual_step(use_checkpoint: bool) -> (usize, usize) {
    let (cache, dynamic) = caching();
    with_allocator(&dynamic, || {
        let d = 256;
        let ws: Vec<(Tensor, Tensor)> = (0..8)
            .map(|i| (param(&[4 * d, d], 10 + i), param(&[d, 4 * d], 20 + i)))
            .collect();
        let x = Tensor::ones(&[1024, d], DType::F32)
            .unwrap()
            .mul(0.1)
            .unwrap();
        let base = cache.memory_allocated();
        cache.reset_peak_memory_stats();
        let mut h = x.clone();
        for (w1, w2) in &ws {
            h = if use_checkpoint {
                let out = checkpoint(
                    |t: &[Tensor]| Ok(vec![block(&t[0], &t[1], &t[2])?]),
                    &[h.clone(), w1.clone(), w2.clone()],
                )
                .unwrap();
                out[0].clone()
            } else {
                block(&h, w1, w2).unwrap()
            };
        }
        let loss = h.mean(None, false).unwrap();
        let held = cache.memory_allocated() - base;
        loss.backward().unwrap();
        let peak = cache.max_memory_allocated() - base;
        for (w1, w2) in &ws {
            assert!(w1.grad().is_some() && w2.grad().is_some());
        }
        (held, peak)
    })
}

#[test]
fn checkpointing_every_block_keeps_a_fraction_of_the_activations() {
    let (held, peak) = residual_step(false);
    let (held_ckpt, peak_ckpt) = residual_step(true);
    eprintln!(
        "8 residual blocks: held after forward {held} -> {held_ckpt} bytes ({:.3}x), peak \
         {peak} -> {peak_ckpt} bytes ({:.3}x)",
        held_ckpt as f64 / held as f64,
        peak_ckpt as f64 / peak as f64
    );
    assert!(
        (held_ckpt as f64) <= 0.3 * held as f64,
        "held after forward: {held_ckpt} with checkpoints vs {held} without"
    );
    assert!(
        (peak_ckpt as f64) <= 0.6 * peak as f64,
        "peak during the step: {peak_ckpt} with checkpoints vs {peak} without"
    );
}

#[test]
fn checkpointed_gradients_equal_plain_ones_and_dropout_masks_repeat() {
    let w = param(&[16, 16], 3);
    let x = Tensor::ones(&[4, 16], DType::F32).unwrap();
    let f = |t: &[Tensor]| -> Result<Vec<Tensor>> {
        let noise = Tensor::rand(&t[0].shape(), DType::F32)?; // drawn from the global generator
        Ok(vec![t[0].matmul(&t[1].t()?)?.tanh()?.mul(&noise)?])
    };
    strata_core::manual_seed(7);
    f(&[x.clone(), w.clone()]).unwrap()[0]
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let plain = w.grad().unwrap().to_vec::<f32>().unwrap();
    w.zero_grad(true).unwrap();
    strata_core::manual_seed(7);
    checkpoint(f, &[x, w.clone()]).unwrap()[0]
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f32>().unwrap(), plain);
}

#[test]
fn a_bf16_pack_hook_halves_the_saved_activation_bytes() {
    let run = |hooked: bool| -> usize {
        let (cache, dynamic) = caching();
        with_allocator(&dynamic, || {
            let w = param(&[512, 512], 4);
            let x = Tensor::ones(&[512, 512], DType::F32).unwrap();
            let base = cache.memory_allocated();
            let forward = || -> Result<Tensor> {
                // matmul saves x (no grad: kept as it is); exp and tanh save their outputs.
                x.matmul(&w)?.exp()?.tanh()?.sum(None, false)
            };
            let loss = if hooked {
                saved_tensors_hooks(
                    |t: &Tensor| {
                        // Parameters are kept as they are (no copy); activations go to bf16.
                        if t.is_leaf() {
                            Ok(t.clone())
                        } else {
                            t.to(DType::BF16)
                        }
                    },
                    |t: &Tensor| t.to(DType::F32),
                    forward,
                )
                .unwrap()
            } else {
                forward().unwrap()
            };
            let held = cache.memory_allocated() - base;
            loss.backward().unwrap();
            assert!(w.grad().is_some());
            held
        })
    };
    let plain = run(false);
    let hooked = run(true);
    eprintln!(
        "saved activations: {plain} bytes in f32, {hooked} with the bf16 hook ({:.3}x)",
        hooked as f64 / plain as f64
    );
    // Held: the matmul output is freed either way; what stays is exp's and tanh's outputs
    // plus the loss. In bf16 that is half.
    let activation = 512 * 512 * 4;
    assert!(plain >= 2 * activation, "{plain}");
    assert!(
        hooked <= plain / 2 + 1024,
        "hooked {hooked} vs plain {plain}: saved activations should halve"
    );
}

#[test]
fn an_rnn_loop_grows_unless_it_detaches_its_hidden_state() {
    let run = |detach: bool| -> Vec<usize> {
        let (cache, dynamic) = caching();
        with_allocator(&dynamic, || {
            let w = param(&[64, 64], 5);
            let mut h = Tensor::zeros(&[32, 64], DType::F32).unwrap();
            let x = Tensor::ones(&[32, 64], DType::F32).unwrap();
            let mut sizes = Vec::new();
            for _ in 0..5 {
                let next = h.matmul(&w).unwrap().add(&x).unwrap().tanh().unwrap();
                let loss = next.sum(None, false).unwrap();
                loss.backward_with(None, true).unwrap();
                h = if detach { next.detach().unwrap() } else { next };
                w.zero_grad(true).unwrap();
                sizes.push(cache.memory_allocated());
            }
            sizes
        })
    };
    let grows = run(false);
    assert!(grows.windows(2).all(|w| w[1] > w[0]), "{grows:?}");
    let flat = run(true);
    assert!(flat.windows(2).all(|w| w[1] == w[0]), "{flat:?}");
}

#[test]
fn a_million_node_chain_drops_and_a_long_one_backpropagates_without_recursion() {
    let x = Tensor::ones(&[1], DType::F32)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let mut y = x.clone();
    for _ in 0..1_000_000 {
        y = y.mul(1.0).unwrap();
    }
    drop(y); // runs on the test thread's ordinary stack
    let mut y = x.clone();
    for _ in 0..200_000 {
        y = y.add(1.0).unwrap();
    }
    y.sum(None, false).unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![1.0]);
}

#[test]
fn inference_mode_tensors_are_refused_by_autograd() {
    let w = param(&[3], 6);
    let t = autograd::inference_mode(|| Tensor::ones(&[3], DType::F32)).unwrap();
    assert!(t.is_inference());
    assert_eq!(t.version(), 0);
    assert!(w.mul(&t).is_err(), "saving an inference tensor is refused");
    assert!(
        t.add_(1.0).is_err(),
        "in place outside inference mode is refused"
    );
    autograd::inference_mode(|| t.add_(1.0)).unwrap();
    assert_eq!(t.version(), 0, "inference tensors have no version counter");
}

#[test]
fn memory_allocated_during_backward_belongs_to_the_forward_line() {
    let (cache, dynamic) = caching();
    with_allocator(&dynamic, || {
        let w = param(&[64, 64], 7);
        let x = Tensor::ones(&[8, 64], DType::F32).unwrap();
        let forward_line = line!() + 1;
        let loss = x.matmul(&w).unwrap().sum(None, false).unwrap();
        loss.backward().unwrap();
        let grad = w.grad().unwrap();
        let sites = cache.live_allocations();
        assert!(
            sites
                .iter()
                .any(|s| s.site.file.ends_with("autograd_memory.rs")
                    && s.site.line == forward_line
                    && s.bytes >= grad.nbytes()),
            "the gradient of w is attributed to the matmul's line {forward_line}: {sites:?}"
        );
    });
}
