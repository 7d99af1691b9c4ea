//! `gru_cell`: the gate products, then the update as one node: the backend's fused cell
//! where it has one (f32 and f64 with contiguous rows), else the same node composed of
//! element-wise ops (or PyTorch's composition of recorded ops for half-precision gates).

use super::{check, chunks, composed, fresh, sigmoid_slope, tanh_slope};
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, Grads};
use crate::nn::functional::linear;
use crate::op::OpContext;
use crate::ops::gru_cell::{self as kernel, BackwardStep, ForwardStep};
use crate::{Error, Result, Tensor};

/// PyTorch's `gru_cell`: for `x` (`[B, I]` or `[I]`) and `h` (`[B, H]` or `[H]`), with
/// `ir, iz, in` the chunks of `linear(x, w_ih, b_ih)` and `hr, hz, hn` those of
/// `linear(h, w_hh, b_hh)` (`w_ih` is `[3H, I]`, `w_hh` `[3H, H]`): `r = σ(hr + ir)`,
/// `z = σ(hz + iz)`, `n = tanh(in + hn·r)`, and `h1 = (h - n)·z + n`.
///
/// Memory: besides the products' own saves, the backward keeps `r`, `z`, `n`, `hn` (one
/// `[B, 4H]` tensor on the CPU, whose fused cell computes the update in one pass each way)
/// and `h`.
///
/// ```
/// use strata_core::nn::functional::gru_cell;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::ones(&[1, 2], DType::F32)?;
/// let h = Tensor::ones(&[1, 3], DType::F32)?;
/// let (w_ih, w_hh) = (Tensor::zeros(&[9, 2], DType::F32)?, Tensor::zeros(&[9, 3], DType::F32)?);
/// // Zero gates: z = 0.5, n = 0, so h1 = 0.5·h.
/// assert_eq!(gru_cell(&x, &h, &w_ih, &w_hh, None, None)?.to_vec::<f32>()?, vec![0.5; 3]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn gru_cell(
    x: &Tensor,
    h: &Tensor,
    w_ih: &Tensor,
    w_hh: &Tensor,
    b_ih: Option<&Tensor>,
    b_hh: Option<&Tensor>,
) -> Result<Tensor> {
    let mut inputs = vec![x, h, w_ih, w_hh];
    inputs.extend(b_ih);
    inputs.extend(b_hh);
    let (has_bi, has_bh) = (b_ih.is_some(), b_hh.is_some());
    Entry::new("gru_cell", &inputs)?.run_composite(|ctx, t| {
        let b_ih = has_bi.then(|| t[4]);
        let b_hh = has_bh.then(|| t[4 + has_bi as usize]);
        check(ctx.op(), t[0], t[1], None, t[2], t[3], 3)?;
        let gi = linear(t[0], t[2], b_ih)?;
        let gh = linear(t[1], t[3], b_hh)?;
        if composed(&gi, t[1]) {
            return gru_composed(&gi, &gh, t[1]);
        }
        gru_update(&gi, &gh, t[1])
    })
}

/// PyTorch's CPU `gru_cell` after the products, op by op: `r = σ(hr + ir)`,
/// `z = σ(hz + iz)`, `n = tanh(in + hn·r)` in the gates' dtype, and `h1 = (h - n)·z + n`
/// in the promoted dtype of `h` and the gates.
fn gru_composed(gi: &Tensor, gh: &Tensor, h: &Tensor) -> Result<Tensor> {
    let (i, hh) = (chunks(gi, 3)?, chunks(gh, 3)?);
    let r = hh[0].add(&i[0])?.sigmoid()?;
    let z = hh[1].add(&i[1])?.sigmoid()?;
    let n = i[2].add(&hh[2].mul(&r)?)?.tanh()?;
    h.sub(&n)?.mul(&z)?.add(&n)
}

/// The GRU's update from the two products' gates and `h`, one node saving `r`, `z`, `n`,
/// `hn` and `h`: fused where the backend has the cell, else composed.
#[track_caller]
fn gru_update(gi: &Tensor, gh: &Tensor, h: &Tensor) -> Result<Tensor> {
    if kernel::fused(&[gi, gh, h])? {
        return gru_fused(gi, gh, h);
    }
    gru_update_composed(gi, gh, h)
}

/// The fused cell's node: the forward writes the new state and a `[B, 4H]` workspace of
/// `r, z, n, hn`, which the backward reads with `h` to write the gates' and the state's
/// gradients, each allocated only when needed.
#[track_caller]
fn gru_fused(gi: &Tensor, gh: &Tensor, h: &Tensor) -> Result<Tensor> {
    Entry::new("gru_cell", &[gi, gh, h])?
        .run(
            |ctx, t| {
                let state = t[2].shape();
                let hy = fresh(ctx, t[2], &state)?;
                let workspace = fresh(ctx, t[2], &widened(&state, 4))?;
                let step = ForwardStep {
                    input_gates: t[0],
                    hidden_gates: t[1],
                    h: t[2],
                    workspace: &workspace,
                    hy: &hy,
                };
                if !kernel::forward(&step)? {
                    return Err(no_fused_cell());
                }
                Ok((hy, workspace))
            },
            |ctx, t, (out, workspace)| {
                record(ctx, "GruCellBackward", t, out, |rec| {
                    let need = [rec.needs(0), rec.needs(1), rec.needs(2)];
                    let sw = rec.save(workspace)?;
                    let sh = rec.save(t[2])?;
                    Ok(move |g: Tensor| -> Grads {
                        let ctx = OpContext::enter("gru_cell_backward");
                        let (workspace, h) = (sw.get()?, sh.get()?);
                        let g = g.contiguous()?;
                        let state = h.shape();
                        let gates = widened(&state, 3);
                        let out = |needed: bool, shape: &[usize]| {
                            needed.then(|| fresh(&ctx, &h, shape)).transpose()
                        };
                        let grads = vec![
                            out(need[0], &gates)?,
                            out(need[1], &gates)?,
                            out(need[2], &state)?,
                        ];
                        let step = BackwardStep {
                            grad_hy: &g,
                            h: &h,
                            workspace: &workspace,
                            grad_input_gates: grads[0].as_ref(),
                            grad_hidden_gates: grads[1].as_ref(),
                            grad_h: grads[2].as_ref(),
                        };
                        if !kernel::backward(&step)? {
                            return Err(no_fused_cell());
                        }
                        Ok(grads)
                    })
                })
            },
        )
        .map(|(out, _)| out)
}

/// `state` with its last dimension `k` times as wide.
fn widened(state: &[usize], k: usize) -> Vec<usize> {
    let mut wide = state.to_vec();
    if let Some(last) = wide.last_mut() {
        *last *= k;
    }
    wide
}

/// The error for a backend that said it has the fused cell and then ran none.
fn no_fused_cell() -> Error {
    Error::Unsupported {
        op: "gru_cell",
        message: "the device's backend reported a fused GRU cell but did not run it".into(),
    }
}

/// The GRU's update as a node composed of element-wise ops (backends without the fused
/// cell), saving `r`, `z`, `n`, `hn` and `h`.
#[track_caller]
fn gru_update_composed(gi: &Tensor, gh: &Tensor, h: &Tensor) -> Result<Tensor> {
    Entry::new("gru_cell", &[gi, gh, h])?
        .run(
            |_, t| {
                let (i, hh) = (chunks(t[0], 3)?, chunks(t[1], 3)?);
                let r = hh[0].add(&i[0])?.sigmoid()?;
                let z = hh[1].add(&i[1])?.sigmoid()?;
                let n = i[2].add(&hh[2].mul(&r)?)?.tanh()?;
                let h1 = t[2].sub(&n)?.mul(&z)?.add(&n)?;
                Ok((h1, [r, z, n, hh[2].clone()]))
            },
            |ctx, t, (out, parts)| {
                record(ctx, "GruCellBackward", t, out, |rec| {
                    let need = [rec.needs(0), rec.needs(1), rec.needs(2)];
                    let saved = parts
                        .iter()
                        .map(|p| rec.save(p))
                        .collect::<Result<Vec<_>>>()?;
                    let sh = rec.save(t[2])?;
                    Ok(move |g: Tensor| -> Grads {
                        let [r, z, n, hn] = [0, 1, 2, 3].map(|k| saved[k].get());
                        let (r, z, n, hn) = (r?, z?, n?, hn?);
                        let h = sh.get()?;
                        let dz = g.mul(&h.sub(&n)?)?;
                        let dn = g.mul(&z.neg()?.add(1.0)?)?;
                        let da_n = dn.mul(&tanh_slope(&n)?)?;
                        let da_z = dz.mul(&sigmoid_slope(&z)?)?;
                        let da_r = da_n.mul(&hn)?.mul(&sigmoid_slope(&r)?)?;
                        let last = g.dim() as i64 - 1;
                        let gi = if need[0] {
                            Some(Tensor::cat(&[&da_r, &da_z, &da_n], last)?)
                        } else {
                            None
                        };
                        let gh = if need[1] {
                            Some(Tensor::cat(&[&da_r, &da_z, &da_n.mul(&r)?], last)?)
                        } else {
                            None
                        };
                        let gx = if need[2] { Some(g.mul(&z)?) } else { None };
                        Ok(vec![gi, gh, gx])
                    })
                })
            },
        )
        .map(|(out, _)| out)
}
