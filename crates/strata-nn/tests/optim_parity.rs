//! Training parity with PyTorch: an MLP trained from the same initial weights on the same
//! batches gives PyTorch's first 20 losses within 1e-4 relative, for each optimizer (and a
//! scheduler with clipping, and a warm-up sequence). The fixture was written by
//! `scripts/optim-fixtures.py make`, which records PyTorch's losses; the test needs no torch.

use std::path::Path;

use strata_core::nn::functional::{cross_entropy, Reduction};
use strata_core::{Error, Result, Tensor};
use strata_nn::optim::{clip_grad_norm_, Adam, Optimizer, Schedule, Scheduler, Sgd};
use strata_nn::state::{LoadOptions, StateDict, StateDictExt};
use strata_nn::{Linear, Module, ReLU, Sequential};

const STEPS: usize = 20;

fn fixture() -> Result<StateDict> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch/optim.safetensors");
    StateDict::load(&path).map_err(|e| Error::argument("fixture", e.to_string(), None))
}

fn get(d: &StateDict, key: &str) -> Result<Tensor> {
    d.get(key)
        .cloned()
        .ok_or_else(|| Error::argument("fixture", format!("{key} is missing"), None))
}

/// The MLP with the fixture's initial weights.
fn model(d: &StateDict) -> Result<Sequential> {
    let m = Sequential::new()
        .append(Linear::new(20, 32, true)?)?
        .append(ReLU::new())?
        .append(Linear::new(32, 5, true)?)?;
    let mut init = StateDict::new();
    for key in ["0.weight", "0.bias", "2.weight", "2.bias"] {
        init.insert(key, get(d, &format!("init.{key}"))?);
    }
    m.load_state_dict(&init, LoadOptions::default())
        .map_err(|e| Error::argument("fixture", e.to_string(), None))?;
    Ok(m)
}

/// Trains 20 steps as the fixture script does and compares every loss with PyTorch's.
fn check(
    name: &str,
    make: impl FnOnce(Vec<Tensor>) -> Result<Optimizer>,
    schedule: Option<Schedule>,
    clip: Option<f64>,
) -> Result<()> {
    let d = fixture()?;
    let m = model(&d)?;
    let mut opt = make(m.parameters())?;
    let mut sched = schedule.map(|s| Scheduler::new(&mut opt, s)).transpose()?;
    let (x, y) = (get(&d, "x")?, get(&d, "y")?);
    let expected = get(&d, &format!("losses.{name}"))?.to_vec::<f64>()?;
    for (i, want) in expected.iter().enumerate().take(STEPS) {
        let i = i as i64;
        let loss = cross_entropy(
            &m.call(&x.select(0, i)?)?,
            &y.select(0, i)?,
            Reduction::Mean,
        )?;
        let got = loss.item::<f32>()? as f64;
        assert!(
            (got - want).abs() <= 1e-4 * want.abs(),
            "{name}: loss {i} is {got}, PyTorch's {want}"
        );
        opt.zero_grad(true)?;
        loss.backward()?;
        if let Some(max) = clip {
            clip_grad_norm_(&m.parameters(), max, 2.0, false)?;
        }
        opt.step()?;
        if let Some(s) = sched.as_mut() {
            s.step(&mut opt)?;
        }
    }
    Ok(())
}

#[test]
fn sgd_with_momentum_and_weight_decay_matches_pytorch() -> Result<()> {
    let sgd = Sgd {
        lr: 0.05,
        momentum: 0.9,
        weight_decay: 1e-4,
        ..Sgd::default()
    };
    check("sgd_momentum", |p| Optimizer::sgd(p, sgd), None, None)
}

#[test]
fn nesterov_matches_pytorch() -> Result<()> {
    let sgd = Sgd {
        lr: 0.05,
        momentum: 0.9,
        nesterov: true,
        ..Sgd::default()
    };
    check("sgd_nesterov", |p| Optimizer::sgd(p, sgd), None, None)
}

#[test]
fn adam_matches_pytorch() -> Result<()> {
    check("adam", |p| Optimizer::adam(p, Adam::default()), None, None)
}

#[test]
fn adamw_matches_pytorch() -> Result<()> {
    check("adamw", |p| Optimizer::adam(p, Adam::adamw()), None, None)
}

#[test]
fn amsgrad_matches_pytorch() -> Result<()> {
    let adam = Adam {
        amsgrad: true,
        weight_decay: 1e-4,
        ..Adam::default()
    };
    check("amsgrad", |p| Optimizer::adam(p, adam), None, None)
}

#[test]
fn a_cosine_schedule_with_clipping_matches_pytorch() -> Result<()> {
    let sgd = Sgd {
        lr: 0.1,
        momentum: 0.5,
        dampening: 0.1,
        ..Sgd::default()
    };
    let cosine = Schedule::Cosine {
        t_max: 10,
        eta_min: 0.001,
    };
    check(
        "sgd_cosine_clipped",
        |p| Optimizer::sgd(p, sgd),
        Some(cosine),
        Some(0.5),
    )
}

#[test]
fn a_warm_up_then_step_decay_matches_pytorch() -> Result<()> {
    let adamw = Adam {
        lr: 3e-3,
        betas: (0.8, 0.99),
        ..Adam::adamw()
    };
    let sequence = Schedule::Sequential {
        schedules: vec![
            Schedule::Linear {
                start_factor: 0.25,
                end_factor: 1.0,
                total_iters: 4,
            },
            Schedule::Step {
                step_size: 5,
                gamma: 0.5,
            },
        ],
        milestones: vec![4],
    };
    check(
        "adamw_warmup_then_step",
        |p| Optimizer::adam(p, adamw),
        Some(sequence),
        None,
    )
}
