//! The protocol's neural-network functions, mapped onto `strata_core::nn::functional`.

use strata::prelude::*;
use strata_core::nn::functional::{self as F, Pair, Reduction};

use super::args::Args;
use super::Produced;

fn need(op: &str, xs: &[Tensor], n: usize) -> Result<(), String> {
    if xs.len() < n {
        return Err(format!("{op} needs {n} input tensors, got {}", xs.len()));
    }
    Ok(())
}

fn reduction(a: &Args<'_>) -> Result<Reduction, String> {
    a.str_or("reduction", "mean")?
        .parse()
        .map_err(|e: Error| e.to_string())
}

/// A kernel, stride or padding: one integer for both sides, or a list of one or two.
fn pair(a: &Args<'_>, name: &str, default: Option<usize>) -> Result<Option<Pair>, String> {
    if !a.has(name) {
        return Ok(default.map(Pair::from));
    }
    let v = a.int_or_ints(name)?;
    let bad = || format!("argument '{name}' must be a non-negative integer or a list of two");
    let u = |i: i64| usize::try_from(i).map_err(|_| bad());
    match v[..] {
        [s] => Ok(Some(Pair::from(u(s)?))),
        [h, w] => Ok(Some(Pair(u(h)?, u(w)?))),
        _ => Err(bad()),
    }
}

/// Runs the neural-network op `op`, or returns `None` when `op` is not one.
pub fn run(op: &str, xs: &[Tensor], a: &Args<'_>) -> Option<Result<Produced, String>> {
    let r = match op {
        "linear" => need(op, xs, 2)
            .and_then(|()| F::linear(&xs[0], &xs[1], xs.get(2)).map_err(|e| e.to_string())),
        "cross_entropy" | "nll_loss" | "mse_loss" => need(op, xs, 2).and_then(|()| {
            let r = reduction(a)?;
            match op {
                "cross_entropy" => F::cross_entropy(&xs[0], &xs[1], r),
                "nll_loss" => F::nll_loss(&xs[0], &xs[1], r),
                _ => F::mse_loss(&xs[0], &xs[1], r),
            }
            .map_err(|e| e.to_string())
        }),
        // The oracle always passes a weight and a bias, and `normalized_shape` as given
        // (PyTorch refuses a bare int).
        "layer_norm" => need(op, xs, 3).and_then(|()| {
            let shape = a.usizes("normalized_shape")?;
            let eps = a.float_or("eps", 1e-5)?;
            F::layer_norm(&xs[0], &shape, xs.get(1), xs.get(2), eps).map_err(|e| e.to_string())
        }),
        "embedding" => {
            need(op, xs, 2).and_then(|()| F::embedding(&xs[0], &xs[1]).map_err(|e| e.to_string()))
        }
        "conv2d" => need(op, xs, 2).and_then(|()| {
            let stride = pair(a, "stride", Some(1))?.unwrap_or(Pair(1, 1));
            let padding = pair(a, "padding", Some(0))?.unwrap_or(Pair(0, 0));
            F::conv2d(&xs[0], &xs[1], xs.get(2), stride, padding).map_err(|e| e.to_string())
        }),
        "max_pool2d" => need(op, xs, 1).and_then(|()| {
            let kernel = pair(a, "kernel", None)?.ok_or("missing argument 'kernel'")?;
            let stride = pair(a, "stride", None)?;
            F::max_pool2d(&xs[0], kernel, stride).map_err(|e| e.to_string())
        }),
        "dropout" => need(op, xs, 1).and_then(|()| {
            let p = a.float_or("p", 0.0)?;
            F::dropout(&xs[0], p, true).map_err(|e| e.to_string())
        }),
        _ => return None,
    };
    Some(r.map(Produced::One))
}
