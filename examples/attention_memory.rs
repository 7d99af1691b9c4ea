//! Attention's memory on its two paths. One attention layer (batch 1, 4 heads of 32) runs
//! forward and backward at sequence lengths 256, 1024 and 4096: the math path materialises
//! the scores `[L, S]` per head and saves the attention weights, so its memory grows with
//! L·S; the flash path keeps one block of scores per thread and saves the output and one
//! log-sum-exp per row, so its memory grows with L + S. Both figures are read from the
//! allocator's statistics.
//!
//! Run with `cargo run --release --example attention_memory` (the 4096 math case holds
//! about 0.75 GiB at its peak). The test runs 256 and 1024 on the CPU and 4096 on the meta
//! device (every allocation, no arithmetic), whose figures equal the CPU's to the byte.

use strata::core::nn::functional::{scaled_dot_product_attention, sdpa_kernel, SdpBackend};
use strata::core::{memory, DType, Device, Tensor};

/// Batch entries, heads and the head dimension of the layer.
const SHAPE: (usize, usize, usize) = (1, 4, 32);

/// What one forward and backward held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Figures {
    /// Bytes the forward left allocated for backward (the output included).
    saved: usize,
    /// The peak of forward and backward, above what the inputs held.
    peak: usize,
}

/// Runs one layer of sequence length `l` on `device` with `backend`.
fn measure(device: Device, l: usize, backend: SdpBackend) -> strata::Result<Figures> {
    let (b, h, e) = SHAPE;
    let leaf = || -> strata::Result<Tensor> {
        Tensor::on(device)
            .randn(&[b, h, l, e], DType::F32)?
            .requires_grad_(true)
    };
    let (q, k, v) = (leaf()?, leaf()?, leaf()?);
    let base = memory::memory_allocated(device)?;
    memory::reset_peak_memory_stats(device)?;
    let y = sdpa_kernel(&[backend], || scaled_dot_product_attention(&q, &k, &v))?;
    let saved = memory::memory_allocated(device)? - base;
    y.sum(None, false)?.backward()?;
    drop(y);
    let peak = memory::max_memory_allocated(device)? - base;
    Ok(Figures { saved, peak })
}

/// `bytes` in MiB, for the table.
fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// Prints one row of the table.
fn print_row(l: usize, device: Device, math: Figures, flash: Figures) {
    println!(
        "| {l:>5} | {:<4} | {:>7.2} MiB | {:>6.2} MiB | {:>8.3} MiB | {:>7.3} MiB | {:>9.1}x |",
        device.to_string(),
        mib(math.saved),
        mib(math.peak),
        mib(flash.saved),
        mib(flash.peak),
        math.peak as f64 / flash.peak as f64
    );
}

/// The table, each length on `device_for(l)`; returns `(l, math, flash)` per length.
fn table(
    lengths: &[usize],
    device_for: impl Fn(usize) -> Device,
) -> strata::Result<Vec<(usize, Figures, Figures)>> {
    println!(
        "|     L | on   | math: saved | math: peak | flash: saved | flash: peak | math/flash |"
    );
    println!(
        "|------:|------|------------:|-----------:|-------------:|------------:|-----------:|"
    );
    let mut rows = Vec::new();
    for &l in lengths {
        let device = device_for(l);
        let math = measure(device, l, SdpBackend::Math)?;
        let flash = measure(device, l, SdpBackend::Flash)?;
        print_row(l, device, math, flash);
        rows.push((l, math, flash));
    }
    Ok(rows)
}

fn main() -> strata::Result<()> {
    table(&[256, 1024, 4096], |_| Device::Cpu)?;
    Ok(())
}

/// `cargo test` runs the example (`test = true` in Cargo.toml): 256 and 1024 on the CPU,
/// 4096 on the meta device, and 1024 on both to show that meta's figures are the CPU's.
#[test]
fn holds() -> strata::Result<()> {
    let rows = table(&[256, 1024, 4096], |l| {
        if l > 1024 {
            Device::Meta
        } else {
            Device::Cpu
        }
    })?;
    let at = |l: usize| rows.iter().find(|r| r.0 == l).map(|r| (r.1, r.2));
    let (Some((m1, f1)), Some((m4, f4))) = (at(1024), at(4096)) else {
        unreachable!("both lengths were measured")
    };
    // Math grows with L·S (×16 for ×4 the length); flash with L + S (×4).
    assert!(m4.peak >= 12 * m1.peak, "math: {m1:?} -> {m4:?}");
    assert!(f4.peak <= 5 * f1.peak, "flash: {f1:?} -> {f4:?}");
    assert!(f4.saved <= 5 * f1.saved, "flash: {f1:?} -> {f4:?}");
    // The target at 4096: flash's peak at most 1/8 of math's.
    assert!(8 * f4.peak <= m4.peak, "flash {f4:?}, math {m4:?}");
    // The flash path saves the output ([L, 32] per head) and one f32 per row.
    let (b, h, e) = SHAPE;
    assert_eq!(f4.saved, b * h * 4096 * (e + 1) * 4);
    // Meta plans what the CPU measures.
    for backend in [SdpBackend::Math, SdpBackend::Flash] {
        assert_eq!(
            measure(Device::Meta, 1024, backend)?,
            measure(Device::Cpu, 1024, backend)?
        );
    }
    Ok(())
}
