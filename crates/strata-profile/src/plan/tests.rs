//! Plans equal the steps they plan, byte for byte, and leave the planned model alone.

use std::sync::Arc;

use strata_alloc::{DeviceAllocator, HostCachingAllocator};
use strata_core::nn::functional::{cross_entropy, Reduction};
use strata_core::{with_allocator, DType, Tensor};
use strata_nn::module::shared;
use strata_nn::optim::{Adam, Optimizer, Sgd};
use strata_nn::{Linear, Module, ReLU, Sequential};

use super::*;

fn net(hidden: usize) -> strata_core::Result<Arc<dyn Module>> {
    let s = Sequential::new();
    s.push(shared(Linear::new(64, hidden, true)?))?;
    s.push(shared(ReLU::new()))?;
    s.push(shared(Linear::new(hidden, 10, true)?))?;
    Ok(shared(s))
}

fn loss(m: &dyn Module, batch: &[Tensor]) -> strata_core::Result<Tensor> {
    cross_entropy(&m.call(&batch[0])?, &batch[1], Reduction::Mean)
}

fn inputs(b: usize) -> Vec<InputSpec> {
    vec![
        InputSpec::new(&[b, 64], DType::F32),
        InputSpec::new(&[b], DType::I64),
    ]
}

/// The same step on the CPU: a warm-up step, then one on a fresh allocator; its peaks.
fn measured(model: &dyn Module, opt: &mut Optimizer, b: usize) -> (usize, usize, usize) {
    let x = Tensor::randn(&[b, 64], DType::F32).expect("x");
    let y = Tensor::zeros(&[b], DType::I64).expect("y");
    let step = |opt: &mut Optimizer| {
        loss(model, &[x.clone(), y.clone()])
            .and_then(|l| l.backward())
            .and_then(|_| opt.step())
            .and_then(|_| opt.zero_grad(true))
            .expect("a step")
    };
    step(opt);
    let fresh = Arc::new(HostCachingAllocator::host().expect("an allocator"));
    let routed: Arc<dyn DeviceAllocator> = fresh.clone();
    with_allocator(&routed, || step(opt));
    let s = fresh.memory_stats();
    (
        s.allocated_bytes.all.peak as usize,
        s.reserved_bytes.all.peak as usize,
        s.requested_bytes.all.peak as usize,
    )
}

#[test]
fn a_plan_equals_the_measured_step_to_the_byte() {
    for (b, hidden, adam) in [(8, 32, true), (100, 300, false), (256, 1024, true)] {
        let model = net(hidden).expect("a model");
        let mut opt = if adam {
            Optimizer::adam(model.parameters(), Adam::default())
        } else {
            Optimizer::sgd(
                model.parameters(),
                Sgd {
                    lr: 0.1,
                    momentum: 0.9,
                    ..Sgd::default()
                },
            )
        }
        .expect("an optimizer");
        let report = plan(
            model.as_ref(),
            &opt,
            || net(hidden),
            &inputs(b),
            loss,
            &StepOptions::default(),
        )
        .expect("a plan");
        let real = measured(model.as_ref(), &mut opt, b);
        assert_eq!(
            (
                report.peak_allocated,
                report.peak_reserved,
                report.peak_requested
            ),
            real,
            "batch {b}, hidden {hidden}"
        );
        // The timeline's highest point is the requested peak.
        let top = report.timeline.iter().map(|p| p.live).max().unwrap_or(0);
        assert_eq!(top, report.peak_requested);
        let at_peak: usize = report.sites_at_peak.iter().map(|g| g.requested_bytes).sum();
        assert_eq!(at_peak, report.peak_requested);
        let scopes: usize = report
            .scopes_at_peak
            .iter()
            .map(|g| g.requested_bytes)
            .sum();
        assert_eq!(scopes, at_peak);
    }
}

#[test]
fn planning_leaves_the_real_model_and_the_cpu_alone() {
    let model = net(128).expect("a model");
    let opt = Optimizer::adam(model.parameters(), Adam::default()).expect("an optimizer");
    let before: Vec<(Vec<f32>, u64)> = model
        .parameters()
        .iter()
        .map(|p| (p.to_vec::<f32>().expect("values"), p.storage_id()))
        .collect();
    // Any CPU allocation this thread makes while planning would land here.
    let trap = Arc::new(HostCachingAllocator::host().expect("an allocator"));
    let routed: Arc<dyn DeviceAllocator> = trap.clone();
    let report = with_allocator(&routed, || {
        plan(
            model.as_ref(),
            &opt,
            || net(128),
            &inputs(32),
            loss,
            &StepOptions::default(),
        )
    })
    .expect("a plan");
    assert_eq!(
        trap.memory_stats().allocation.all.allocated,
        0,
        "no CPU allocation"
    );
    assert!(report.peak_allocated > 0);
    let after: Vec<(Vec<f32>, u64)> = model
        .parameters()
        .iter()
        .map(|p| (p.to_vec::<f32>().expect("values"), p.storage_id()))
        .collect();
    assert_eq!(before, after);
    assert!(model.parameters().iter().all(|p| p.grad().is_none()));
    assert_eq!(opt.state_bytes(), 0, "the real optimizer made no state");
}

#[test]
fn a_replica_unlike_its_model_is_refused_with_the_difference() {
    let model = net(128).expect("a model");
    let opt = Optimizer::adam(model.parameters(), Adam::default()).expect("an optimizer");
    let err = plan(
        model.as_ref(),
        &opt,
        || net(64),
        &inputs(8),
        loss,
        &StepOptions::default(),
    )
    .expect_err("a different hidden size");
    let text = err.to_string();
    assert!(text.contains("`0.weight` [128, 64]"), "{text}");
    assert!(text.contains("[64, 64]"), "{text}");
}

#[test]
fn autocast_and_stepping_in_backward_change_the_plan() {
    let model = net(512).expect("a model");
    let opt = Optimizer::adam(model.parameters(), Adam::default()).expect("an optimizer");
    let run = |options: StepOptions| {
        plan(
            model.as_ref(),
            &opt,
            || net(512),
            &inputs(64),
            loss,
            &options,
        )
        .expect("a plan")
    };
    let plain = run(StepOptions::default());
    let in_backward = run(StepOptions {
        optimizer_in_backward: true,
        ..StepOptions::default()
    });
    let bf16 = run(StepOptions {
        autocast: Some(DType::BF16),
        ..StepOptions::default()
    });
    assert!(in_backward.categories_at_peak["gradient"] < plain.categories_at_peak["gradient"]);
    assert_ne!(bf16.peak_requested, plain.peak_requested);
    // A tighter device than the model needs: the plan says no, with the numbers, instead of
    // failing while setting up.
    let under = |capacity: usize| {
        run(StepOptions {
            allocators: PlanOptions {
                capacity: Some(capacity),
                ..PlanOptions::default()
            },
            ..StepOptions::default()
        })
    };
    let tight = under(64 << 10);
    let check = tight.limit.expect("a capacity was given");
    assert!(!check.fits());
    assert_eq!(check.limit, 64 << 10);
    assert!(check.needs_allocated >= tight.held_allocated);
    assert!(check.needs_reserved >= check.needs_allocated);
    let needed = check.needed();
    assert!(check.needs_allocated <= needed && needed <= check.needs_reserved);
    let text = tight.text();
    assert!(text.starts_with("does not fit: the step needs "), "{text}");
    assert!(text.contains("; the limit is 64.00 KiB ("), "{text}");
    let roomy = under(1 << 40);
    assert!(roomy.limit.is_some_and(|c| c.fits()));
    assert_eq!(roomy.peak_reserved, tight.peak_reserved);
    // At exactly the limit it names, it fits.
    assert!(under(needed).limit.is_some_and(|c| c.fits()));
}
