//! Attention rows of `strata bench`: one layer of scaled dot-product attention (batch 1, 4
//! heads of 32, f32) forward and backward at L = S = 4096. The flash path's time against
//! PyTorch's fused CPU path (same shapes, same threads), each the median of three runs taken
//! in turn (strata, PyTorch, strata, …) so that both see the same machine; and the flash
//! path's peak allocated bytes against the math path's.

use std::time::Duration;

use strata::prelude::*;
use strata_core::nn::functional::{scaled_dot_product_attention, sdpa_kernel, SdpBackend};

use super::{median, Row};

/// Heads and head dimension of the layer (batch 1).
const HEADS: usize = 4;
const HEAD_DIM: usize = 32;

/// The layer's inputs and the output's gradient.
struct Layer {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    grad: Tensor,
}

impl Layer {
    fn new(l: usize) -> Result<Layer> {
        let shape = [1, HEADS, l, HEAD_DIM];
        let leaf = || Tensor::randn(&shape, DType::F32)?.requires_grad_(true);
        Ok(Layer {
            q: leaf()?,
            k: leaf()?,
            v: leaf()?,
            grad: Tensor::randn(&shape, DType::F32)?,
        })
    }

    /// Forward and backward on `backend`, gradients cleared after.
    fn step(&self, backend: SdpBackend) -> Result<()> {
        let y = sdpa_kernel(&[backend], || {
            scaled_dot_product_attention(&self.q, &self.k, &self.v)
        })?;
        y.backward_with(Some(&self.grad), false)?;
        for t in [&self.q, &self.k, &self.v] {
            t.zero_grad(true)?;
        }
        Ok(())
    }

    /// The peak allocated bytes of one step on `backend`, above what the inputs hold.
    fn peak(&self, backend: SdpBackend) -> Result<usize> {
        let base = memory::memory_allocated(Device::Cpu)?;
        memory::reset_peak_memory_stats(Device::Cpu)?;
        self.step(backend)?;
        Ok(memory::max_memory_allocated(Device::Cpu)? - base)
    }
}

/// PyTorch's median time in ms for one step at length `l`, if `python3` has PyTorch.
fn torch_ms(threads: usize, l: usize, reps: usize) -> Option<f64> {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(include_str!("attention_baseline.py"))
        .args([threads.to_string(), l.to_string(), reps.to_string()])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// The median of `xs`.
fn middle(mut xs: Vec<f64>) -> Option<f64> {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied()
}

/// The attention rows (L = 256 and one run each when `quick`).
pub fn rows(quick: bool) -> Result<Vec<Row>> {
    let (l, rounds, reps) = if quick { (256, 1, 1) } else { (4096, 3, 3) };
    let layer = Layer::new(l)?;
    let threads = strata_core::num_threads();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let mut err = None;
        let t: Duration = median(reps, || {
            if let Err(e) = layer.step(SdpBackend::Flash) {
                err = Some(e);
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        ours.push(t.as_secs_f64() * 1e3);
        theirs.extend(torch_ms(threads, l, reps));
    }
    let label = format!("attention L={l}, {HEADS}×{HEAD_DIM}, f32");
    let time = middle(ours).unwrap_or(f64::NAN);
    let torch = middle(theirs);
    let flash = layer.peak(SdpBackend::Flash)? as f64 / f64::from(1 << 20);
    let math = layer.peak(SdpBackend::Math)? as f64 / f64::from(1 << 20);
    Ok(vec![
        Row {
            name: format!("{label}: flash forward+backward"),
            strata: time,
            baseline: torch,
            baseline_name: if torch.is_some() { "PyTorch" } else { "none" }.to_string(),
            ratio: torch.map(|b| b / time),
            unit: "ms".to_string(),
        },
        Row {
            name: format!("{label}: flash peak allocated"),
            strata: flash,
            baseline: Some(math),
            baseline_name: "strata's math path".to_string(),
            ratio: Some(math / flash),
            unit: "MiB".to_string(),
        },
    ])
}
