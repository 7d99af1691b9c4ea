//! Matrix products: `matmul`, `mm`, `bmm`, `outer`, `dot` and `addmm`, and their `out=` forms
//! (in `out`), with PyTorch's shapes, dtypes and output layouts.
//!
//! Every product is described as a batch of `m×k · k×n` products over strided operands
//! (`Product`), so transposed, sliced and broadcast operands are read where they are, never
//! copied. The argument checks (`check`) build that description; the products run on the
//! backend's `gemm` (on the CPU, `backend/cpu/gemm/`: the `gemm` crate for floating
//! dtypes, f16 and bf16 summed in f32 and rounded once; a plain loop with wrapping arithmetic
//! for integers);
//! bool is refused, as PyTorch refuses it on the CPU. Matrix products do not promote: both
//! operands (and `addmm`'s input) must share a dtype. Large products run on strata's pool.

mod check;
pub(crate) mod out;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::backend::args::GemmArgs;
use crate::backend::kernel::{GemmScratch, Mat, Product};
use crate::backend::{for_device, Backend};
use crate::layout::Layout;
use crate::op::OpContext;
use crate::ops::binary::{binary, BinaryOp, Other};
use crate::storage::{lock_storages, Access, Storage};
use crate::tensor::Body;
use crate::{DType, Device, Error, Result, Scalar, Tensor};
use check::{
    check_addmm, check_bmm, check_dot, check_mm, outer_column, plan_matmul, product_dtype, Kernel,
    MatmulPlan,
};

/// `alpha` and `beta` of a plain product.
const ONE: Scalar = Scalar::Int(1);
const ZERO: Scalar = Scalar::Int(0);

/// `out = beta·c + alpha·(a @ b)` through `out_mat` into `out`'s storage, everything checked.
/// The product's buffers (a result buffer when the output shares memory with an input or
/// its elements may share locations; for f16/bf16 products that widen, f32 room of a bounded size: at most
/// `HALF_SLOTS` slots of `HALF_SLOT_BYTES`) come from the allocator as temporaries of this
/// op.
#[allow(clippy::too_many_arguments)]
fn execute(
    ctx: &OpContext,
    backend: &dyn Backend,
    dtype: DType,
    product: &Product,
    a: &Body,
    b: &Body,
    c: Option<(&Body, &Mat)>,
    out: &Body,
    out_mat: &Mat,
    out_distinct: bool,
    alpha: Scalar,
    beta: Scalar,
) -> Result<()> {
    let id = out.storage.id();
    let shares = a.storage.id() == id
        || b.storage.id() == id
        || c.is_some_and(|(c, _)| c.storage.id() == id);
    let device = out.storage.device();
    let mut buffer = temporary(
        ctx,
        GemmScratch::buffer_len(product, shares || !out_distinct),
        dtype,
        device,
    )?;
    let adds_c = c.is_some() && beta.to::<f32>() != 0.0;
    let (block, slots) = GemmScratch::half_room(product, dtype, alpha.to::<f32>(), adds_c);
    let mut widened = temporary(ctx, block.len() * slots, DType::F32, device)?;
    let scratch = GemmScratch {
        buffer: buffer
            .as_mut()
            .and_then(Storage::unshared_write_ptr)
            .unwrap_or(std::ptr::null_mut()),
        widened: widened
            .as_mut()
            .and_then(Storage::unshared_write_ptr)
            .unwrap_or(std::ptr::null_mut()),
        block,
        slots,
    };
    let mut locks = vec![
        (&*out.storage, Access::Write),
        (&*a.storage, Access::Read),
        (&*b.storage, Access::Read),
    ];
    if let Some((cb, _)) = c {
        locks.push((&*cb.storage, Access::Read));
    }
    let guards = lock_storages(&locks);
    // SAFETY: every storage is locked (the output's for writing) and the pointers are their
    // bases; the plans were built from layouts validated against those storages. An output
    // that shares a storage with an input, or whose elements may share locations, is written
    // through a buffer.
    // The scratch storages are this call's own, sized as `GemmScratch` says.
    unsafe {
        backend.gemm(&GemmArgs {
            dtype,
            product,
            out: guards.write_ptr(&out.storage),
            out_mat,
            a: guards.read_ptr(&a.storage),
            b: guards.read_ptr(&b.storage),
            c: c.map(|(cb, m)| (guards.read_ptr(&cb.storage), m)),
            alpha,
            beta,
            scratch,
        })
    };
    drop(guards);
    drop((buffer, widened));
    Ok(())
}

/// A temporary storage of `len` elements of `dtype` for this op (a kernel's working
/// buffer, allocated through the op so that its statistics count it), or `None` for none.
pub(crate) fn temporary(
    ctx: &OpContext,
    len: usize,
    dtype: DType,
    device: Device,
) -> Result<Option<Arc<Storage>>> {
    if len == 0 {
        return Ok(None);
    }
    let bytes = len.checked_mul(dtype.size()).ok_or_else(|| {
        Error::shape(
            ctx.op(),
            format!("the working buffer of {len} elements is too large to address"),
            vec![],
        )
    })?;
    ctx.allocate(bytes, device).map(Some)
}

/// A new contiguous tensor of `shape` holding the product.
#[allow(clippy::too_many_arguments)]
fn new_product(
    ctx: &OpContext,
    dtype: DType,
    plan: &MatmulPlan,
    a: &Body,
    b: &Body,
    c: Option<(&Body, &Mat)>,
    alpha: Scalar,
    beta: Scalar,
) -> Result<Tensor> {
    let backend = for_device(a.storage.device())?;
    let out = Tensor::uninit_with_layout(
        ctx,
        Layout::contiguous(&plan.shape, 0),
        dtype,
        a.storage.device(),
    )?;
    let body = out.body();
    let out_mat = plan.out_mat(&body.layout);
    execute(
        ctx,
        backend,
        dtype,
        &plan.product,
        a,
        b,
        c,
        &body,
        &out_mat,
        true,
        alpha,
        beta,
    )?;
    Ok(out)
}

/// `a.matmul(b)` into a new contiguous tensor (at version 1 for a vector times a matrix).
pub(crate) fn matmul(ctx: &OpContext, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (ab, bb) = (a.body(), b.body());
    let plan = plan_matmul(ctx.op(), &ab.layout, &bb.layout)?;
    let operands = [("self", a), ("other", b)];
    let dtype = product_dtype(ctx.op(), &operands, Kernel::Dot, false)?;
    let out = new_product(ctx, dtype, &plan, &ab, &bb, None, ONE, ZERO)?;
    if a.dim() == 1 && b.dim() == 2 {
        // PyTorch computes a vector times a matrix as a `[1, p]` product that it squeezes in
        // place, so the result starts at version 1.
        out.bump_version(ctx.op());
    }
    Ok(out)
}

/// `a.mm(b)` into a new contiguous tensor.
pub(crate) fn mm(ctx: &OpContext, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (plan, dtype) = check_mm(ctx.op(), a, b)?;
    new_product(ctx, dtype, &plan, &a.body(), &b.body(), None, ONE, ZERO)
}

/// `a.bmm(b)` into a new contiguous tensor.
pub(crate) fn bmm(ctx: &OpContext, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (plan, dtype) = check_bmm(ctx.op(), a, b)?;
    new_product(ctx, dtype, &plan, &a.body(), &b.body(), None, ONE, ZERO)
}

/// `a.dot(b)` into a new 0-d tensor.
pub(crate) fn dot(ctx: &OpContext, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (plan, dtype) = check_dot(ctx.op(), a, b)?;
    new_product(ctx, dtype, &plan, &a.body(), &b.body(), None, ONE, ZERO)
}

/// `a.outer(b)`: `a` as a column times `b` as a row, element-wise (dtypes promote).
pub(crate) fn outer(ctx: &OpContext, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let column = outer_column(ctx.op(), a, b)?;
    binary(ctx, &column, Other::Tensor(b), BinaryOp::Mul)
}

/// `beta * c + alpha * (mat1 @ mat2)` into a new contiguous tensor.
pub(crate) fn addmm(
    ctx: &OpContext,
    c: &Tensor,
    mat1: &Tensor,
    mat2: &Tensor,
    beta: Scalar,
    alpha: Scalar,
) -> Result<Tensor> {
    let v = check_addmm(ctx.op(), c, mat1, mat2, beta)?;
    let (cb, ab, bb) = (c.body(), mat1.body(), mat2.body());
    let c = Some((&cb, &v.c_mat));
    new_product(ctx, v.dtype, &v.plan, &ab, &bb, c, alpha, beta)
}
