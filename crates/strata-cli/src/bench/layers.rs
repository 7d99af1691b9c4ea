//! Layer rows of `strata bench`: the layers of the models `strata train` trains, alone,
//! forward and backward at the shapes it runs them (batch 128), beside PyTorch on the same
//! shapes: the cnn's two convolutions, its first max pool (also in GB/s against the
//! memory-copy probe, bytes read plus written), the lstm's LSTM layer over 28 steps, a GRU
//! layer of the same shape, and an
//! element-wise add of 64 Ki floats (a size where the thread pool's hand-off shows).

use strata::nn::{Module, RnnConfig, GRU, LSTM};
use strata::prelude::*;
use strata_core::nn::functional::{conv2d, max_pool2d_with, Pair, Pool2dOptions};

use super::{gbs, median, torch_row, Row};

/// Images per batch, as `strata train`'s default.
const BATCH: usize = 128;

/// The name of the conv row for `c_in → c_out` channels on `size×size` images.
pub(crate) fn conv_name(c_in: usize, c_out: usize, size: usize) -> String {
    format!("conv {c_in}->{c_out} 3x3 on [{BATCH},{c_in},{size},{size}]: forward + backward")
}

/// The layer rows. `torch` holds PyTorch's figures by row name, when it ran; `probe` is
/// the run's memory-copy bandwidth (GB/s).
pub fn rows(
    quick: bool,
    torch: Option<&serde_json::Map<String, serde_json::Value>>,
    probe: f64,
) -> Result<Vec<Row>> {
    let reps = if quick { 1 } else { 10 };
    let row = |name: &str, strata: f64, unit: &str| torch_row(torch, name, strata, unit);
    let mut rows = Vec::new();

    // The cnn's convolutions: the first (its input is data, needing no gradient) and the
    // second (its input needs one).
    for (c_in, c_out, size, input_grad) in [(1, 32, 28, false), (32, 64, 14, true)] {
        let x =
            Tensor::randn(&[BATCH, c_in, size, size], DType::F32)?.requires_grad_(input_grad)?;
        let w = Tensor::randn(&[c_out, c_in, 3, 3], DType::F32)?.requires_grad_(true)?;
        let b = Tensor::randn(&[c_out], DType::F32)?.requires_grad_(true)?;
        let g = Tensor::randn(&[BATCH, c_out, size, size], DType::F32)?;
        let ms = timed(reps, || {
            conv2d(&x, &w, Some(&b), 1, 1)?.backward_with(Some(&g), false)?;
            for t in [&x, &w, &b] {
                t.zero_grad(true)?;
            }
            Ok(())
        })?;
        rows.push(row(&conv_name(c_in, c_out, size), ms, "ms"));
    }

    // The cnn's first max pool.
    let pool = Pool2dOptions::new(Pair(2, 2));
    let x = Tensor::randn(&[BATCH, 32, 28, 28], DType::F32)?.requires_grad_(true)?;
    let g = Tensor::randn(&[BATCH, 32, 14, 14], DType::F32)?;
    let ms = timed(reps, || {
        max_pool2d_with(&x, pool)?.backward_with(Some(&g), false)?;
        x.zero_grad(true)?;
        Ok(())
    })?;
    rows.push(row(
        &format!("max pool 2 on [{BATCH},32,28,28]: forward + backward"),
        ms,
        "ms",
    ));
    // Bytes: forward reads the input and writes the values and their i64 positions;
    // backward reads the gradient and the positions and writes the input's gradient.
    let (input, pooled) = (x.numel(), g.numel());
    let detached = x.detach()?;
    let t = median(reps.max(3), || drop(max_pool2d_with(&detached, pool)));
    rows.push(probe_row(
        &format!("max pool 2 forward on [{BATCH},32,28,28]"),
        gbs(4 * input + 12 * pooled, t),
        probe,
    ));
    let y = max_pool2d_with(&x, pool)?;
    let ms = timed(reps.max(3), || {
        y.backward_with(Some(&g), true)?;
        x.zero_grad(true)
    })?;
    rows.push(probe_row(
        &format!("max pool 2 backward on [{BATCH},32,28,28]"),
        gbs(
            12 * pooled + 4 * input,
            std::time::Duration::from_secs_f64(ms / 1e3),
        ),
        probe,
    ));

    // The lstm's LSTM layer (28 steps of 28 features, 128 hidden units, batch first) and a
    // GRU layer of the same shape (its steps are `gru_cell`s).
    let config = || RnnConfig {
        batch_first: true,
        ..RnnConfig::default()
    };
    let (lstm, gru) = (
        LSTM::with_config(28, 128, config())?,
        GRU::with_config(28, 128, config())?,
    );
    let x = Tensor::randn(&[BATCH, 28, 28], DType::F32)?;
    let g = Tensor::randn(&[BATCH, 28, 128], DType::F32)?;
    type Layer<'a> = Box<dyn Fn() -> Result<Tensor> + 'a>;
    let layers: [(&str, Layer, Vec<Tensor>); 2] = [
        (
            "LSTM",
            Box::new(|| Ok(lstm.call_with(&x, None)?.0)),
            lstm.parameters(),
        ),
        (
            "GRU",
            Box::new(|| Ok(gru.call_with(&x, None)?.0)),
            gru.parameters(),
        ),
    ];
    for (kind, forward, params) in layers {
        let ms = timed(reps, || {
            forward()?.backward_with(Some(&g), false)?;
            for p in &params {
                p.zero_grad(true)?;
            }
            Ok(())
        })?;
        rows.push(row(
            &format!("{kind} 28->128, 28 steps, batch {BATCH}: forward + backward"),
            ms,
            "ms",
        ));
    }

    // An add of 64 Ki floats: two grains of 32 Ki, so split across the pool (as PyTorch
    // splits it).
    let (a, b) = (
        Tensor::rand(&[1 << 16], DType::F32)?,
        Tensor::rand(&[1 << 16], DType::F32)?,
    );
    let t = median(if quick { 3 } else { 200 }, || drop(a.add(&b)));
    rows.push(row("add 64Ki f32", t.as_secs_f64() * 1e6, "us"));
    Ok(rows)
}

/// The median time of `reps` runs of `f` in milliseconds, or its first error.
fn timed(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut failed = None;
    let t = median(reps, || {
        if let Err(e) = f() {
            failed.get_or_insert(e);
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(t.as_secs_f64() * 1e3),
    }
}

/// A GB/s row against the memory-copy probe.
fn probe_row(name: &str, rate: f64, probe: f64) -> Row {
    Row {
        name: name.to_string(),
        strata: rate,
        baseline: Some(probe),
        baseline_name: "memory-copy probe".to_string(),
        ratio: Some(rate / probe),
        unit: "GB/s".to_string(),
    }
}
