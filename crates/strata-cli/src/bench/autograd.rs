//! Autograd rows of `strata bench`: a training step (forward, backward) through 8 residual
//! MLP blocks, `x + W2·GELU(W1·LayerNorm(x))` with d = 256, hidden 1024 and batch 1024, run
//! plain and with every block checkpointed. The time rows compare with PyTorch on the same
//! model (`torch.utils.checkpoint` without reentrance); the memory rows are the caching
//! allocator's exact bytes, the plain step being their baseline.

use std::time::Duration;

use strata::prelude::*;
use strata_core::autograd::checkpoint;
use strata_core::nn::functional::{layer_norm, linear};

use super::{median, Row};

/// Model width.
const D: usize = 256;
/// Number of residual blocks.
const BLOCKS: usize = 8;
/// Rows in a batch.
const BATCH: usize = 1024;

/// One residual block.
fn block(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Result<Tensor> {
    let h = linear(&layer_norm(x, &[D], None, None, 1e-5)?, w1, None)?.gelu()?;
    x.add(&linear(&h, w2, None)?)
}

/// The blocks' weights, initialised as PyTorch's `nn.Linear` scales them.
fn weights() -> Result<Vec<(Tensor, Tensor)>> {
    let mut g = strata_core::Generator::new(0);
    let mut param = |shape: &[usize]| -> Result<Tensor> {
        let scale = 1.0 / (shape[1] as f64).sqrt();
        Tensor::randn_with(shape, DType::F32, &mut g)?
            .mul(scale)?
            .requires_grad_(true)
    };
    (0..BLOCKS)
        .map(|_| Ok((param(&[4 * D, D])?, param(&[D, 4 * D])?)))
        .collect()
}

/// The step's loss, with every block checkpointed or none.
fn forward(x: &Tensor, ws: &[(Tensor, Tensor)], checkpointed: bool) -> Result<Tensor> {
    let mut h = x.clone();
    for (w1, w2) in ws {
        h = if checkpointed {
            let out = checkpoint(
                |t: &[Tensor]| Ok(vec![block(&t[0], &t[1], &t[2])?]),
                &[h, w1.clone(), w2.clone()],
            )?;
            out.into_iter().next().ok_or_else(|| Error::Autograd {
                message: "checkpoint returned no output".into(),
            })?
        } else {
            block(&h, w1, w2)?
        };
    }
    h.mean(None, false)
}

/// A whole step: forward, backward, gradients cleared.
fn step(x: &Tensor, ws: &[(Tensor, Tensor)], checkpointed: bool) -> Result<()> {
    forward(x, ws, checkpointed)?.backward()?;
    for (w1, w2) in ws {
        w1.zero_grad(true)?;
        w2.zero_grad(true)?;
    }
    Ok(())
}

/// Bytes held after the forward and the peak during the step, above what was allocated
/// before it (the weights and the input).
fn step_memory(x: &Tensor, ws: &[(Tensor, Tensor)], checkpointed: bool) -> Result<(f64, f64)> {
    let base = memory::memory_allocated(Device::Cpu)?;
    memory::reset_peak_memory_stats(Device::Cpu)?;
    let loss = forward(x, ws, checkpointed)?;
    let held = memory::memory_allocated(Device::Cpu)? - base;
    loss.backward()?;
    drop(loss);
    let peak = memory::max_memory_allocated(Device::Cpu)? - base;
    for (w1, w2) in ws {
        w1.zero_grad(true)?;
        w2.zero_grad(true)?;
    }
    Ok((held as f64, peak as f64))
}

/// The autograd rows. `torch` holds PyTorch's figures by row name, when it ran.
pub fn rows(
    quick: bool,
    torch: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<Vec<Row>> {
    let reps = if quick { 1 } else { 5 };
    let ws = weights()?;
    let x = Tensor::randn(&[BATCH, D], DType::F32)?;
    let timed = |checkpointed: bool| -> Result<Duration> {
        let mut err = None;
        let t = median(reps, || {
            if let Err(e) = step(&x, &ws, checkpointed) {
                err = Some(e);
            }
        });
        err.map_or(Ok(t), Err)
    };
    let plain = timed(false)?.as_secs_f64() * 1e3;
    let ckpt = timed(true)?.as_secs_f64() * 1e3;
    let torch_fig = |name: &str| torch.and_then(|m| m.get(name)).and_then(|v| v.as_f64());
    let lower =
        |name: &str, strata: f64, baseline: Option<f64>, baseline_name: &str, unit: &str| Row {
            name: name.to_string(),
            strata,
            baseline,
            baseline_name: baseline_name.to_string(),
            ratio: baseline.map(|b| b / strata),
            unit: unit.to_string(),
        };
    let mut rows = Vec::new();
    for (name, figure) in [
        ("8 residual blocks: training step", plain),
        ("8 residual blocks: training step, checkpointed", ckpt),
    ] {
        let theirs = torch_fig(name);
        let label = if theirs.is_some() { "PyTorch" } else { "none" };
        rows.push(lower(name, figure, theirs, label, "ms"));
    }
    let name = "8 residual blocks: checkpointed / plain step time";
    let theirs = torch_fig(name);
    let label = if theirs.is_some() { "PyTorch" } else { "none" };
    rows.push(lower(name, ckpt / plain, theirs, label, "ratio"));

    let (held, peak) = step_memory(&x, &ws, false)?;
    let (held_ckpt, peak_ckpt) = step_memory(&x, &ws, true)?;
    const PLAIN: &str = "the same step without checkpoints";
    rows.push(lower(
        "8 residual blocks: bytes held after forward, checkpointed",
        held_ckpt / (1 << 20) as f64,
        Some(held / (1 << 20) as f64),
        PLAIN,
        "MiB",
    ));
    rows.push(lower(
        "8 residual blocks: peak allocated in the step, checkpointed",
        peak_ckpt / (1 << 20) as f64,
        Some(peak / (1 << 20) as f64),
        PLAIN,
        "MiB",
    ));
    Ok(rows)
}
