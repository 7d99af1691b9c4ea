//! `lstm_cell` (in `lstm_cell.rs`) and `gru_cell` (in `gru_cell.rs`): the two gate products
//! are ordinary recorded `linear`s (which save only the tensors they were given), and the
//! element-wise rest of each cell is a node of its own that saves the pre-activation gates
//! and the states, not the dozen intermediates a composition of generic ops would keep. With
//! bf16 or f16 gates (under autocast, or with half-precision inputs) the rest is PyTorch's
//! composition of generic recorded ops instead, so that every step rounds as PyTorch's CPU
//! cells do. `lstm_layer` and `gru_layer` run a whole sequence as one node where the fused
//! cell is available. This file holds what the cells and layers share: the shape checks,
//! the choice of the composed path, the gates' chunks and the activations' slopes.

mod gru_cell;
mod gru_layer;
mod lstm_cell;
mod lstm_layer;

pub use gru_cell::gru_cell;
pub use gru_layer::gru_layer;
pub use lstm_cell::lstm_cell;
pub use lstm_layer::lstm_layer;

use super::check::{floating, shape};
use crate::api::autocast::autocast_dtype;
use crate::autograd::engine::retains_graph;
use crate::layout::Layout;
use crate::op::OpContext;
use crate::{DType, Result, Tensor};

/// Checks a cell's shapes: `x` `[B, I]` or `[I]`, states `[B, H]` or `[H]`, `w_ih`
/// `[k·H, I]`, `w_hh` `[k·H, H]`.
fn check(
    op: &'static str,
    x: &Tensor,
    h: &Tensor,
    c: Option<&Tensor>,
    w_ih: &Tensor,
    w_hh: &Tensor,
    k: usize,
) -> Result<()> {
    floating(op, "the input", x)?;
    let bad = |what: String| {
        Err(shape(
            op,
            what,
            vec![
                x.shape().to_vec(),
                h.shape().to_vec(),
                w_ih.shape().to_vec(),
                w_hh.shape().to_vec(),
            ],
            "x is [B, input_size], the states [B, hidden_size], w_ih [gates·hidden_size, \
             input_size] and w_hh [gates·hidden_size, hidden_size]",
        ))
    };
    if !matches!(x.dim(), 1 | 2) || h.dim() != x.dim() {
        return bad(format!(
            "x {:?} and h {:?} must both be 2-d (or both 1-d)",
            x.shape(),
            h.shape()
        ));
    }
    let hidden = h.shape()[h.dim() - 1];
    let input = x.shape()[x.dim() - 1];
    if x.dim() == 2 && x.shape()[0] != h.shape()[0] {
        return bad(format!(
            "x {:?} and h {:?} have different batch sizes",
            x.shape(),
            h.shape()
        ));
    }
    if let Some(c) = c {
        if c.shape() != h.shape() {
            return bad(format!(
                "c {:?} must have h's shape {:?}",
                c.shape(),
                h.shape()
            ));
        }
    }
    if w_ih.shape().as_slice() != [k * hidden, input]
        || w_hh.shape().as_slice() != [k * hidden, hidden]
    {
        return bad(format!(
            "w_ih {:?} and w_hh {:?} must be [{}, {input}] and [{}, {hidden}]",
            w_ih.shape(),
            w_hh.shape(),
            k * hidden,
            k * hidden
        ));
    }
    Ok(())
}

/// Checks a layer's shapes: `x` `[T, B, I]`, the states `[B, H]`, the weights `[w_ih, w_hh]`
/// as [`check`] wants them for `k` gates, and each bias `[k·H]`. For a sequence of no steps
/// returns its output, an empty `[0, B, H]` tensor.
fn check_layer(
    op: &'static str,
    x: &Tensor,
    h0: &Tensor,
    c0: Option<&Tensor>,
    [w_ih, w_hh]: [&Tensor; 2],
    biases: [Option<&Tensor>; 2],
    k: usize,
) -> Result<Option<Tensor>> {
    if x.dim() != 3 || h0.dim() != 2 {
        return Err(shape(
            op,
            format!(
                "expected a [T, B, input_size] sequence and [B, hidden_size] states, got {:?} \
                 and {:?}",
                x.shape(),
                h0.shape()
            ),
            vec![x.shape().to_vec(), h0.shape().to_vec()],
            "unbatched sequences take a batch dimension of 1 (unsqueeze(1))",
        ));
    }
    let (steps, batch, hidden) = (x.shape()[0], x.shape()[1], h0.shape()[1]);
    if steps == 0 {
        return Tensor::on(x.device())
            .zeros(&[0, batch, hidden], x.dtype())
            .map(Some);
    }
    check(op, &x.select(0, 0)?, h0, c0, w_ih, w_hh, k)?;
    for b in biases.into_iter().flatten() {
        if b.shape().as_slice() != [k * hidden] {
            return Err(shape(
                op,
                format!("a bias must be [{}], got {:?}", k * hidden, b.shape()),
                vec![b.shape().to_vec()],
                "give one bias per gate unit: [gates·hidden_size]",
            ));
        }
    }
    Ok(None)
}

/// Whether a layer's operands may run as one fused node: one dtype and one device, and no
/// autocast region open (there the steps are cells, whose products autocast casts).
fn uniform(inputs: &[&Tensor]) -> bool {
    let (dtype, device) = (inputs[0].dtype(), inputs[0].device());
    autocast_dtype().is_none()
        && inputs
            .iter()
            .all(|t| t.dtype() == dtype && t.device() == device)
}

/// Where a layer's backward writes its gates' gradients: over the buffer the node saved (the
/// engine frees it right after the node), unless the graph is retained, when the saved
/// buffer will be read again and the gradients get a fresh one. A backward that failed after
/// it began overwriting refuses to run again.
struct GradientsOverSaved {
    op: &'static str,
    /// What the saved buffer holds, for the error.
    what: &'static str,
    overwritten: bool,
}

impl GradientsOverSaved {
    fn new(op: &'static str, what: &'static str) -> Self {
        GradientsOverSaved {
            op,
            what,
            overwritten: false,
        }
    }

    /// `Err` when an earlier backward began writing over the saved buffer.
    fn check(&self) -> Result<()> {
        if !self.overwritten {
            return Ok(());
        }
        Err(crate::Error::Autograd {
            message: format!(
                "{}: an earlier backward through this layer failed after it had begun \
                 writing its gradients over its saved {}. Hint: run the forward again",
                self.op, self.what
            ),
        })
    }

    /// The buffer for the gradients: `saved` itself unless the graph is retained.
    fn buffer(&mut self, ctx: &OpContext, saved: &Tensor) -> Result<Tensor> {
        if retains_graph() {
            return fresh(ctx, saved, &saved.shape());
        }
        self.overwritten = true;
        Ok(saved.clone())
    }
}

/// The error for a backend that declined the fused cell of layer `op` after saying it had
/// one.
fn declined(op: &'static str) -> crate::Error {
    crate::Error::Unsupported {
        op,
        message: format!("the device's backend declined the fused {op} cell it reported"),
    }
}

/// Sizes as `view` takes them.
fn dims(sizes: &[usize]) -> Vec<i64> {
    sizes.iter().map(|&s| s as i64).collect()
}

/// Whether a cell runs as PyTorch's composition of recorded ops rather than as one node:
/// when its gates are bf16 or f16 (under autocast, or with half-precision inputs), or of
/// another dtype than the state. There every op rounds to its own dtype, as PyTorch's
/// composition does, which a fused node computing in the widest dtype would not mirror.
fn composed(gates: &Tensor, state: &Tensor) -> bool {
    matches!(gates.dtype(), DType::BF16 | DType::F16) || gates.dtype() != state.dtype()
}

/// A new contiguous tensor of `shape` with `like`'s dtype and device, allocated by the op.
pub(super) fn fresh(ctx: &OpContext, like: &Tensor, shape: &[usize]) -> Result<Tensor> {
    Tensor::uninit_with_layout(
        ctx,
        Layout::contiguous(shape, 0),
        like.dtype(),
        like.device(),
    )
}

/// The gates' `k` chunks along the last dimension.
fn chunks(gates: &Tensor, k: usize) -> Result<Vec<Tensor>> {
    gates.chunk(k, gates.dim() as i64 - 1)
}

/// `1 - t²`, the derivative of tanh at the point whose tanh is `t`.
fn tanh_slope(t: &Tensor) -> Result<Tensor> {
    t.mul(t)?.neg()?.add(1.0)
}

/// `s·(1 - s)`, the derivative of the sigmoid at the point whose sigmoid is `s`.
fn sigmoid_slope(s: &Tensor) -> Result<Tensor> {
    s.neg()?.add(1.0)?.mul(s)
}
