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
    let err = |e: Error| e.to_string();
    let r = match op {
        "linear" => {
            need(op, xs, 2).and_then(|()| F::linear(&xs[0], &xs[1], xs.get(2)).map_err(err))
        }
        "scaled_dot_product_attention" => need(op, xs, 3).and_then(|()| {
            // `backend` restricts the choice as PyTorch's scoped `sdpa_kernel` does.
            let backends: &[F::SdpBackend] = match a.has("backend") {
                false => &[F::SdpBackend::Math, F::SdpBackend::Flash],
                true => match a.str("backend")? {
                    "math" => &[F::SdpBackend::Math],
                    "flash" => &[F::SdpBackend::Flash],
                    other => {
                        return Err(format!(
                            "scaled_dot_product_attention: unknown backend '{other}' (math or \
                             flash)"
                        ))
                    }
                },
            };
            let opts = F::SdpaOptions {
                attn_mask: xs.get(3),
                dropout_p: a.float_or("dropout_p", 0.0)?,
                is_causal: a.bool_or("is_causal", false)?,
                scale: if a.has("scale") {
                    Some(a.float_or("scale", 0.0)?)
                } else {
                    None
                },
                enable_gqa: a.bool_or("enable_gqa", false)?,
            };
            F::sdpa_kernel(backends, || {
                F::scaled_dot_product_attention_with(&xs[0], &xs[1], &xs[2], &opts)
            })
            .map_err(err)
        }),
        "cross_entropy" => need(op, xs, 2).and_then(|()| {
            let opts = F::CrossEntropyOptions {
                reduction: reduction(a)?,
                ignore_index: a.int_or("ignore_index", F::DEFAULT_IGNORE_INDEX)?,
                label_smoothing: a.float_or("label_smoothing", 0.0)?,
                weight: xs.get(2).cloned(),
            };
            F::cross_entropy_with(&xs[0], &xs[1], &opts).map_err(err)
        }),
        "nll_loss" | "mse_loss" | "l1_loss" | "binary_cross_entropy_with_logits" => need(op, xs, 2)
            .and_then(|()| {
                let r = reduction(a)?;
                match op {
                    "nll_loss" => F::nll_loss(&xs[0], &xs[1], r),
                    "mse_loss" => F::mse_loss(&xs[0], &xs[1], r),
                    "l1_loss" => F::l1_loss(&xs[0], &xs[1], r),
                    _ => F::binary_cross_entropy_with_logits(&xs[0], &xs[1], r),
                }
                .map_err(err)
            }),
        // The oracle always passes a weight and a bias, and `normalized_shape` as given
        // (PyTorch refuses a bare int).
        "layer_norm" => need(op, xs, 3).and_then(|()| {
            let shape = a.usizes("normalized_shape")?;
            let eps = a.float_or("eps", 1e-5)?;
            F::layer_norm(&xs[0], &shape, xs.get(1), xs.get(2), eps).map_err(err)
        }),
        "batch_norm" => need(op, xs, 3).and_then(|()| {
            F::batch_norm(
                &xs[0],
                Some(&xs[1]),
                Some(&xs[2]),
                xs.get(3),
                xs.get(4),
                a.bool_or("training", true)?,
                a.float_or("momentum", 0.1)?,
                a.float_or("eps", 1e-5)?,
            )
            .map_err(err)
        }),
        "embedding" => need(op, xs, 2).and_then(|()| {
            F::embedding_with(&xs[0], &xs[1], a.opt_int("padding_idx")?).map_err(err)
        }),
        "conv2d" => need(op, xs, 2).and_then(|()| {
            let opts = F::Conv2dOptions {
                stride: pair(a, "stride", Some(1))?.unwrap_or(Pair(1, 1)),
                padding: pair(a, "padding", Some(0))?.unwrap_or(Pair(0, 0)),
                dilation: pair(a, "dilation", Some(1))?.unwrap_or(Pair(1, 1)),
                groups: a.usize_or("groups", 1)?,
            };
            F::conv2d_with(&xs[0], &xs[1], xs.get(2), opts).map_err(err)
        }),
        "max_pool2d" | "avg_pool2d" => need(op, xs, 1).and_then(|()| {
            let opts = F::Pool2dOptions {
                kernel: pair(a, "kernel", None)?.ok_or("missing argument 'kernel'")?,
                stride: pair(a, "stride", None)?,
                padding: pair(a, "padding", Some(0))?.unwrap_or(Pair(0, 0)),
                ceil_mode: a.bool_or("ceil_mode", false)?,
            };
            if op == "max_pool2d" {
                F::max_pool2d_with(&xs[0], opts)
            } else {
                F::avg_pool2d(&xs[0], opts)
            }
            .map_err(err)
        }),
        "adaptive_avg_pool2d" => need(op, xs, 1).and_then(|()| {
            let size = pair(a, "output_size", None)?.ok_or("missing argument 'output_size'")?;
            F::adaptive_avg_pool2d(&xs[0], size).map_err(err)
        }),
        "lstm_cell" => {
            return Some(need(op, xs, 5).and_then(|()| {
                let (h, c) =
                    F::lstm_cell(&xs[0], &xs[1], &xs[2], &xs[3], &xs[4], xs.get(5), xs.get(6))
                        .map_err(err)?;
                Ok(Produced::Many(vec![h, c]))
            }))
        }
        "gru_cell" => need(op, xs, 4).and_then(|()| {
            F::gru_cell(&xs[0], &xs[1], &xs[2], &xs[3], xs.get(4), xs.get(5)).map_err(err)
        }),
        "dropout" => need(op, xs, 1).and_then(|()| {
            let p = a.float_or("p", 0.0)?;
            F::dropout(&xs[0], p, true).map_err(err)
        }),
        _ => return None,
    };
    Some(r.map(Produced::One))
}
