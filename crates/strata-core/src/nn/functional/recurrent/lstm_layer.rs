//! `lstm_layer`: one LSTM layer over a whole sequence. With f32 or f64 operands on a backend
//! with the fused cell (and no autocast) it is one node, laid out as cuDNN and PyTorch's CPU
//! layer are: the input-to-hidden products of every step as one product before the loop,
//! each step one hidden product and one fused cell, and the backward one fused cell per step
//! followed by the weights' gradients as one product each over all steps. Elsewhere it is
//! the sequence of [`lstm_cell`]s, as before.
//!
//! Memory: the node keeps the input, `h0`, `c0` and the weights (no copies), the activated
//! gates of every step (`[T, B, 4H]`, written over the input products) and its output
//! buffer: the hidden states `[T, B, H]` followed by the final cell state `[B, H]`, of which
//! the output, `h_n` and `c_n` are views. The cell states between are not kept: the
//! backward recomputes them from the saved gates (`c_t = f_t·c_{t-1} + i_t·g_t`, one fused
//! pass per step, rounded as the forward rounded them), and writes the gates'
//! gradients over the saved gates when the graph is not retained (the engine frees them
//! right after). So a training step's peak stays that of a loop of cells, whose saves are
//! freed step by step.

use super::{check_layer, declined, dims, fresh, lstm_cell, uniform, GradientsOverSaved};
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, take, Grads};
use crate::op::OpContext;
use crate::ops::lstm_cell::{self as kernel, BackwardStep, ForwardStep};
use crate::{Result, Tensor};

/// One LSTM layer over the sequence `x` (`[T, B, I]`) from the states `h0` and `c0`
/// (`[B, H]`), with the weights and biases of [`lstm_cell`] (`w_ih` `[4H, I]`, `w_hh`
/// `[4H, H]`, biases `[4H]`). Returns `(output, h_n, c_n)`: the hidden state of every step
/// (`[T, B, H]`) and the final states (`[B, H]`), the values a loop of [`lstm_cell`]s gives.
///
/// The output is contiguous, as PyTorch's.
///
/// ```
/// use strata_core::nn::functional::lstm_layer;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::ones(&[5, 2, 3], DType::F32)?;
/// let (h0, c0) = (Tensor::zeros(&[2, 4], DType::F32)?, Tensor::zeros(&[2, 4], DType::F32)?);
/// let (w_ih, w_hh) = (Tensor::zeros(&[16, 3], DType::F32)?, Tensor::zeros(&[16, 4], DType::F32)?);
/// let (out, h, c) = lstm_layer(&x, &h0, &c0, &w_ih, &w_hh, None, None)?;
/// assert_eq!(out.shape().as_slice(), [5, 2, 4]);
/// // Zero gates: every state stays 0.
/// assert_eq!(c.to_vec::<f32>()?, vec![0.0; 8]);
/// assert_eq!(h.shape().as_slice(), [2, 4]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn lstm_layer(
    x: &Tensor,
    h0: &Tensor,
    c0: &Tensor,
    w_ih: &Tensor,
    w_hh: &Tensor,
    b_ih: Option<&Tensor>,
    b_hh: Option<&Tensor>,
) -> Result<(Tensor, Tensor, Tensor)> {
    let biases = [b_ih, b_hh];
    if let Some(out) = check_layer("lstm", x, h0, Some(c0), [w_ih, w_hh], biases, 4)? {
        return Ok((out, h0.clone(), c0.clone()));
    }
    let (steps, batch, hidden) = (x.shape()[0], x.shape()[1], h0.shape()[1]);
    let mut inputs = vec![x, h0, c0, w_ih, w_hh];
    inputs.extend(b_ih);
    inputs.extend(b_hh);
    if !(uniform(&inputs) && kernel::fused(x.dtype(), x.device())?) {
        return stepped(x, h0, c0, w_ih, w_hh, b_ih, b_hh);
    }
    let (has_bi, has_bh) = (b_ih.is_some(), b_hh.is_some());
    let (y, ..) = Entry::new("lstm", &inputs)?.run(
        |ctx, t| fused_forward(ctx, t, has_bi, has_bh),
        |ctx, t, (y, gates)| record_backward(ctx, t, y, gates),
    )?;
    let (out, c_n) = split_states(&y, steps, batch, hidden)?;
    let h_n = out.select(0, steps - 1)?;
    Ok((out, h_n, c_n))
}

/// The node's output buffer `y` (or its gradient) seen as the hidden states `[T, B, H]` and
/// the final cell state `[B, H]` that follows them.
fn split_states(y: &Tensor, steps: usize, batch: usize, hidden: usize) -> Result<(Tensor, Tensor)> {
    let seq = steps * batch * hidden;
    let out = y.narrow(0, 0, seq)?.view(&dims(&[steps, batch, hidden]))?;
    let c_n = y
        .narrow(0, seq, batch * hidden)?
        .view(&dims(&[batch, hidden]))?;
    Ok((out, c_n))
}

/// The layer as a loop of [`lstm_cell`]s, each step recorded on its own.
#[allow(clippy::too_many_arguments)]
fn stepped(
    x: &Tensor,
    h0: &Tensor,
    c0: &Tensor,
    w_ih: &Tensor,
    w_hh: &Tensor,
    b_ih: Option<&Tensor>,
    b_hh: Option<&Tensor>,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (mut h, mut c) = (h0.clone(), c0.clone());
    let mut outs = Vec::with_capacity(x.shape()[0]);
    for s in 0..x.shape()[0] {
        (h, c) = lstm_cell(&x.select(0, s)?, &h, &c, w_ih, w_hh, b_ih, b_hh)?;
        outs.push(h.clone());
    }
    let out = Tensor::stack(&outs.iter().collect::<Vec<_>>(), 0)?;
    Ok((out, h, c))
}

/// The forward: `(y, gates)`: the node's output buffer (every step's hidden state, then the
/// final cell state) and the `[T, B, 4H]` activated gates.
fn fused_forward(
    ctx: &OpContext,
    t: &[&Tensor],
    has_bi: bool,
    has_bh: bool,
) -> Result<(Tensor, Tensor)> {
    let (x, w_ih, w_hh) = (t[0], t[3], t[4]);
    let (h0, c0) = (t[1].contiguous()?, t[2].contiguous()?);
    let b_ih = has_bi.then(|| t[5]);
    let b_hh = match has_bh.then(|| t[5 + has_bi as usize]) {
        Some(b) => Some(b.contiguous()?),
        None => None,
    };
    let (steps, batch, hidden) = (x.shape()[0], x.shape()[1], h0.shape()[1]);
    // Every step's input product at once, the input bias added in place (no second
    // `[T, B, 4H]` buffer); the cells then activate it in place.
    let gates = x.matmul(&w_ih.t()?)?;
    if let Some(b) = b_ih {
        gates.add_(b)?;
    }
    let y = fresh(ctx, x, &[(steps + 1) * batch * hidden])?;
    let (out, c_n) = split_states(&y, steps, batch, hidden)?;
    // The cell states between are written to two buffers in turn: the backward recomputes them.
    let between = if steps > 1 {
        fresh(ctx, x, &[2, batch, hidden])?
    } else {
        c_n.clone()
    };
    let w_hh_t = w_hh.t()?;
    let (mut h, mut c) = (h0, c0);
    for s in 0..steps {
        let g = gates.select(0, s)?;
        let hidden_gates = h.matmul(&w_hh_t)?;
        let hy = out.select(0, s)?;
        let cy = if s + 1 == steps {
            c_n.clone()
        } else {
            between.select(0, s % 2)?
        };
        let step = ForwardStep {
            input_gates: &g,
            hidden_gates: Some(&hidden_gates),
            biases: [None, b_hh.as_ref()],
            cx: &c,
            workspace: &g,
            hy: &hy,
            cy: &cy,
        };
        if !kernel::forward(&step)? {
            return Err(declined("lstm"));
        }
        (h, c) = (hy, cy);
    }
    Ok((y, gates))
}

/// The cell states before the last, `c_0 … c_{T-2}` (`[T - 1, B, H]`), recomputed from the
/// activated gates by the fused cell, rounded as the forward rounded them.
fn cell_states(ctx: &OpContext, gates: &Tensor, c0: &Tensor) -> Result<Tensor> {
    let (steps, batch, hidden) = (gates.shape()[0], gates.shape()[1], c0.shape()[1]);
    let cells = fresh(ctx, c0, &[steps - 1, batch, hidden])?;
    let mut c = c0.clone();
    for s in 0..steps - 1 {
        let cy = cells.select(0, s)?;
        if !kernel::cell_state(&gates.select(0, s)?, &c, &cy)? {
            return Err(declined("lstm"));
        }
        c = cy;
    }
    Ok(cells)
}

/// Records the node: its backward runs the fused cells from the last step to the first, then
/// forms the weights' gradients as one product each.
fn record_backward(ctx: &OpContext, t: &[&Tensor], y: &Tensor, gates: &Tensor) -> Result<()> {
    let (steps, batch, hidden) = (t[0].shape()[0], t[0].shape()[1], t[1].shape()[1]);
    let inputs = t.len();
    let bias_inputs: Vec<usize> = (5..inputs).collect();
    record(ctx, "LstmLayerBackward0", t, y, |rec| {
        let need: Vec<bool> = (0..inputs).map(|i| rec.needs(i)).collect();
        let sx = rec.save_if(need[3], t[0])?;
        let sh0 = rec.save_if(need[4], t[1])?;
        let sc0 = rec.save(t[2])?;
        let sw_ih = rec.save_if(need[0], t[3])?;
        let sw_hh = rec.save(t[4])?;
        let sgates = rec.save(gates)?;
        let sy = rec.save(y)?;
        let mut over_saved = GradientsOverSaved::new("lstm", "gates");
        Ok(move |g: Tensor| -> Grads {
            over_saved.check()?;
            let ctx = OpContext::enter("lstm_backward");
            let (y, gates) = (sy.get()?, sgates.get()?);
            let (c0, w_hh) = (sc0.get()?.contiguous()?, sw_hh.get()?);
            let cells = cell_states(&ctx, &gates, &c0)?;
            let (out, c_n) = split_states(&y, steps, batch, hidden)?;
            let (g_out, g_cn) = split_states(&g, steps, batch, hidden)?;
            // The gates' gradients take the saved gates' place unless the graph is kept.
            let dgates = over_saved.buffer(&ctx, &gates)?;
            let cell = |s: usize| match s + 1 == steps {
                true => Ok(c_n.clone()),
                false => cells.select(0, s),
            };
            let (mut dh, mut dc): (Option<Tensor>, Option<Tensor>) = (None, None);
            for s in (0..steps).rev() {
                // The hidden state's gradient: the output's plus what the next step sent back.
                let g_h = g_out.select(0, s)?;
                let grad_hy = match dh.take() {
                    Some(dg_next) => g_h.addmm(&dg_next, &w_hh, 1.0, 1.0)?,
                    None => g_h,
                };
                // Only the last cell state is an output; the rest get what the next step sent.
                let (grad_cy, grad_cx) = match dc.take() {
                    Some(carry) => (carry.clone(), carry),
                    None => (g_cn.clone(), fresh(&ctx, &y, &[batch, hidden])?),
                };
                let cx = if s == 0 { c0.clone() } else { cell(s - 1)? };
                let dg = dgates.select(0, s)?;
                let step = BackwardStep {
                    grad_hy: Some(&grad_hy),
                    grad_cy: Some(&grad_cy),
                    cx: &cx,
                    cy: &cell(s)?,
                    workspace: &gates.select(0, s)?,
                    grad_gates: &dg,
                    grad_cx: &grad_cx,
                };
                if !kernel::backward(&step)? {
                    return Err(declined("lstm"));
                }
                dc = Some(grad_cx);
                if s > 0 {
                    dh = Some(dg);
                }
            }
            let rows = steps * batch;
            let flat = dgates.view(&dims(&[rows, 4 * hidden]))?;
            let mut grads: Vec<Option<Tensor>> = vec![None; inputs];
            if need[0] {
                grads[0] = Some(dgates.matmul(&take(&sw_ih)?)?);
            }
            if need[1] {
                grads[1] = Some(dgates.select(0, 0)?.matmul(&w_hh)?);
            }
            grads[2] = if need[2] { dc } else { None };
            if need[3] {
                let x = take(&sx)?;
                let x = x.reshape(&dims(&[rows, x.shape()[2]]))?;
                grads[3] = Some(flat.t()?.matmul(&x)?);
            }
            if need[4] {
                // Step s's hidden product read h_{s-1}: h0 for the first, the output after.
                let first = dgates.select(0, 0)?.t()?.matmul(&take(&sh0)?)?;
                grads[4] = Some(if steps > 1 {
                    let later = flat.narrow(0, batch, rows - batch)?;
                    let before = out.narrow(0, 0, steps - 1)?;
                    let before = before.view(&dims(&[rows - batch, hidden]))?;
                    first.addmm(&later.t()?, &before, 1.0, 1.0)?
                } else {
                    first
                });
            }
            let wanted: Vec<usize> = bias_inputs.iter().copied().filter(|&i| need[i]).collect();
            if let Some((&first, rest)) = wanted.split_first() {
                // Both biases get the same values, in tensors of their own.
                let db = flat.sum(Some(&[0]), false)?;
                for &i in rest {
                    grads[i] = Some(db.deep_clone()?);
                }
                grads[first] = Some(db);
            }
            Ok(grads)
        })
    })
}
