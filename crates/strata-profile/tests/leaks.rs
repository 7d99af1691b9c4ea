//! The leak watch: one tensor kept per step is caught, a hook that captures its own tensor
//! is caught, and a clean training loop (optimizer, prefetching loader, scheduler, gradient
//! accumulation) raises no alarm over 50 steps.

mod common;

use std::sync::Arc;

use strata_core::{DType, Device, Tensor};
use strata_data::{DataLoader, LoaderOptions, TensorDataset};
use strata_nn::optim::{Adam, Optimizer, Schedule, Scheduler};
use strata_nn::{Module, Sequential};
use strata_profile::{FindingKind, GradWatch, GraphWatch, LeakWatch};

type Res = Result<(), Box<dyn std::error::Error>>;

fn model() -> strata_core::Result<Sequential> {
    common::mlp(16, 32, 1)
}

fn mse(pred: &Tensor, y: &Tensor) -> strata_core::Result<Tensor> {
    let d = pred.sub(y)?;
    d.mul(&d)?.mean(None, false)
}

#[test]
fn one_tensor_kept_per_step_is_caught_with_its_site() -> Res {
    let _serial = common::serial();
    let m = model()?;
    let x = Tensor::randn(&[64, 16], DType::F32)?;
    let mut watch = LeakWatch::new(Device::Cpu);
    let mut kept = Vec::new();
    let mut found = Vec::new();
    for step in 0..10 {
        let pred = m.call(&x)?;
        kept.push(pred.detach()); // the pitfall: a tensor from every step, kept
        found.extend(watch.step()?);
        if step < 7 {
            assert!(found.is_empty(), "step {step}: {found:?}");
        }
    }
    println!("{}", found[0]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, FindingKind::Leak);
    // The model's last layer (scope "2") made it: 64 x 1 floats, one 512-byte block a step.
    assert!(found[0].message.contains("(2, "), "{}", found[0]);
    assert!(found[0].message.contains("+512 B per step"), "{}", found[0]);
    // The fix: keep a number, not a tensor.
    let mut watch = LeakWatch::new(Device::Cpu);
    drop(kept);
    let mut losses = Vec::new();
    for _ in 0..10 {
        let pred = m.call(&x)?;
        losses.push(pred.mean(None, false)?.item::<f32>()?);
        assert!(watch.step()?.is_empty());
    }
    Ok(())
}

#[test]
fn a_hook_that_captures_its_own_tensor_is_caught() -> Res {
    let _serial = common::serial();
    let w = Tensor::randn(&[256], DType::F32)?.requires_grad_(true)?;
    let mut watch = LeakWatch::new(Device::Cpu);
    let mut found = Vec::new();
    for _ in 0..10 {
        let t = w.mul(2.0)?;
        let own = t.clone();
        // The hook holds `t`, `t`'s graph node holds the hook: a cycle of `Arc`s whose
        // memory never returns, though the loop drops every binding.
        t.register_hook(move |g| {
            let _ = own.shape();
            Ok(Some(g.clone()))
        })?;
        t.sum(None, false)?.backward()?;
        w.zero_grad(true)?;
        drop(t);
        found.extend(watch.step()?);
    }
    assert!(
        found
            .iter()
            .any(|f| f.message.contains("(mul)") && f.message.contains("+1.0 KiB per step")),
        "{found:?}"
    );
    // The fix: the hook holds a weak handle, which does not keep the tensor alive.
    let mut watch = LeakWatch::new(Device::Cpu);
    let before = strata_core::memory_allocated(Device::Cpu)?;
    for _ in 0..10 {
        let t = w.mul(2.0)?;
        let own = t.downgrade_handle();
        t.register_hook(move |g| {
            let _ = own.upgrade().map(|t| t.shape());
            Ok(Some(g.clone()))
        })?;
        t.sum(None, false)?.backward()?;
        w.zero_grad(true)?;
        drop(t);
        assert!(watch.step()?.is_empty());
    }
    assert_eq!(strata_core::memory_allocated(Device::Cpu)?, before);
    Ok(())
}

#[test]
fn a_clean_training_loop_raises_no_alarm() -> Res {
    let _serial = common::serial();
    let m = model()?;
    let mut opt = Optimizer::adam(m.parameters(), Adam::default())?;
    let mut sched = Scheduler::new(
        &mut opt,
        Schedule::Step {
            step_size: 2,
            gamma: 0.5,
        },
    )?;
    let grads = GradWatch::attach(&mut opt);
    grads.declare_accumulation(4);
    let x = Tensor::randn(&[400, 16], DType::F32)?;
    let y = Tensor::randn(&[400, 1], DType::F32)?;
    let data = Arc::new(TensorDataset::new(vec![x, y])?);
    let mut loader = DataLoader::new(
        data,
        LoaderOptions {
            batch_size: 8,
            shuffle: true,
            num_workers: 2,
            prefetch_factor: Some(2),
            ..LoaderOptions::default()
        },
    )?;
    let mut leaks = LeakWatch::new(Device::Cpu);
    let mut graphs = GraphWatch::new();
    let mut steps = 0;
    for batch in loader.epoch()? {
        let batch = batch?;
        let loss = mse(&m.call(&batch.tensors[0])?, &batch.tensors[1])?.div(4.0)?;
        loss.backward()?;
        steps += 1;
        if steps % 4 == 0 {
            opt.step()?;
            opt.zero_grad(true)?;
            sched.step(&mut opt)?;
        }
        let found = leaks.step()?;
        assert!(found.is_empty(), "step {steps}: {found:?}");
        let found = graphs.step();
        assert!(found.is_empty(), "step {steps}: {found:?}");
    }
    assert_eq!(steps, 50);
    assert!(grads.findings().is_empty(), "{:?}", grads.findings());
    Ok(())
}
