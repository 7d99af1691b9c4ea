//! CNN rows of `strata bench`: a training step (forward, loss, backward) of a small CNN on a
//! batch of 256 Fashion-MNIST-sized images, `[conv 3×3 → batch norm → ReLU → max pool 2] ×
//! 2 → linear`, 1 → 32 → 64 channels, 10 classes. Step time and peak allocated bytes above
//! what the model and the batch hold, against PyTorch on the same model (its peak from its
//! profiler's memory events, same batch, same threads).

use std::time::Duration;

use strata::prelude::*;
use strata_core::nn::functional::{
    batch_norm, conv2d, cross_entropy, linear, max_pool2d, Reduction,
};

use super::{median, torch_row, Row};

/// Images per batch.
const BATCH: usize = 256;
/// Channels after each conv block.
const WIDTHS: [usize; 2] = [32, 64];
/// Classes.
const CLASSES: usize = 10;

/// One conv block's parameters and running statistics.
struct Block {
    weight: Tensor,
    bias: Tensor,
    gamma: Tensor,
    beta: Tensor,
    mean: Tensor,
    var: Tensor,
}

/// The model: two conv blocks and the head.
struct Cnn {
    blocks: Vec<Block>,
    head: (Tensor, Tensor),
}

impl Cnn {
    /// PyTorch's default initialisation scales (U(±1/√fan_in)).
    fn new() -> Result<Cnn> {
        let mut g = strata_core::Generator::new(0);
        let mut uniform = |shape: &[usize], fan_in: usize| -> Result<Tensor> {
            let bound = 1.0 / (fan_in as f64).sqrt();
            Tensor::rand_with(shape, DType::F32, &mut g)?
                .mul(2.0 * bound)?
                .sub(bound)?
                .requires_grad_(true)
        };
        let mut blocks = Vec::new();
        let mut c_in = 1;
        for c in WIDTHS {
            blocks.push(Block {
                weight: uniform(&[c, c_in, 3, 3], c_in * 9)?,
                bias: uniform(&[c], c_in * 9)?,
                gamma: Tensor::ones(&[c], DType::F32)?.requires_grad_(true)?,
                beta: Tensor::zeros(&[c], DType::F32)?.requires_grad_(true)?,
                mean: Tensor::zeros(&[c], DType::F32)?,
                var: Tensor::ones(&[c], DType::F32)?,
            });
            c_in = c;
        }
        let features = WIDTHS[1] * 7 * 7;
        let head = (
            uniform(&[CLASSES, features], features)?,
            uniform(&[CLASSES], features)?,
        );
        Ok(Cnn { blocks, head })
    }

    /// The training-mode loss of a batch.
    fn loss(&self, x: &Tensor, labels: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for b in &self.blocks {
            let y = conv2d(&h, &b.weight, Some(&b.bias), 1, 1)?;
            let y = batch_norm(
                &y,
                Some(&b.mean),
                Some(&b.var),
                Some(&b.gamma),
                Some(&b.beta),
                true,
                0.1,
                1e-5,
            )?;
            h = max_pool2d(&y.relu()?, 2, None)?;
        }
        let logits = linear(&h.flatten(1, -1)?, &self.head.0, Some(&self.head.1))?;
        cross_entropy(&logits, labels, Reduction::Mean)
    }

    /// Every parameter.
    fn parameters(&self) -> Vec<&Tensor> {
        let mut p: Vec<&Tensor> = self
            .blocks
            .iter()
            .flat_map(|b| [&b.weight, &b.bias, &b.gamma, &b.beta])
            .collect();
        p.extend([&self.head.0, &self.head.1]);
        p
    }

    /// One step: forward, backward, gradients cleared.
    fn step(&self, x: &Tensor, labels: &Tensor) -> Result<()> {
        self.loss(x, labels)?.backward()?;
        for p in self.parameters() {
            p.zero_grad(true)?;
        }
        Ok(())
    }
}

/// The CNN rows. `torch` holds PyTorch's figures by row name, when it ran.
pub fn rows(
    quick: bool,
    torch: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<Vec<Row>> {
    let reps = if quick { 1 } else { 5 };
    let model = Cnn::new()?;
    let x = Tensor::randn(&[BATCH, 1, 28, 28], DType::F32)?;
    let labels: Vec<i64> = (0..BATCH as i64)
        .map(|i| (i * 7) % CLASSES as i64)
        .collect();
    let labels = Tensor::from_vec(labels, &[BATCH])?;
    let mut err = None;
    let t: Duration = median(reps, || {
        if let Err(e) = model.step(&x, &labels) {
            err = Some(e);
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    let base = memory::memory_allocated(Device::Cpu)?;
    memory::reset_peak_memory_stats(Device::Cpu)?;
    model.step(&x, &labels)?;
    let peak = (memory::max_memory_allocated(Device::Cpu)? - base) as f64 / (1 << 20) as f64;
    let row = |name: &str, strata: f64, unit: &str| torch_row(torch, name, strata, unit);
    Ok(vec![
        row(
            "small CNN, batch 256: training step",
            t.as_secs_f64() * 1e3,
            "ms",
        ),
        row(
            "small CNN, batch 256: peak allocated in the step",
            peak,
            "MiB",
        ),
    ])
}
