//! Optimizers with the allocator's statistics: steps after the first allocate nothing, the
//! state is exactly as large as the rule needs, optimizer-in-backward keeps one gradient
//! alive at a time and ends bitwise equal, and the combinations that cannot work are refused.

use std::sync::Arc;

use strata_alloc::{AllocatorConfig, CachingAllocator, Category, DeviceAllocator, HostBacking};
use strata_core::nn::functional::{cross_entropy, Reduction};
use strata_core::{manual_seed, with_allocator, DType, Result, Tensor};
use strata_nn::amp::GradScaler;
use strata_nn::optim::{clip_grad_norm_, clip_grad_value_, Adam, Optimizer, Rule, Sgd};
use strata_nn::state::StateDict;
use strata_nn::{Linear, Module, ReLU, Sequential};

/// The tests draw from the global generator: one at a time, so each sees its own seeds.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn caching() -> (Arc<CachingAllocator<HostBacking>>, Arc<dyn DeviceAllocator>) {
    let c = Arc::new(CachingAllocator::with_config(
        HostBacking::new(),
        AllocatorConfig::default(),
    ));
    let d: Arc<dyn DeviceAllocator> = c.clone();
    (c, d)
}

/// Blocks under 1 MiB are the request rounded up to 512 bytes.
fn block(bytes: usize) -> i64 {
    bytes.div_ceil(512) as i64 * 512
}

fn mlp(seed: u64) -> Result<Sequential> {
    manual_seed(seed);
    Sequential::new()
        .append(Linear::new(32, 64, true)?)?
        .append(ReLU::new())?
        .append(Linear::new(64, 10, true)?)
}

fn batch(seed: u64) -> Result<(Tensor, Tensor)> {
    manual_seed(seed);
    let x = Tensor::randn(&[16, 32], DType::F32)?;
    let y = Tensor::rand(&[16], DType::F32)?.mul(10.0)?.to(DType::I64)?; // truncates: classes 0..10
    Ok((x, y))
}

fn loss(model: &Sequential, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    cross_entropy(&model.call(x)?, y, Reduction::Mean)
}

fn rules() -> Vec<Rule> {
    vec![
        Rule::Sgd(Sgd {
            lr: 0.1,
            momentum: 0.9,
            ..Sgd::default()
        }),
        Rule::Sgd(Sgd {
            lr: 0.1,
            momentum: 0.9,
            nesterov: true,
            weight_decay: 1e-4,
            ..Sgd::default()
        }),
        Rule::Adam(Adam::default()),
        Rule::Adam(Adam {
            amsgrad: true,
            weight_decay: 0.01,
            ..Adam::default()
        }),
        Rule::Adam(Adam::adamw()),
    ]
}

fn optimizer(model: &Sequential, rule: Rule) -> Result<Optimizer> {
    match rule {
        Rule::Sgd(s) => Optimizer::sgd(model.parameters(), s),
        Rule::Adam(a) => Optimizer::adam(model.parameters(), a),
    }
}

#[test]
fn steps_after_the_first_allocate_nothing_and_state_is_exactly_what_the_rule_needs() -> Result<()> {
    let _serial = serial();
    for rule in rules() {
        let (c, a) = caching();
        with_allocator(&a, || -> Result<()> {
            let model = mlp(0)?;
            let params = model.parameters();
            let param_bytes: i64 = params.iter().map(|p| block(p.nbytes())).sum();
            let mut opt = optimizer(&model, rule)?;
            let (x, y) = batch(1)?;
            loss(&model, &x, &y)?.backward()?;
            opt.step()?;
            let allocations = || c.memory_stats().allocation.all.allocated;
            for _ in 0..4 {
                let before = allocations();
                opt.step()?;
                assert_eq!(
                    allocations(),
                    before,
                    "{rule:?}: a step after the first allocated"
                );
            }
            let copies = match rule {
                Rule::Sgd(_) => 1,
                Rule::Adam(a) if a.amsgrad => 3,
                Rule::Adam(_) => 2,
            };
            let state = c
                .memory_stats()
                .category_bytes
                .get(Category::OptimizerState)
                .current;
            assert_eq!(state, copies * param_bytes, "{rule:?}");
            let exact: usize = params.iter().map(Tensor::nbytes).sum();
            assert_eq!(opt.state_bytes(), copies as usize * exact);
            Ok(())
        })?;
    }
    Ok(())
}

/// Three Adam steps; returns the parameters' values and the gradient category's peak
/// during the last step (from just before its forward).
fn train_three_steps(in_backward: bool) -> Result<(Vec<Vec<f32>>, i64, Vec<usize>)> {
    let (c, a) = caching();
    with_allocator(&a, || {
        let model = mlp(0)?;
        let mut opt = Optimizer::adam(model.parameters(), Adam::default())?;
        opt.set_step_in_backward(in_backward)?;
        let mut peak = 0;
        for i in 0..3 {
            let (x, y) = batch(10 + i)?;
            c.reset_peak_memory_stats();
            loss(&model, &x, &y)?.backward()?;
            opt.step()?;
            opt.zero_grad(true)?;
            peak = c.memory_stats().category_bytes.get(Category::Gradient).peak;
        }
        let values = model
            .parameters()
            .iter()
            .map(|p| p.to_vec::<f32>())
            .collect::<Result<_>>()?;
        let sizes = model.parameters().iter().map(Tensor::nbytes).collect();
        Ok((values, peak, sizes))
    })
}

#[test]
fn optimizer_in_backward_holds_one_gradient_at_a_time_and_ends_bitwise_equal() -> Result<()> {
    let _serial = serial();
    let (plain, plain_peak, sizes) = train_three_steps(false)?;
    let (early, early_peak, _) = train_three_steps(true)?;
    assert!(plain == early, "parameters differ after 3 Adam steps");
    let largest = sizes.iter().map(|&b| block(b)).max().unwrap_or(0);
    let sum: i64 = sizes.iter().map(|&b| block(b)).sum();
    assert_eq!(early_peak, largest);
    assert_eq!(plain_peak, sum);
    Ok(())
}

#[test]
fn optimizer_in_backward_refuses_what_needs_every_gradient() -> Result<()> {
    let _serial = serial();
    let model = mlp(0)?;
    let (x, y) = batch(1)?;
    // Gradient accumulation: gradients already there.
    loss(&model, &x, &y)?.backward()?;
    let mut opt = Optimizer::adam(model.parameters(), Adam::default())?;
    let e = opt.set_step_in_backward(true).unwrap_err().to_string();
    assert!(
        e.contains("optimizer-in-backward") && e.contains("gradient accumulation"),
        "{e}"
    );
    opt.zero_grad(true)?;
    opt.set_step_in_backward(true)?;
    // clip_grad_norm_ and clip_grad_value_.
    let e = clip_grad_norm_(&model.parameters(), 1.0, 2.0, false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("optimizer-in-backward") && e.contains("clip_grad_norm_"),
        "{e}"
    );
    assert!(clip_grad_value_(&model.parameters(), 1.0).is_err());
    // A GradScaler: refused in backward, before any parameter moves.
    let before: Vec<Vec<f32>> = model
        .parameters()
        .iter()
        .map(|p| p.to_vec())
        .collect::<Result<_>>()?;
    let mut scaler = GradScaler::new();
    let e = scaler
        .scale(&loss(&model, &x, &y)?)?
        .backward()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("optimizer-in-backward") && e.contains("GradScaler"),
        "{e}"
    );
    let after: Vec<Vec<f32>> = model
        .parameters()
        .iter()
        .map(|p| p.to_vec())
        .collect::<Result<_>>()?;
    assert_eq!(before, after);
    let e = scaler.step(&mut opt).unwrap_err().to_string();
    assert!(
        e.contains("optimizer-in-backward") && e.contains("GradScaler"),
        "{e}"
    );
    // Turned off, everything works again.
    drop(scaler);
    opt.set_step_in_backward(false)?;
    opt.zero_grad(true)?;
    loss(&model, &x, &y)?.backward()?;
    clip_grad_norm_(&model.parameters(), 1.0, 2.0, false)?;
    opt.step()
}

#[test]
fn a_state_dict_saved_and_loaded_continues_training_identically() -> Result<()> {
    let _serial = serial();
    let dir = tempfile::tempdir()
        .map_err(|e| strata_core::Error::argument("test", e.to_string(), None))?;
    let path = dir.path().join("adam.safetensors");
    let run = |model: &Sequential, opt: &mut Optimizer, seed: u64| -> Result<()> {
        let (x, y) = batch(seed)?;
        opt.zero_grad(true)?;
        loss(model, &x, &y)?.backward()?;
        opt.step()
    };
    let a = mlp(0)?;
    let mut oa = Optimizer::adam(
        a.parameters(),
        Adam {
            amsgrad: true,
            ..Adam::default()
        },
    )?;
    run(&a, &mut oa, 1)?;
    run(&a, &mut oa, 2)?;
    oa.state_dict()
        .save(&path)
        .map_err(|e| strata_core::Error::argument("test", e.to_string(), None))?;
    // A copy of the model and a fresh optimizer that loads the saved state.
    let b = mlp(0)?;
    for (pb, pa) in b.parameters().iter().zip(a.parameters()) {
        pb.detach()?.copy_(&pa)?;
    }
    let mut ob = Optimizer::adam(
        b.parameters(),
        Adam {
            amsgrad: true,
            ..Adam::default()
        },
    )?;
    let saved = StateDict::load(&path)
        .map_err(|e| strata_core::Error::argument("test", e.to_string(), None))?;
    assert!(saved.get("state.0.max_exp_avg_sq").is_some());
    assert_eq!(saved.metadata("optimizer"), Some("Adam"));
    ob.load_state_dict(&saved)?;
    assert_eq!(ob.step_count(0), Some(2));
    run(&a, &mut oa, 3)?;
    run(&b, &mut ob, 3)?;
    for (pa, pb) in a.parameters().iter().zip(b.parameters()) {
        assert_eq!(pa.to_vec::<f32>()?, pb.to_vec::<f32>()?);
    }
    // A state dict of another kind is refused and changes nothing.
    let mut sgd = Optimizer::sgd(b.parameters(), Sgd::default())?;
    assert!(sgd.load_state_dict(&saved).is_err());
    Ok(())
}

#[test]
fn clip_grad_norm_returns_the_total_and_scales_every_gradient() -> Result<()> {
    let _serial = serial();
    let a = Tensor::from_vec(vec![3.0f32, 4.0], &[2])?.requires_grad_(true)?;
    let b = Tensor::from_vec(vec![12.0f32], &[1])?.requires_grad_(true)?;
    a.set_grad(Some(Tensor::from_vec(vec![3.0f32, 4.0], &[2])?))?;
    b.set_grad(Some(Tensor::from_vec(vec![12.0f32], &[1])?))?;
    let total = clip_grad_norm_(&[a.clone(), b.clone()], 6.5, 2.0, false)?;
    assert_eq!(total.item::<f32>()?, 13.0);
    let coef = 6.5f32 / (13.0 + 1e-6);
    assert_eq!(
        b.grad().map(|g| g.to_vec::<f32>()).transpose()?,
        Some(vec![12.0 * coef])
    );
    let inf = clip_grad_norm_(&[a.clone(), b.clone()], 1.0, f64::INFINITY, false)?;
    assert!((inf.item::<f32>()? - 12.0 * coef).abs() < 1e-5);
    // A non-finite total is refused with error_if_nonfinite, and nothing is scaled.
    b.set_grad(Some(Tensor::from_vec(vec![f32::INFINITY], &[1])?))?;
    let before = a.grad().map(|g| g.to_vec::<f32>()).transpose()?;
    assert!(clip_grad_norm_(&[a.clone(), b.clone()], 1.0, 2.0, true).is_err());
    assert_eq!(a.grad().map(|g| g.to_vec::<f32>()).transpose()?, before);
    clip_grad_value_(std::slice::from_ref(&a), 1.0)?;
    assert!(a
        .grad()
        .map(|g| g.to_vec::<f32>())
        .transpose()?
        .is_some_and(|g| g.iter().all(|v| v.abs() <= 1.0)));
    Ok(())
}

#[test]
fn grad_scaler_follows_pytorch_rules() -> Result<()> {
    let _serial = serial();
    let w = Tensor::ones(&[2], DType::F32)?.requires_grad_(true)?;
    let mut opt = Optimizer::sgd(
        [w.clone()],
        Sgd {
            lr: 0.1,
            ..Sgd::default()
        },
    )?;
    let mut scaler = strata_nn::amp::GradScaler::with_config(strata_nn::amp::GradScalerConfig {
        init_scale: 4.0,
        growth_interval: 2,
        ..Default::default()
    })?;
    // Before the first scale, nothing else may run.
    assert!(scaler.update().is_err());
    for _ in 0..2 {
        scaler.scale(&w.sum(None, false)?)?.backward()?;
        scaler.unscale_(&mut opt)?;
        assert!(
            scaler.unscale_(&mut opt).is_err(),
            "a second unscale_ before update"
        );
        assert_eq!(
            w.grad().map(|g| g.to_vec::<f32>()).transpose()?,
            Some(vec![1.0, 1.0])
        );
        assert!(scaler.step(&mut opt)?);
        assert!(
            scaler.step(&mut opt).is_err(),
            "a second step before update"
        );
        scaler.update()?;
        opt.zero_grad(true)?;
    }
    assert_eq!(
        scaler.get_scale(),
        8.0,
        "grown after growth_interval good steps"
    );
    // An overflow skips the step and backs off.
    let before = w.to_vec::<f32>()?;
    scaler
        .scale(&w.sum(None, false)?.mul(f32::INFINITY as f64)?)?
        .backward()?;
    assert!(!scaler.step(&mut opt)?);
    scaler.update()?;
    assert_eq!(w.to_vec::<f32>()?, before);
    assert_eq!(scaler.get_scale(), 4.0);
    assert_eq!(scaler.state_dict().growth_tracker, 0);
    // f16 gradients are refused.
    let h = Tensor::ones(&[2], DType::F16)?.requires_grad_(true)?;
    let mut oh = Optimizer::sgd([h.clone()], Sgd::default())?;
    scaler.scale(&h.sum(None, false)?)?.backward()?;
    let e = scaler.unscale_(&mut oh).unwrap_err().to_string();
    assert!(e.contains("f16"), "{e}");
    Ok(())
}

#[test]
fn param_groups_have_their_own_learning_rates() -> Result<()> {
    let _serial = serial();
    use strata_nn::optim::ParamGroup;
    let a = Tensor::ones(&[1], DType::F32)?.requires_grad_(true)?;
    let b = Tensor::ones(&[1], DType::F32)?.requires_grad_(true)?;
    let mut opt = Optimizer::with_groups(
        vec![
            ParamGroup::new([a.clone()]),
            ParamGroup::new([b.clone()]).lr(1.0),
        ],
        Rule::Sgd(Sgd {
            lr: 0.1,
            ..Sgd::default()
        }),
    )?;
    a.add(&b)?.sum(None, false)?.backward()?;
    opt.step()?;
    assert!((a.item::<f32>()? - 0.9).abs() < 1e-7);
    assert_eq!(b.item::<f32>()?, 0.0);
    // A parameter given twice is refused.
    assert!(Optimizer::sgd([a.clone(), a.clone()], Sgd::default()).is_err());
    Ok(())
}

#[test]
fn a_training_step_peaks_at_the_gradients_plus_one_activation_gradient() -> Result<()> {
    let _serial = serial();
    let (c, a) = caching();
    with_allocator(&a, || -> Result<()> {
        let model = mlp(0)?;
        let mut opt = Optimizer::sgd(
            model.parameters(),
            Sgd {
                lr: 0.1,
                momentum: 0.9,
                ..Sgd::default()
            },
        )?;
        let (x, y) = batch(1)?;
        for step in 0..3 {
            let base = c.memory_stats().allocated_bytes.all.current;
            c.reset_peak_memory_stats();
            loss(&model, &x, &y)?.backward()?;
            opt.step()?;
            opt.zero_grad(true)?;
            let peak = c.memory_stats().allocated_bytes.all.peak - base;
            let grads: i64 = model.parameters().iter().map(|p| block(p.nbytes())).sum();
            // The widest activation gradient: [16, 64] f32, and the loss's small ones. A
            // weight's gradient is computed in place of its product, never copied into
            // `.grad`, and no gradient is multiplied by a factor of one.
            let activation = block(16 * 64 * 4);
            if step > 0 {
                assert!(
                    peak <= grads + 2 * activation,
                    "step {step}: peak {peak} above gradients {grads} + activations"
                );
            }
        }
        Ok(())
    })
}
