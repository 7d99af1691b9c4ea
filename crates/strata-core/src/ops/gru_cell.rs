//! The fused GRU cell's kernels ([`crate::backend::Backend::gru_cell_forward`] and
//! [`crate::backend::Backend::gru_cell_backward`]) reached from tensors: every operand is a
//! `[rows, cols]` matrix (or a vector, as one row) whose rows are contiguous, and every
//! written one is a fresh tensor of the caller's op, not yet handed out. Nothing here
//! allocates.

use super::cell_operands::{matrix, Bodies};
use crate::backend::args::{GruCellArgs, GruCellBackwardArgs, RowsAt};
use crate::backend::for_device;
use crate::{DType, Result, Tensor};

/// Whether the fused cell takes `operands` (the gates and the state): one dtype it has (f32
/// or f64), one device whose backend has it, and rows that are contiguous.
pub(crate) fn fused(operands: &[&Tensor]) -> Result<bool> {
    let Some(first) = operands.first() else {
        return Ok(false);
    };
    let (dtype, device) = (first.dtype(), first.device());
    if !available(dtype, device)? {
        return Ok(false);
    }
    Ok(operands
        .iter()
        .all(|t| t.dtype() == dtype && t.device() == device && matrix(t).is_ok()))
}

/// Whether the fused cell takes operands of `dtype` on `device`'s backend.
pub(crate) fn available(dtype: DType, device: crate::Device) -> Result<bool> {
    Ok(matches!(dtype, DType::F32 | DType::F64) && for_device(device)?.fused_gru_cell())
}

/// The operands of one forward step (see [`GruCellArgs`]).
pub(crate) struct ForwardStep<'a> {
    /// `[rows, 3H]`: the input product's gates, its bias included.
    pub(crate) input_gates: &'a Tensor,
    /// `[rows, 3H]`: the hidden product's gates, its bias included.
    pub(crate) hidden_gates: &'a Tensor,
    /// `[rows, H]`: the state before the step.
    pub(crate) h: &'a Tensor,
    /// `[rows, 4H]` written: `r, z, n, hn`; its first `3H` columns may be `input_gates`.
    pub(crate) workspace: &'a Tensor,
    /// `[rows, H]` written: the state after the step.
    pub(crate) hy: &'a Tensor,
}

/// The operands of one backward step (see [`GruCellBackwardArgs`]).
pub(crate) struct BackwardStep<'a> {
    /// `[rows, H]`: the new state's gradient.
    pub(crate) grad_hy: &'a Tensor,
    /// `[rows, H]`: the state before the step.
    pub(crate) h: &'a Tensor,
    /// `[rows, 4H]`: what the forward wrote.
    pub(crate) workspace: &'a Tensor,
    /// `[rows, 3H]` written, when needed; may be the workspace's first `3H` columns.
    pub(crate) grad_input_gates: Option<&'a Tensor>,
    /// `[rows, 3H]` written, when needed.
    pub(crate) grad_hidden_gates: Option<&'a Tensor>,
    /// `[rows, H]` written, when needed.
    pub(crate) grad_h: Option<&'a Tensor>,
}

/// Runs one forward step; false (nothing written) where the backend has no fused cell.
pub(crate) fn forward(step: &ForwardStep<'_>) -> Result<bool> {
    let s = step;
    let (rows, hidden) = matrix(s.h)?;
    let bodies = Bodies::new(&[s.input_gates, s.hidden_gates, s.h], &[s.workspace, s.hy])?;
    let guards = bodies.lock();
    let esize = s.h.dtype().size();
    let read = |t: &Tensor| bodies.read(&guards, Some(t), esize);
    let args = GruCellArgs {
        dtype: s.h.dtype(),
        rows,
        hidden,
        input_gates: read(s.input_gates),
        hidden_gates: read(s.hidden_gates),
        h: read(s.h),
        workspace: bodies.write(&guards, 0, esize),
        hy: bodies.write(&guards, 1, esize),
    };
    // SAFETY: the caller gives [rows, 3H] gates, a [rows, 4H] workspace and [rows, H]
    // states of one dtype, and `Bodies::new` checked each has contiguous rows; the written
    // tensors are the caller's own, overlapping nothing but where the workspace holds the
    // input gates (which the kernel allows); every storage is locked until `guards` drops.
    let done = unsafe { for_device(s.h.device())?.gru_cell_forward(&args) };
    drop(guards);
    Ok(done)
}

/// Runs one backward step; false (nothing written) where the backend has no fused cell.
pub(crate) fn backward(step: &BackwardStep<'_>) -> Result<bool> {
    let s = step;
    let (rows, hidden) = matrix(s.h)?;
    let writes: Vec<&Tensor> = [s.grad_input_gates, s.grad_hidden_gates, s.grad_h]
        .into_iter()
        .flatten()
        .collect();
    let bodies = Bodies::new(&[s.grad_hy, s.h, s.workspace], &writes)?;
    let guards = bodies.lock();
    let esize = s.h.dtype().size();
    let read = |t: &Tensor| bodies.read(&guards, Some(t), esize);
    // The written operands in `writes`' order, null where absent.
    let mut next = 0;
    let mut write = |t: Option<&Tensor>| match t {
        Some(_) => {
            next += 1;
            bodies.write(&guards, next - 1, esize)
        }
        None => RowsAt {
            ptr: std::ptr::null_mut(),
            row_stride: 0,
        },
    };
    let args = GruCellBackwardArgs {
        dtype: s.h.dtype(),
        rows,
        hidden,
        grad_hy: read(s.grad_hy),
        h: read(s.h),
        workspace: read(s.workspace),
        grad_input_gates: write(s.grad_input_gates),
        grad_hidden_gates: write(s.grad_hidden_gates),
        grad_h: write(s.grad_h),
    };
    // SAFETY: as in `forward`: shapes from the caller, rows checked contiguous, the
    // caller's own written tensors overlapping nothing but where the input gates' gradient
    // is the workspace's columns (which the kernel allows), storages locked until `guards`
    // drops.
    let done = unsafe { for_device(s.h.device())?.gru_cell_backward(&args) };
    drop(guards);
    Ok(done)
}
