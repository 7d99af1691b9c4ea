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
use crate::layout::{Dims, Layout};
use crate::op::OpContext;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::storage::{lock_storages, Access, Storage};
use crate::tensor::alloc_for;
use crate::{DType, Result, Tensor};

/// An input operand: its storage, the element offset of its first element and its dtype.
type Operand = (Arc<Storage>, usize, DType);

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
    kernel: impl FnOnce(&Plan),
) -> Option<Result<Tensor>> {
    let mut sizes = Dims::new();
    let device = inputs.first()?.device();
    let mut operands: SmallVec<[Operand; 3]> = SmallVec::new();
    for (k, t) in inputs.iter().enumerate() {
        let operand = t.with_body(|b| {
            let layout = &b.layout;
            let same_shape = if k == 0 {
                sizes = Dims::from_slice(layout.sizes());
                true
            } else {
                layout.sizes() == &sizes[..]
            };
            let contiguous = if row_major_only {
                is_row_major(layout)
            } else {
                layout.is_contiguous()
            };
            // Empty tensors keep the general route's layout rules (PyTorch's strides for
            // them are not always row-major).
            let nonempty = layout.numel() > 0;
            (same_shape && contiguous && nonempty && b.storage.device() == device)
                .then(|| (b.storage.clone(), layout.offset(), t.dtype()))
        })?;
        operands.push(operand);
    }
    if operands.is_empty() {
        return None;
    }
    let layout = Layout::contiguous(&sizes, 0);
    let numel = layout.numel();
    let mut storage = match alloc_for(ctx, &layout, out_dtype, device) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    let out_ptr = Storage::unshared_write_ptr(&mut storage)?;
    {
        // Only the inputs are locked: the output is not shared with anything yet.
        let locks: SmallVec<[(&Storage, Access); 3]> = operands
            .iter()
            .map(|(s, _, _)| (&**s, Access::Read))
            .collect();
        let guards = lock_storages(&locks);
        let inputs = operands.iter().map(|(s, offset, dtype)| {
            let ptr = guards.read_ptr(s).wrapping_add(offset * dtype.size()) as *mut u8;
            (ptr, *dtype)
        });
        // A fresh output cannot overlap an input, so the loop may be split across the pool;
        // nothing reads it before the op returns, so a large one is streamed out.
        let mut plan = Plan::linear(
            numel,
            std::iter::once((out_ptr, out_dtype)).chain(inputs),
            true,
        );
        plan.mark_fresh_output();
        kernel(&plan);
    }
    Some(Ok(Tensor::from_parts(storage, layout, out_dtype, None)))
}

/// Whether every stride is exactly the row-major one (size-1 dimensions included).
fn is_row_major(layout: &Layout) -> bool {
    let mut expected = 1usize;
    for (&n, &s) in layout.sizes().iter().zip(layout.strides()).rev() {
        if s != expected {
            return false;
        }
        expected = expected.saturating_mul(n.max(1));
    }
    true
}
