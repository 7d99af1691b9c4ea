//! MLP rows of `strata bench`: training steps of an MLP 784-1024-1024-10 on a batch of 256
//! (forward, cross-entropy, backward, optimizer step, gradients dropped) with SGD (momentum
//! 0.9), Adam, and Adam under bf16 autocast, each beside PyTorch on the same model, batch
//! and threads (PyTorch's peak from its profiler's memory events). Also: the f32 SGD step
//! against 1.3× its matrix FLOPs at this run's `sgemm 1024` rate, the bf16 step against the
//! f32 one (naming the bf16 path), and Adam stepping in backward against Adam after it.

use std::time::Duration;

use strata::nn::optim::{Adam, Optimizer, Sgd};
use strata::nn::{Linear, Module, ReLU, Sequential};
use strata::prelude::*;
use strata_core::autocast::with_autocast;
use strata_core::nn::functional::{cross_entropy, Reduction};

use super::{median, torch_row, Row};

const BATCH: usize = 256;
/// Layer widths, input first.
const WIDTHS: [usize; 4] = [784, 1024, 1024, 10];
const NAME: &str = "MLP 784-1024-1024-10, batch 256";

/// The model, its batch, and how its loss is computed.
struct Mlp {
    model: Sequential,
    x: Tensor,
    labels: Tensor,
}

impl Mlp {
    fn new() -> Result<Mlp> {
        manual_seed(0);
        let mut model = Sequential::new();
        for (i, w) in WIDTHS.windows(2).enumerate() {
            if i > 0 {
                model = model.append(ReLU::new())?;
            }
            model = model.append(Linear::new(w[0], w[1], true)?)?;
        }
        let x = Tensor::randn(&[BATCH, WIDTHS[0]], DType::F32)?;
        let labels: Vec<i64> = (0..BATCH as i64).map(|i| (i * 7) % 10).collect();
        let labels = Tensor::from_vec(labels, &[BATCH])?;
        Ok(Mlp { model, x, labels })
    }

    /// One step: the loss (in bf16 autocast when asked), backward, the optimizer's step,
    /// gradients dropped.
    fn step(&self, opt: &mut Optimizer, bf16: bool) -> Result<()> {
        let forward = || cross_entropy(&self.model.call(&self.x)?, &self.labels, Reduction::Mean);
        let loss = if bf16 {
            with_autocast(DType::BF16, forward)??
        } else {
            forward()?
        };
        loss.backward()?;
        opt.step()?;
        opt.zero_grad(true)
    }

    /// Median step time and the step's peak allocated bytes (MiB) above what was allocated
    /// before it, once the optimizer's state exists.
    fn measure(&self, opt: &mut Optimizer, bf16: bool, reps: usize) -> Result<(f64, f64)> {
        let mut err = None;
        let t: Duration = median(reps, || {
            if let Err(e) = self.step(opt, bf16) {
                err = Some(e);
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        let base = memory::memory_allocated(Device::Cpu)?;
        memory::reset_peak_memory_stats(Device::Cpu)?;
        self.step(opt, bf16)?;
        let peak = (memory::max_memory_allocated(Device::Cpu)? - base) as f64 / (1 << 20) as f64;
        Ok((t.as_secs_f64() * 1e3, peak))
    }
}

/// The step's matrix FLOPs: forward, input gradient and weight gradient of every layer
/// (2·B·in·out each), less the first layer's input gradient, which nothing needs.
fn step_flops() -> f64 {
    let b = BATCH as f64;
    let macs: f64 = WIDTHS.windows(2).map(|w| (w[0] * w[1]) as f64).sum();
    3.0 * 2.0 * b * macs - 2.0 * b * (WIDTHS[0] * WIDTHS[1]) as f64
}

/// The MLP rows; `sgemm_1024` is this run's `sgemm 1024` rate in GFLOP/s.
pub fn rows(
    quick: bool,
    torch: Option<&serde_json::Map<String, serde_json::Value>>,
    sgemm_1024: f64,
) -> Result<Vec<Row>> {
    let reps = if quick { 1 } else { 5 };
    let row = |what: &str, strata: f64, unit: &str| {
        torch_row(torch, &format!("{NAME}, {what}"), strata, unit)
    };
    let mut rows = Vec::new();
    let mut adam_ms_peak = (0.0, 0.0);
    for (label, bf16) in [
        ("SGD", false),
        ("Adam", false),
        ("Adam, bf16 autocast", true),
    ] {
        let m = Mlp::new()?;
        let mut opt = if label == "SGD" {
            let sgd = Sgd {
                lr: 0.01,
                momentum: 0.9,
                ..Sgd::default()
            };
            Optimizer::sgd(m.model.parameters(), sgd)?
        } else {
            Optimizer::adam(m.model.parameters(), Adam::default())?
        };
        let (ms, peak) = m.measure(&mut opt, bf16, reps)?;
        rows.push(row(&format!("{label}: training step"), ms, "ms"));
        rows.push(row(
            &format!("{label}: peak allocated in the step"),
            peak,
            "MiB",
        ));
        match label {
            "SGD" => {
                let bound = 1.3 * step_flops() / (sgemm_1024 * 1e9) * 1e3;
                rows.push(Row {
                    name: format!("{NAME}, SGD: step time vs 1.3x its FLOPs at sgemm 1024"),
                    strata: ms,
                    baseline: Some(bound),
                    baseline_name: "FLOP bound".into(),
                    ratio: Some(bound / ms),
                    unit: "ms".into(),
                });
            }
            "Adam" => adam_ms_peak = (ms, peak),
            _ => rows.push(Row {
                name: format!(
                    "{NAME}, Adam: bf16 autocast step vs f32 step ({})",
                    strata_core::half_kernel(DType::BF16).name()
                ),
                strata: ms,
                baseline: Some(adam_ms_peak.0),
                baseline_name: "strata f32 step".into(),
                ratio: Some(adam_ms_peak.0 / ms),
                unit: "ms".into(),
            }),
        }
    }
    let m = Mlp::new()?;
    let mut opt = Optimizer::adam(m.model.parameters(), Adam::default())?;
    opt.set_step_in_backward(true)?;
    let (_, peak) = m.measure(&mut opt, false, reps)?;
    rows.push(Row {
        name: format!("{NAME}, Adam in backward: peak allocated in the step"),
        strata: peak,
        baseline: Some(adam_ms_peak.1),
        baseline_name: "strata Adam after backward".into(),
        ratio: Some(adam_ms_peak.1 / peak),
        unit: "MiB".into(),
    });
    Ok(rows)
}
