//! The fused LSTM cell's kernels ([`crate::backend::Backend::lstm_cell_forward`] and
//! [`crate::backend::Backend::lstm_cell_backward`]) reached from tensors: every operand is a
//! `[rows, cols]` matrix whose rows are contiguous (a step of a layer's buffers, or a fresh
//! tensor), and every written one belongs to the caller, made by its op and not yet handed
//! out. Nothing here allocates; the layer that calls these owns the memory plan.

use super::cell_operands::{matrix, Bodies};
use crate::backend::args::{LstmCellArgs, LstmCellBackwardArgs, RowsAt};
use crate::backend::for_device;
use crate::{DType, Result, Tensor};

/// Whether the fused cell takes operands of `dtype` on `device`'s backend.
pub(crate) fn fused(dtype: DType, device: crate::Device) -> Result<bool> {
    Ok(matches!(dtype, DType::F32 | DType::F64) && for_device(device)?.fused_lstm_cell())
}

/// The operands of one forward step (see [`crate::backend::args::LstmCellArgs`]).
pub(crate) struct ForwardStep<'a> {
    /// `[rows, 4H]` pre-activation gates from the input (with its bias, or not).
    pub(crate) input_gates: &'a Tensor,
    /// `[rows, 4H]` gates from the hidden state, when there are any.
    pub(crate) hidden_gates: Option<&'a Tensor>,
    /// `[4H]` contiguous biases, each when there is one.
    pub(crate) biases: [Option<&'a Tensor>; 2],
    /// `[rows, H]`: the cell state before the step.
    pub(crate) cx: &'a Tensor,
    /// `[rows, 4H]` written with the activated gates; may be `input_gates` itself.
    pub(crate) workspace: &'a Tensor,
    /// `[rows, H]` written: the hidden state after the step.
    pub(crate) hy: &'a Tensor,
    /// `[rows, H]` written: the cell state after the step.
    pub(crate) cy: &'a Tensor,
}

/// Recomputes one step's cell state `cy` from its activated gates (`workspace`, read) and
/// `cx`, rounded as the forward step rounded it; false (nothing written) where the
/// backend has no fused cell.
pub(crate) fn cell_state(workspace: &Tensor, cx: &Tensor, cy: &Tensor) -> Result<bool> {
    let (rows, hidden) = matrix(cx)?;
    let bodies = Bodies::new(&[workspace, cx], &[cy])?;
    let guards = bodies.lock();
    let esize = cx.dtype().size();
    let read = |t: Option<&Tensor>| bodies.read(&guards, t, esize);
    let gates = read(Some(workspace));
    let args = LstmCellArgs {
        dtype: cx.dtype(),
        rows,
        hidden,
        input_gates: read(None),
        hidden_gates: read(None),
        bias_ih: std::ptr::null(),
        bias_hh: std::ptr::null(),
        cx: read(Some(cx)),
        workspace: RowsAt {
            ptr: gates.ptr.cast_mut(),
            row_stride: gates.row_stride,
        },
        hy: RowsAt {
            ptr: std::ptr::null_mut(),
            row_stride: 0,
        },
        cy: bodies.write(&guards, 0, esize),
        activated: true,
    };
    // SAFETY: `workspace` is [rows, 4H] and `cx`, `cy` [rows, H] with contiguous rows (the
    // caller's layer, checked by `Bodies::new`); with `activated` the workspace is only
    // read; `cy` is the caller's private buffer, overlapping neither; every storage is
    // locked until `guards` drops.
    let done = unsafe { for_device(cx.device())?.lstm_cell_forward(&args) };
    drop(guards);
    Ok(done)
}

/// The operands of one backward step (see [`crate::backend::args::LstmCellBackwardArgs`]).
pub(crate) struct BackwardStep<'a> {
    /// `[rows, H]`: the hidden state's gradient, when it has one.
    pub(crate) grad_hy: Option<&'a Tensor>,
    /// `[rows, H]`: the cell state's gradient, when it has one.
    pub(crate) grad_cy: Option<&'a Tensor>,
    /// `[rows, H]`: the cell state before the step.
    pub(crate) cx: &'a Tensor,
    /// `[rows, H]`: the cell state after it.
    pub(crate) cy: &'a Tensor,
    /// `[rows, 4H]`: the activated gates the forward wrote.
    pub(crate) workspace: &'a Tensor,
    /// `[rows, 4H]` written: the pre-activation gates' gradient; may be `workspace` itself.
    pub(crate) grad_gates: &'a Tensor,
    /// `[rows, H]` written: the previous cell state's gradient; may be `grad_cy` itself.
    pub(crate) grad_cx: &'a Tensor,
}

/// Runs one forward step; false (nothing written) where the backend has no fused cell.
pub(crate) fn forward(step: &ForwardStep<'_>) -> Result<bool> {
    let s = step;
    let (rows, hidden) = matrix(s.cx)?;
    let reads: Vec<&Tensor> = [Some(s.input_gates), s.hidden_gates, Some(s.cx)]
        .into_iter()
        .chain(s.biases)
        .flatten()
        .collect();
    let bodies = Bodies::new(&reads, &[s.workspace, s.hy, s.cy])?;
    let guards = bodies.lock();
    let esize = s.cx.dtype().size();
    let read = |t: Option<&Tensor>| bodies.read(&guards, t, esize);
    let args = LstmCellArgs {
        dtype: s.cx.dtype(),
        rows,
        hidden,
        input_gates: read(Some(s.input_gates)),
        hidden_gates: read(s.hidden_gates),
        bias_ih: read(s.biases[0]).ptr,
        bias_hh: read(s.biases[1]).ptr,
        cx: read(Some(s.cx)),
        workspace: bodies.write(&guards, 0, esize),
        hy: bodies.write(&guards, 1, esize),
        cy: bodies.write(&guards, 2, esize),
        activated: false,
    };
    // SAFETY: the caller's layer gives [rows, 4H] gates, [rows, H] states and [4H]
    // contiguous biases of one dtype, and `Bodies::new` checked each has contiguous rows;
    // the written tensors are the caller's private buffers, overlapping each other not at
    // all and the inputs only where the workspace is the input gates (which the kernel
    // allows); every storage is locked until `guards` drops.
    let done = unsafe { for_device(s.cx.device())?.lstm_cell_forward(&args) };
    drop(guards);
    Ok(done)
}

/// Runs one backward step; false (nothing written) where the backend has no fused cell.
pub(crate) fn backward(step: &BackwardStep<'_>) -> Result<bool> {
    let s = step;
    let (rows, hidden) = matrix(s.cx)?;
    let reads: Vec<&Tensor> = [
        s.grad_hy,
        s.grad_cy,
        Some(s.cx),
        Some(s.cy),
        Some(s.workspace),
    ]
    .into_iter()
    .flatten()
    .collect();
    let bodies = Bodies::new(&reads, &[s.grad_gates, s.grad_cx])?;
    let guards = bodies.lock();
    let esize = s.cx.dtype().size();
    let read = |t: Option<&Tensor>| bodies.read(&guards, t, esize);
    let args = LstmCellBackwardArgs {
        dtype: s.cx.dtype(),
        rows,
        hidden,
        grad_hy: read(s.grad_hy),
        grad_cy: read(s.grad_cy),
        cx: read(Some(s.cx)),
        cy: read(Some(s.cy)),
        workspace: read(Some(s.workspace)),
        grad_gates: bodies.write(&guards, 0, esize),
        grad_cx: bodies.write(&guards, 1, esize),
    };
    // SAFETY: as in `forward`: shapes from the caller's layer, rows checked contiguous,
    // private written buffers that overlap only where `grad_cx` is `grad_cy` or
    // `grad_gates` the workspace (both allowed), storages locked until `guards` drops.
    let done = unsafe { for_device(s.cx.device())?.lstm_cell_backward(&args) };
    drop(guards);
    Ok(done)
}
