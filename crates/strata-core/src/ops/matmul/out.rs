//! The `out=` forms of the matrix products: `matmul_out`, `mm_out`, `bmm_out`, `addmm_out`,
//! `dot_out` and `outer_out`.
//!
//! The products write straight into the output through the same strided gemm layer as the
//! out-of-place ops: an output of the result's shape keeps its strides and nothing is
//! allocated when it is dense and shares no memory with an operand. An output that shares
//! memory with an operand (PyTorch allows it), or is not dense, receives the product through a
//! private buffer that the gemm layer fills and then copies in. Except for `outer_out`, which
//! is an element-wise product and converts its result, the output must have the result's dtype
//! exactly, as in PyTorch.

use super::check::{
    check_addmm, check_bmm, check_dot, check_mm, matmul_kernel, outer_column, plan_matmul,
    product_dtype, shape_error, torch_fold_shape, MatmulPlan,
};
use super::{execute, ONE, ZERO};
use crate::backend::for_device;
use crate::backend::kernel::Mat;
use crate::layout::overlap::provably_non_overlapping;
use crate::layout::view::compute_stride;
use crate::layout::Layout;
use crate::op::OpContext;
use crate::ops::binary::{binary_out, BinaryOp, Other};
use crate::ops::out::{written, Aliasing, OutDType, OutTarget};
use crate::{DType, Result, Scalar, Tensor};

/// Writes `beta·c + alpha·(a @ b)`, as planned, into `out`: checked (dtype, self-overlap),
/// resized to `plan.shape` when it has another shape, written through its strides, its
/// version bumped once.
#[allow(clippy::too_many_arguments)]
fn product_out(
    ctx: &OpContext,
    plan: &MatmulPlan,
    dtype: DType,
    a: &Tensor,
    b: &Tensor,
    c: Option<(&Tensor, &Mat)>,
    alpha: Scalar,
    beta: Scalar,
    out: &Tensor,
) -> Result<Tensor> {
    let backend = for_device(out.device())?;
    let mut inputs = vec![a, b];
    inputs.extend(c.map(|(t, _)| t));
    let out = OutTarget::check(
        ctx.op(),
        out,
        &plan.shape,
        OutDType::Exact(dtype),
        &inputs,
        Aliasing::Buffered,
    )?
    // Everything is checked: from here on the output changes.
    .resize(ctx)?;
    let (ab, bb, body) = (a.body(), b.body(), out.body());
    let cb = c.map(|(t, m)| (t.body(), m));
    let out_mat = plan.out_mat(&body.layout);
    let distinct = provably_non_overlapping(&body.layout);
    execute(
        ctx,
        backend,
        dtype,
        &plan.product,
        &ab,
        &bb,
        cb.as_ref().map(|(t, m)| (t, *m)),
        &body,
        &out_mat,
        distinct,
        alpha,
        beta,
    )?;
    Ok(written(ctx.op(), &out))
}

/// `a.matmul(b)` written into `out`.
pub(crate) fn matmul_out(ctx: &OpContext, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Tensor> {
    let (ab, bb) = (a.body(), b.body());
    let plan = plan_matmul(ctx.op(), &ab.layout, &bb.layout)?;
    let kernel = matmul_kernel(&ab.layout, &bb.layout);
    let operands = [("self", a), ("other", b)];
    let dtype = product_dtype(ctx.op(), &operands, kernel, plan.trivial())?;
    let backend = for_device(out.device())?;
    let current = out.layout();
    let vector_matrix = ab.layout.ndim() == 1 && bb.layout.ndim() == 2;
    // A vector times a matrix is written as a [1, p] row (PyTorch's resize), then seen as [p].
    let shape = if vector_matrix {
        vec![1, plan.product.n]
    } else {
        plan.shape.clone()
    };
    let target = OutTarget::check(
        ctx.op(),
        out,
        &shape,
        OutDType::Exact(dtype),
        &[a, b],
        Aliasing::Buffered,
    )?;
    if target.keeps_shape() {
        if let Some(fs) = torch_fold_shape(&ab.layout, &bb.layout) {
            if current.numel() > 0
                && compute_stride(current.sizes(), current.strides(), &fs).is_none()
            {
                return Err(shape_error(
                    ctx.op(),
                    format!(
                        "the product of {:?} and {:?} is computed as one matrix product of \
                         shape {fs:?} written through a view of the output, but the output \
                         (shape {:?}, strides {:?}) cannot be viewed with that shape",
                        ab.layout.sizes(),
                        bb.layout.sizes(),
                        current.sizes(),
                        current.strides()
                    ),
                    &[ab.layout.sizes(), bb.layout.sizes(), current.sizes()],
                    "pass a contiguous output (or an empty one, which is resized), or use \
                     matmul() and copy_() the result",
                ));
            }
        }
    }
    // Everything is checked: from here on the output changes.
    let mut squeeze_to = None;
    if vector_matrix {
        let p = plan.product.n;
        let offset = current.offset();
        let fits = (offset + p) * dtype.size() <= out.storage_nbytes();
        if current.sizes() == [p] && fits {
            // The resize to [1, p] that PyTorch makes; enough memory is already there.
            out.set_layout(Layout::contiguous(&[1, p], offset));
        } else {
            target.resize(ctx)?;
        }
        let l = out.layout();
        squeeze_to = Some(Layout::new(vec![p], vec![l.strides()[1]], l.offset()));
    } else {
        target.resize(ctx)?;
    }
    let body = out.body();
    let out_mat = if vector_matrix {
        let st = body.layout.strides();
        Mat::unbatched(body.layout.offset(), 0, 0, st[1])
    } else {
        plan.out_mat(&body.layout)
    };
    let distinct = provably_non_overlapping(&body.layout);
    execute(
        ctx,
        backend,
        dtype,
        &plan.product,
        &ab,
        &bb,
        None,
        &body,
        &out_mat,
        distinct,
        ONE,
        ZERO,
    )?;
    out.bump_version(ctx.op());
    if let Some(l) = squeeze_to {
        out.set_layout(l);
        out.bump_version(ctx.op());
    }
    Ok(out.clone())
}

/// `a.mm(b)` written into `out`.
pub(crate) fn mm_out(ctx: &OpContext, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Tensor> {
    let (plan, dtype) = check_mm(ctx.op(), a, b)?;
    product_out(ctx, &plan, dtype, a, b, None, ONE, ZERO, out)
}

/// `a.bmm(b)` written into `out`.
pub(crate) fn bmm_out(ctx: &OpContext, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Tensor> {
    let (plan, dtype) = check_bmm(ctx.op(), a, b)?;
    product_out(ctx, &plan, dtype, a, b, None, ONE, ZERO, out)
}

/// `a.dot(b)` written into `out`.
pub(crate) fn dot_out(ctx: &OpContext, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Tensor> {
    let (plan, dtype) = check_dot(ctx.op(), a, b)?;
    product_out(ctx, &plan, dtype, a, b, None, ONE, ZERO, out)
}

/// `beta * c + alpha * (mat1 @ mat2)` written into `out` (which may be `c` itself).
#[allow(clippy::too_many_arguments)]
pub(crate) fn addmm_out(
    ctx: &OpContext,
    c: &Tensor,
    mat1: &Tensor,
    mat2: &Tensor,
    beta: Scalar,
    alpha: Scalar,
    out: &Tensor,
) -> Result<Tensor> {
    let v = check_addmm(ctx.op(), c, mat1, mat2, beta)?;
    let c = Some((c, &v.c_mat));
    product_out(ctx, &v.plan, v.dtype, mat1, mat2, c, alpha, beta, out)
}

/// `a.outer(b)` written into `out`, as an element-wise product (dtypes promote, `out` may
/// have any dtype that holds the result).
pub(crate) fn outer_out(ctx: &OpContext, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Tensor> {
    let column = outer_column(ctx.op(), a, b)?;
    binary_out(ctx, &column, Other::Tensor(b), BinaryOp::Mul, out)
}
