//! `strata bench`: strata's op costs beside baselines measured in the same run — a
//! memory-copy bandwidth probe (the limit for element-wise work) and, when a PyTorch is
//! importable by `python3`, PyTorch on the same shapes with the same thread count.

pub mod alloc;
mod attention;
pub mod autograd;
mod cnn;
mod data;
mod layers;
mod mlp;
mod plan;

use std::time::{Duration, Instant};

use serde::Serialize;
use strata::prelude::*;

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// What was measured.
    pub name: String,
    /// strata's figure.
    pub strata: f64,
    /// The baseline's figure (PyTorch when available, else the named probe), if any.
    pub baseline: Option<f64>,
    /// Which baseline.
    pub baseline_name: String,
    /// strata / baseline, oriented so that > 1 means strata is better.
    pub ratio: Option<f64>,
    /// Unit of the figures.
    pub unit: String,
}

/// Median wall time of `reps` runs of `f`, after warming up: one run for a quick pass
/// (`reps` ≤ 3), else runs for at least [`WARM_UP`], so the pool's threads (and the CPUs
/// under them) are awake and busy, as in a training loop, before anything is timed.
pub(crate) fn median(reps: usize, mut f: impl FnMut()) -> Duration {
    let warm_until = Instant::now() + if reps > 3 { WARM_UP } else { Duration::ZERO };
    f();
    while Instant::now() < warm_until {
        f();
    }
    let mut ts: Vec<Duration> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    ts.sort();
    ts[ts.len() / 2]
}

/// How long [`median`] runs a benchmark before timing it (the bundled PyTorch script warms
/// up for as long).
pub(crate) const WARM_UP: Duration = Duration::from_millis(100);

pub(crate) fn gbs(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

/// The memory-copy probe: GB/s moved (read + write) by copying 64 MiB, split over the
/// machine's threads like strata's kernels.
pub fn copy_bandwidth(reps: usize) -> f64 {
    let n = 64 << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    let threads = strata_core::num_threads();
    let t = median(reps, || {
        strata_core::thread_pool().install(|| {
            use rayon::prelude::*;
            dst.par_chunks_mut(n.div_ceil(threads))
                .zip(src.par_chunks(n.div_ceil(threads)))
                .for_each(|(d, s)| d.copy_from_slice(s));
        })
    });
    std::hint::black_box(&dst);
    gbs(2 * n, t)
}

/// PyTorch's figures from the bundled script, if `python3 -c "import torch"` works.
fn torch_figures(
    threads: usize,
    quick: bool,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let script = include_str!("torch_baseline.py");
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(threads.to_string())
        .arg(if quick { "quick" } else { "full" })
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()?
        .as_object()
        .cloned()
}

/// The groups of rows that run alone with [`run_group`].
pub const GROUPS: [&str; 7] = [
    "alloc",
    "autograd",
    "cnn",
    "layers",
    "data",
    "plan",
    "attention",
];

/// Runs one group of [`GROUPS`] alone (PyTorch's figures measured where the group has them).
pub fn run_group(group: &str, quick: bool) -> strata::Result<Vec<Row>> {
    let torch = || torch_figures(strata_core::num_threads(), quick);
    match group {
        "alloc" => alloc::rows(quick),
        "autograd" => autograd::rows(quick, torch().as_ref()),
        "cnn" => cnn::rows(quick, torch().as_ref()),
        "layers" => layers::rows(
            quick,
            torch().as_ref(),
            copy_bandwidth(if quick { 3 } else { 10 }),
        ),
        "data" => data::rows(quick),
        "plan" => plan::rows(quick),
        "attention" => attention::rows(quick),
        other => Err(strata::Error::argument(
            "bench",
            format!(
                "no benchmark group '{other}': the groups are {}",
                GROUPS.join(", ")
            ),
            Some("pass one of them to --only, or leave --only out to run every row"),
        )),
    }
}

/// Runs every benchmark. `quick` uses fewer repetitions (for tests).
pub fn run(quick: bool) -> strata::Result<Vec<Row>> {
    let reps = if quick { 3 } else { 10 };
    let threads = strata_core::num_threads();
    let probe = copy_bandwidth(reps);
    let torch = torch_figures(threads, quick);
    let mut rows = Vec::new();
    let mut push = |name: &str, strata: f64, unit: &str, lower_is_better: bool, probe_ok: bool| {
        let from_torch = torch
            .as_ref()
            .and_then(|m| m.get(name))
            .and_then(serde_json::Value::as_f64);
        let (baseline, baseline_name) = match from_torch {
            Some(v) => (Some(v), "PyTorch".to_string()),
            None if probe_ok => (Some(probe), "memory-copy probe".to_string()),
            None => (None, "none".to_string()),
        };
        let ratio = baseline.map(|b| {
            if lower_is_better {
                b / strata
            } else {
                strata / b
            }
        });
        rows.push(Row {
            name: name.to_string(),
            strata,
            baseline,
            baseline_name,
            ratio,
            unit: unit.to_string(),
        });
    };

    // Per-op cost of a one-element add.
    let (a1, b1) = (
        Tensor::ones(&[1], DType::F32)?,
        Tensor::ones(&[1], DType::F32)?,
    );
    let iters = if quick { 2_000 } else { 50_000 };
    let t = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(a1.add(&b1)?);
    }
    push(
        "add 1 element (per op)",
        t.elapsed().as_secs_f64() / iters as f64 * 1e9,
        "ns",
        true,
        false,
    );

    let n = 1usize << 24;
    let a = Tensor::rand(&[n], DType::F32)?;
    let b = Tensor::rand(&[n], DType::F32)?;
    let t = median(reps, || drop(a.add(&b)));
    let add_new = gbs(3 * 4 * n, t);
    push("add 16M f32, new output", add_new, "GB/s", false, true);
    let out = Tensor::zeros(&[n], DType::F32)?;
    let t = median(reps, || drop(a.add_out(&b, 1i64, &out)));
    push("add 16M f32, out=", gbs(3 * 4 * n, t), "GB/s", false, true);
    let t = median(reps, || drop(a.add_(&b)));
    push(
        "add_ 16M f32, in place",
        gbs(3 * 4 * n, t),
        "GB/s",
        false,
        true,
    );

    let m = Tensor::rand(&[4096, 4096], DType::F32)?;
    let mt = Tensor::rand(&[4096, 4096], DType::F32)?.t()?;
    let t = median(reps, || drop(m.add(&mt)));
    push(
        "add 4096² f32, one operand transposed",
        gbs(3 * 4 * n, t),
        "GB/s",
        false,
        true,
    );
    let t = median(reps, || drop(mt.contiguous()));
    push(
        "transpose copy 4096² f32",
        gbs(2 * 4 * n, t),
        "GB/s",
        false,
        true,
    );
    let t = median(reps, || drop(m.sum(Some(&[1]), false)));
    push(
        "sum 4096² f32 over last dim",
        gbs(4 * n, t),
        "GB/s",
        false,
        true,
    );
    let t = median(reps, || drop(m.sum(Some(&[0]), false)));
    push(
        "sum 4096² f32 over first dim",
        gbs(4 * n, t),
        "GB/s",
        false,
        true,
    );
    let s = Tensor::rand(&[4096, 1024], DType::F32)?;
    let t = median(reps, || drop(s.softmax(1)));
    push(
        "softmax [4096, 1024] f32",
        gbs(2 * 4 * s.numel(), t),
        "GB/s",
        false,
        true,
    );
    let mut sgemm_1024 = 0.0;
    for k in [512usize, 1024, 2048] {
        let x = Tensor::rand(&[k, k], DType::F32)?;
        let y = Tensor::rand(&[k, k], DType::F32)?;
        let t = median(reps, || drop(x.matmul(&y)));
        let rate = 2.0 * (k as f64).powi(3) / t.as_secs_f64() / 1e9;
        if k == 1024 {
            sgemm_1024 = rate;
        }
        push(&format!("sgemm {k}"), rate, "GFLOP/s", false, false);
    }
    // Half-precision products, named by the kernel they run on: f16's own `gemm` kernel up
    // to a depth of 512, beyond it (and bf16 always) the one this CPU runs them on.
    let kernel = |dtype| strata_core::half_kernel(dtype).name();
    for (k, dtype, path) in [
        (512usize, DType::F16, "gemm-f16"),
        (512, DType::BF16, kernel(DType::BF16)),
        (1024, DType::F16, kernel(DType::F16)),
        (1024, DType::BF16, kernel(DType::BF16)),
    ] {
        let x = Tensor::rand(&[k, k], DType::F32)?.to(dtype)?;
        let y = Tensor::rand(&[k, k], DType::F32)?.to(dtype)?;
        let t = median(reps, || drop(x.matmul(&y)));
        push(
            &format!("{dtype} gemm {k} ({path})"),
            2.0 * (k as f64).powi(3) / t.as_secs_f64() / 1e9,
            "GFLOP/s",
            false,
            false,
        );
    }
    push("memory-copy probe", probe, "GB/s", false, false);
    // Why bf16 products take the kernel they do: the dot-product instruction's issue time
    // against the f32 FMA's (a ratio below 0.5: fewer multiply-adds per cycle than f32).
    if let Some((dot, fma)) = strata_core::bf16_dot_issue_times() {
        rows.push(Row {
            name: "vdpbf16ps issue time, 512-bit".to_string(),
            strata: dot,
            baseline: Some(fma),
            baseline_name: "vfmadd231ps".to_string(),
            ratio: Some(fma / dot),
            unit: "ns".to_string(),
        });
    }
    rows.extend(alloc::rows(quick)?);
    rows.extend(autograd::rows(quick, torch.as_ref())?);
    rows.extend(cnn::rows(quick, torch.as_ref())?);
    rows.extend(layers::rows(quick, torch.as_ref(), probe)?);
    rows.extend(mlp::rows(quick, torch.as_ref(), sgemm_1024)?);
    rows.extend(data::rows(quick)?);
    rows.extend(plan::rows(quick)?);
    rows.extend(attention::rows(quick)?);
    Ok(rows)
}

/// A row whose baseline is PyTorch's figure of the same name, when PyTorch ran (lower is
/// better: a time or a peak).
pub(crate) fn torch_row(
    torch: Option<&serde_json::Map<String, serde_json::Value>>,
    name: &str,
    strata: f64,
    unit: &str,
) -> Row {
    let baseline = torch.and_then(|m| m.get(name)).and_then(|v| v.as_f64());
    Row {
        name: name.to_string(),
        strata,
        baseline,
        baseline_name: if baseline.is_some() {
            "PyTorch"
        } else {
            "none"
        }
        .to_string(),
        ratio: baseline.map(|b| b / strata),
        unit: unit.to_string(),
    }
}

/// The rows as a plain-text table.
pub fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<40} {:>12} {:>12} {:>8}  {}\n",
        "benchmark", "strata", "baseline", "ratio", "unit (baseline)"
    );
    for r in rows {
        s += &format!(
            "{:<40} {:>12.2} {:>12} {:>8}  {} ({})\n",
            r.name,
            r.strata,
            r.baseline.map_or("-".into(), |b| format!("{b:.2}")),
            r.ratio.map_or("-".into(), |x| format!("{x:.2}x")),
            r.unit,
            r.baseline_name
        );
    }
    s
}

/// The rows as a Markdown table (for BENCHMARKS.md).
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from("| benchmark | strata | baseline | ratio (>1: strata better) | unit |\n|---|---:|---:|---:|---|\n");
    for r in rows {
        s += &format!(
            "| {} | {:.2} | {} | {} | {} |\n",
            r.name,
            r.strata,
            r.baseline
                .map_or("-".into(), |b| format!("{b:.2} ({})", r.baseline_name)),
            r.ratio.map_or("-".into(), |x| format!("{x:.2}")),
            r.unit
        );
    }
    s
}
