//! The direct route for the commonest element-wise op: a new output computed from operands
//! that all have one shape and are all contiguous (`a + b` on two fresh tensors, `x.exp()`,
//! `x * 2.0`).
//!
//! [`crate::ops::iter::ElementwiseSpec`] decides the same thing for these operands (a
//! contiguous output, one linear run of the loop), but it is built for every case:
//! broadcasting, overlap, stride order, existing and resized outputs. This route reads each
//! operand once under its lock, copies no layout and builds no plan beyond the linear one, so
//! an op on a few elements costs little more than its allocation. The kernel that runs is the
//! same one, over the same [`Plan`].

use std::sync::Arc;

use smallvec::SmallVec;

use crate::backend::Plan;
use crate::layout::Layout;
use crate::op::OpContext;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::storage::{lock_reads, Storage};
use crate::{DType, Result, Tensor};

/// The most inputs the direct route takes (a ternary op's three); more take the general one.
const MAX_INPUTS: usize = 3;

/// A new output of `out_dtype` computed by `kernel` from `inputs` (operand 0 the output, then
/// the inputs in order): through [`try_new_output`] when the inputs qualify, else through the
/// general [`ElementwiseSpec`] route. `common` is the dtype the inputs are computed in (see
/// [`ElementwiseSpec::with_input_dtypes`]; it cannot change a contiguous input's layout).
/// `scalar_operand` says that a number also takes part (then only inputs with exactly
/// row-major strides take the direct route).
pub(crate) fn new_output(
    ctx: &OpContext,
    out_dtype: DType,
    common: DType,
    inputs: &[&Tensor],
    scalar_operand: bool,
    kernel: impl Fn(&Plan),
) -> Result<Tensor> {
    // With a number as an operand the shapes differ, so PyTorch lays the output out in the
    // inputs' stride order: a size-1 dimension's stride then matters, and only inputs with
    // exactly row-major strides give the contiguous output this route makes.
    if let Some(out) = try_new_output(ctx, out_dtype, inputs, scalar_operand, &kernel) {
        return out;
    }
    let input_dtypes: SmallVec<[DType; 3]> = inputs.iter().map(|_| common).collect();
    ElementwiseSpec::new(Output::New(out_dtype), inputs.to_vec())
        .with_scalar_operand(scalar_operand)
        .with_input_dtypes(&input_dtypes)
        .infer(ctx.op())?
        .execute(ctx, kernel)
}

/// Runs `kernel` (operand 0 the output, then `inputs` in order) into a new contiguous tensor of
/// `out_dtype` when every input is a contiguous tensor of the first input's shape and device.
/// With `row_major_only`, inputs must have exactly row-major strides (size-1 dimensions
/// included), which is what a number operand requires: the shapes then differ, PyTorch lays
/// the output out in the inputs' stride order, and a size-1 dimension's stride matters.
/// Returns `None`, having done nothing, when they are not: the caller then takes the general
/// route, which also produces every error.
pub(crate) fn try_new_output(
    ctx: &OpContext,
    out_dtype: DType,
    inputs: &[&Tensor],
    row_major_only: bool,
    kernel: &impl Fn(&Plan),
) -> Option<Result<Tensor>> {
    let (&first, rest) = inputs.split_first()?;
    if rest.len() >= MAX_INPUTS {
        return None;
    }
    let n = inputs.len();
    let device = first.device();
    // Fixed arrays rather than vectors: this route is what a one-element op costs.
    let mut storages: [Option<Arc<Storage>>; MAX_INPUTS] = [None, None, None];
    let mut at = [(0usize, DType::Bool); MAX_INPUTS];
    // The first input decides the output's layout; the others must have its sizes.
    let layout = {
        let b = first.read_body();
        let l = &b.layout;
        let row_major = l.is_row_major();
        let contiguous = row_major || (!row_major_only && l.is_contiguous());
        // Empty tensors keep the general route's layout rules (PyTorch's strides for them
        // are not always row-major).
        if !(contiguous && l.numel() > 0 && b.storage.device() == device) {
            return None;
        }
        storages[0] = Some(b.storage.clone());
        at[0] = (l.offset(), first.dtype());
        if row_major {
            l.with_offset(0)
        } else {
            Layout::contiguous(l.sizes(), 0)
        }
    };
    for (k, t) in rest.iter().enumerate() {
        let b = t.read_body();
        let l = &b.layout;
        let contiguous = l.is_row_major() || (!row_major_only && l.is_contiguous());
        if !(same_sizes(l.sizes(), layout.sizes()) && contiguous && b.storage.device() == device) {
            return None;
        }
        storages[k + 1] = Some(b.storage.clone());
        at[k + 1] = (l.offset(), t.dtype());
    }
    let numel = layout.numel();
    // An input's elements fit in memory, but a wider output's bytes may not: the general
    // route reports that.
    let nbytes = numel
        .checked_mul(out_dtype.size())
        .filter(|&b| b <= isize::MAX as usize)?;
    let mut storage = match ctx.allocate(nbytes, device) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    let out_ptr = Storage::unshared_write_ptr(&mut storage)?;
    {
        let mut held: [&Storage; MAX_INPUTS] = [storages[0].as_deref()?; MAX_INPUTS];
        for (h, s) in held.iter_mut().zip(&storages).skip(1) {
            if let Some(s) = s {
                *h = s;
            }
        }
        let held = &held[..n];
        // Only the inputs are locked: the output is not shared with anything yet.
        let guards = lock_reads(held);
        let mut operands = [(out_ptr, out_dtype); 1 + MAX_INPUTS];
        for (k, (s, (offset, dtype))) in held.iter().zip(&at).enumerate() {
            let ptr = guards.read_ptr(s).wrapping_add(offset * dtype.size()) as *mut u8;
            operands[1 + k] = (ptr, *dtype);
        }
        // A fresh output cannot overlap an input, so the loop may be split across the pool;
        // nothing reads it before the op returns, so a large one is streamed out.
        let mut plan = Plan::linear(numel, &operands[..1 + n], true);
        plan.mark_fresh_output();
        kernel(&plan);
        plan.discard_inline();
    }
    Some(Ok(Tensor::from_parts(storage, layout, out_dtype, None)))
}

/// Whether two shapes are equal, compared in place (a slice comparison calls the C
/// library's `bcmp`, which costs more than comparing a few sizes).
fn same_sizes(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}
