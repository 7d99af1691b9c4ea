//! `gru_layer`: one GRU layer over a whole sequence. With f32 or f64 operands on a backend
//! with the fused cell (and no autocast) it is one node, laid out as `lstm_layer` is (and as
//! cuDNN and PyTorch's CPU layer are): the input-to-hidden products of every step as one
//! product before the loop, each step one hidden product and one fused cell, and the
//! backward one fused cell per step followed by the weights' gradients as one product per
//! gate block over all steps. Elsewhere it is the sequence of [`gru_cell`]s, as before.
//!
//! Memory: the node keeps the input, `h0` and the weights (no copies), every step's
//! workspace (`[T, B, 4H]`: `r, z, n` and the hidden product's `hn`, written over the input
//! products, which the forward computes into the workspace's first `3H` columns) and its
//! output, the hidden states `[T, B, H]` (`h_n` is a view of it). The backward writes the
//! gates' gradients over the saved workspaces when the graph is not retained (the engine
//! frees them right after), so a training step's peak stays that of a loop of cells, whose
//! saves are freed step by step.

use super::{check_layer, declined, dims, fresh, gru_cell, uniform, GradientsOverSaved};
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, take, Grads};
use crate::nn::functional::linear;
use crate::op::OpContext;
use crate::ops::gru_cell::{self as kernel, BackwardStep, ForwardStep};
use crate::{Result, Tensor};

/// One GRU layer over the sequence `x` (`[T, B, I]`) from the state `h0` (`[B, H]`), with
/// the weights and biases of [`gru_cell`] (`w_ih` `[3H, I]`, `w_hh` `[3H, H]`, biases
/// `[3H]`). Returns `(output, h_n)`: the hidden state of every step (`[T, B, H]`) and the
/// final state (`[B, H]`), the values a loop of [`gru_cell`]s gives.
///
/// The output is contiguous, as PyTorch's.
///
/// ```
/// use strata_core::nn::functional::gru_layer;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::ones(&[5, 2, 3], DType::F32)?;
/// let h0 = Tensor::ones(&[2, 4], DType::F32)?;
/// let (w_ih, w_hh) = (Tensor::zeros(&[12, 3], DType::F32)?, Tensor::zeros(&[12, 4], DType::F32)?);
/// let (out, h) = gru_layer(&x, &h0, &w_ih, &w_hh, None, None)?;
/// assert_eq!(out.shape().as_slice(), [5, 2, 4]);
/// // Zero gates: z = 0.5 and n = 0, so the state halves at every step.
/// assert_eq!(h.to_vec::<f32>()?, vec![0.5f32.powi(5); 8]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn gru_layer(
    x: &Tensor,
    h0: &Tensor,
    w_ih: &Tensor,
    w_hh: &Tensor,
    b_ih: Option<&Tensor>,
    b_hh: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    if let Some(out) = check_layer("gru", x, h0, None, [w_ih, w_hh], [b_ih, b_hh], 3)? {
        return Ok((out, h0.clone()));
    }
    let steps = x.shape()[0];
    let mut inputs = vec![x, h0, w_ih, w_hh];
    inputs.extend(b_ih);
    inputs.extend(b_hh);
    if !(uniform(&inputs) && kernel::available(x.dtype(), x.device())?) {
        return stepped(x, h0, w_ih, w_hh, b_ih, b_hh);
    }
    let (has_bi, has_bh) = (b_ih.is_some(), b_hh.is_some());
    let (out, _) = Entry::new("gru", &inputs)?.run(
        |ctx, t| fused_forward(ctx, t, has_bi, has_bh),
        |ctx, t, (out, workspace)| record_backward(ctx, t, out, workspace, has_bi),
    )?;
    let h_n = out.select(0, steps - 1)?;
    Ok((out, h_n))
}

/// The layer as a loop of [`gru_cell`]s, each step recorded on its own.
fn stepped(
    x: &Tensor,
    h0: &Tensor,
    w_ih: &Tensor,
    w_hh: &Tensor,
    b_ih: Option<&Tensor>,
    b_hh: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    let mut h = h0.clone();
    let mut outs = Vec::with_capacity(x.shape()[0]);
    for s in 0..x.shape()[0] {
        h = gru_cell(&x.select(0, s)?, &h, w_ih, w_hh, b_ih, b_hh)?;
        outs.push(h.clone());
    }
    let out = Tensor::stack(&outs.iter().collect::<Vec<_>>(), 0)?;
    Ok((out, h))
}

/// The forward: `(out, workspace)`: every step's hidden state `[T, B, H]` and the
/// `[T, B, 4H]` workspaces of the steps.
fn fused_forward(
    ctx: &OpContext,
    t: &[&Tensor],
    has_bi: bool,
    has_bh: bool,
) -> Result<(Tensor, Tensor)> {
    let (x, w_ih, w_hh) = (t[0], t[2], t[3]);
    let h0 = t[1].contiguous()?;
    let b_ih = has_bi.then(|| t[4]);
    let b_hh = has_bh.then(|| t[4 + has_bi as usize]);
    let (steps, batch, hidden) = (x.shape()[0], x.shape()[1], h0.shape()[1]);
    let out = fresh(ctx, x, &[steps, batch, hidden])?;
    let workspace = fresh(ctx, x, &[steps, batch, 4 * hidden])?;
    // Every step's input product at once, written into the first 3H columns of its
    // workspace (the bias added in place), where its cell reads it and writes `r, z, n`
    // over it: no second [T, B, 3H] buffer.
    let input_gates = workspace.narrow(2, 0, 3 * hidden)?;
    x.matmul_out(&w_ih.t()?, &input_gates)?;
    if let Some(b) = b_ih {
        input_gates.add_(b)?;
    }
    // Those writes are part of making the buffer, not writes a saved tensor could miss.
    workspace.reset_fresh_version();
    let mut h = h0;
    for s in 0..steps {
        let hidden_gates = linear(&h, w_hh, b_hh)?;
        let hy = out.select(0, s)?;
        let step = ForwardStep {
            input_gates: &input_gates.select(0, s)?,
            hidden_gates: &hidden_gates,
            h: &h,
            workspace: &workspace.select(0, s)?,
            hy: &hy,
        };
        if !kernel::forward(&step)? {
            return Err(declined("gru"));
        }
        h = hy;
    }
    Ok((out, workspace))
}

/// Records the node: its backward runs the fused cells from the last step to the first, then
/// forms the weights' gradients as one product per gate block. `has_bi` says whether
/// `t[4]` is the input bias.
fn record_backward(
    ctx: &OpContext,
    t: &[&Tensor],
    out: &Tensor,
    workspace: &Tensor,
    has_bi: bool,
) -> Result<()> {
    let (steps, batch, hidden) = (t[0].shape()[0], t[0].shape()[1], t[1].shape()[1]);
    let inputs = t.len();
    let bias_inputs: Vec<usize> = (4..inputs).collect();
    record(ctx, "GruLayerBackward0", t, out, |rec| {
        let need: Vec<bool> = (0..inputs).map(|i| rec.needs(i)).collect();
        let sx = rec.save_if(need[2], t[0])?;
        let sh0 = rec.save(t[1])?;
        let sw_ih = rec.save_if(need[0], t[2])?;
        let sw_hh = rec.save(t[3])?;
        let sworkspace = rec.save(workspace)?;
        let sout = rec.save(out)?;
        let mut over_saved = GradientsOverSaved::new("gru", "workspace");
        Ok(move |g: Tensor| -> Grads {
            over_saved.check()?;
            let ctx = OpContext::enter("gru_backward");
            let (out, workspace, w_hh) = (sout.get()?, sworkspace.get()?, sw_hh.get()?);
            let h0 = sh0.get()?.contiguous()?;
            let g = g.contiguous()?;
            // Each step's gradient row: `[dr, dz, dn]` (its input gates') then `dn·r` (the
            // hidden product's `n` block), over the saved workspace unless the graph is kept.
            let grad_gates = over_saved.buffer(&ctx, &workspace)?;
            let grad_hidden = fresh(&ctx, &out, &[batch, 3 * hidden])?;
            // What step s + 1 sends back to h_s: `g·z` directly, `grad_hidden·w_hh` through
            // the hidden product.
            let mut carry: Option<Tensor> = None;
            for s in (0..steps).rev() {
                let g_h = g.select(0, s)?;
                let grad_hy = match carry.take() {
                    Some(c) => {
                        c.add_(&g_h)?;
                        c
                    }
                    None => g_h,
                };
                let direct = (s > 0 || need[1])
                    .then(|| fresh(&ctx, &out, &[batch, hidden]))
                    .transpose()?;
                let rows = grad_gates.select(0, s)?;
                let h = if s == 0 {
                    h0.clone()
                } else {
                    out.select(0, s - 1)?
                };
                let step = BackwardStep {
                    grad_hy: &grad_hy,
                    h: &h,
                    workspace: &workspace.select(0, s)?,
                    grad_input_gates: Some(&rows.narrow(1, 0, 3 * hidden)?),
                    grad_hidden_gates: Some(&grad_hidden),
                    grad_h: direct.as_ref(),
                };
                if !kernel::backward(&step)? {
                    return Err(declined("gru"));
                }
                rows.narrow(1, 3 * hidden, hidden)?
                    .copy_(&grad_hidden.narrow(1, 2 * hidden, hidden)?)?;
                if let Some(direct) = direct {
                    carry = Some(direct.addmm(&grad_hidden, &w_hh, 1.0, 1.0)?);
                }
            }
            let rows = steps * batch;
            let flat = grad_gates.view(&dims(&[rows, 4 * hidden]))?;
            let input_side = flat.narrow(1, 0, 3 * hidden)?;
            let mut grads: Vec<Option<Tensor>> = vec![None; inputs];
            if need[0] {
                let w_ih = take(&sw_ih)?;
                grads[0] = Some(input_side.matmul(&w_ih)?.view(&dims(&[
                    steps,
                    batch,
                    w_ih.shape()[1],
                ]))?);
            }
            grads[1] = carry;
            if need[2] {
                let x = take(&sx)?;
                let x = x.reshape(&dims(&[rows, x.shape()[2]]))?;
                grads[2] = Some(input_side.t()?.matmul(&x)?);
            }
            if need[3] {
                // Step s's hidden product read h_{s-1}: h0 for the first, the output after;
                // one product for the first step's rows and one for the rest, per block.
                let before = out.narrow(0, 0, steps - 1)?;
                let before = before.view(&dims(&[rows - batch, hidden]))?;
                let mut blocks = Vec::with_capacity(2);
                for block in hidden_blocks(&flat, hidden)? {
                    let first = block.narrow(0, 0, batch)?.t()?.matmul(&h0)?;
                    blocks.push(if steps > 1 {
                        let later = block.narrow(0, batch, rows - batch)?;
                        first.addmm(&later.t()?, &before, 1.0, 1.0)?
                    } else {
                        first
                    });
                }
                grads[3] = Some(Tensor::cat(&[&blocks[0], &blocks[1]], 0)?);
            }
            let wanted: Vec<usize> = bias_inputs.iter().copied().filter(|&i| need[i]).collect();
            if !wanted.is_empty() {
                let sums = flat.sum(Some(&[0]), false)?;
                for i in wanted {
                    // The input bias's gradient is `[dr, dz, dn]`, the hidden one's
                    // `[dr, dz, dn·r]`.
                    grads[i] = Some(if has_bi && i == 4 {
                        sums.narrow(0, 0, 3 * hidden)?.contiguous()?
                    } else {
                        let [rz, n] = hidden_blocks(&sums, hidden)?;
                        Tensor::cat(&[&rz, &n], 0)?
                    });
                }
            }
            Ok(grads)
        })
    })
}

/// The hidden product's gradient blocks of gradient rows `[.., 4H]` (`[dr, dz, dn, dn·r]`),
/// along the last dimension: the `r, z` columns `[.., 2H]` and the `n` block's `[.., H]`.
fn hidden_blocks(rows: &Tensor, hidden: usize) -> Result<[Tensor; 2]> {
    let last = rows.dim() as i64 - 1;
    Ok([
        rows.narrow(last, 0, 2 * hidden)?,
        rows.narrow(last, 3 * hidden, hidden)?,
    ])
}
