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

use super::*;
use crate::autograd::record::refuse_out_with_grad;

/// The error for an output whose dtype is not the product's (products never convert).
fn check_out_dtype(op: &'static str, dtype: DType, out: &Tensor) -> Result<()> {
    if out.dtype() == dtype {
        return Ok(());
    }
    Err(Error::dtype(
        op,
        format!(
            "the result has dtype {dtype} but the output has dtype {}",
            out.dtype()
        ),
        None,
    )
    .with_hint(format!(
        "pass an output of dtype {dtype} (e.g. Tensor::zeros(&shape, DType::{dtype:?})), or \
         use the out-of-place product and convert the result"
    )))
}

/// Refuses an output (written where it is) with elements that share a memory location.
fn check_not_expanded(op: &'static str, current: &Layout) -> Result<()> {
    if internal_overlap(current) != InternalOverlap::Yes {
        return Ok(());
    }
    Err(Error::Overlap {
        op,
        message: format!(
            "the output of shape {:?} has strides {:?}: more than one of its elements refers \
             to the same memory location",
            current.sizes(),
            current.strides()
        ),
        hint: Some(
            "the output is expanded or otherwise self-overlapping; pass a fresh output tensor"
                .into(),
        ),
    })
}

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
    check_out_dtype(ctx.op(), dtype, out)?;
    let current = out.layout();
    if current.sizes() == plan.shape.as_slice() {
        check_not_expanded(ctx.op(), &current)?;
    }
    // Everything is checked: from here on the output changes.
    out.resize_for_out(ctx, &plan.shape)?;
    let (ab, bb, body) = (a.body(), b.body(), out.body());
    let cb = c.map(|(t, m)| (t.body(), m));
    let out_mat = plan.out_mat(&body.layout);
    let dense = body.layout.is_non_overlapping_and_dense();
    execute(
        dtype,
        &plan.product,
        &ab,
        &bb,
        cb.as_ref().map(|(t, m)| (t, *m)),
        &body,
        &out_mat,
        dense,
        alpha,
        beta,
    );
    out.bump_version();
    Ok(out.clone())
}

impl Tensor {
    /// [`Tensor::matmul`] written into `out`, which must have the result's dtype. An `out` of
    /// the result's shape is written where it is (its strides kept, no allocation); one of
    /// another shape is resized first, as PyTorch does. `out` may share memory with the
    /// operands (the product is then computed aside and copied in). Returns `out`.
    ///
    /// As in PyTorch, a vector times a matrix writes its result through a `[1, p]` view of
    /// `out` that is squeezed again, which counts as two writes (the version goes up by 2) and
    /// leaves `out` contiguous; every other case counts one write.
    #[track_caller]
    pub fn matmul_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("matmul_out");
        refuse_out_with_grad(ctx.op(), &[self, other], out)?;
        let (a, b) = (self.body(), other.body());
        let plan = plan_matmul(ctx.op(), &a.layout, &b.layout)?;
        let kernel = matmul_kernel(&a.layout, &b.layout);
        let operands = [("self", self), ("other", other)];
        let dtype = product_dtype(ctx.op(), &operands, kernel, plan.trivial())?;
        check_out_dtype(ctx.op(), dtype, out)?;
        let current = out.layout();
        let vector_matrix = a.layout.ndim() == 1 && b.layout.ndim() == 2;
        // The layout the product is written through, and whether it is `out`'s own (to be
        // checked) or a fresh contiguous one (after a resize).
        let (target, resize): (Vec<usize>, bool) = if vector_matrix {
            let p = plan.product.n;
            let as_is = current.sizes() == [1, p];
            (vec![1, p], !as_is)
        } else {
            let as_is = current.sizes() == plan.shape.as_slice();
            (plan.shape.clone(), !as_is)
        };
        if !resize {
            check_not_expanded(ctx.op(), &current)?;
            if let Some(fs) = torch_fold_shape(&a.layout, &b.layout) {
                if current.numel() > 0
                    && compute_stride(current.sizes(), current.strides(), &fs).is_none()
                {
                    return Err(shape_error(
                        ctx.op(),
                        format!(
                            "the product of {:?} and {:?} is computed as one matrix product of \
                             shape {fs:?} written through a view of the output, but the output \
                             (shape {:?}, strides {:?}) cannot be viewed with that shape",
                            a.layout.sizes(),
                            b.layout.sizes(),
                            current.sizes(),
                            current.strides()
                        ),
                        &[a.layout.sizes(), b.layout.sizes(), current.sizes()],
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
            if resize && current.sizes() == [p] && fits {
                // The resize to [1, p] that PyTorch makes; enough memory is already there.
                out.set_layout(Layout::contiguous(&[1, p], offset));
            } else if resize {
                out.resize_for_out(&ctx, &target)?;
            }
            let l = out.layout();
            squeeze_to = Some(Layout::new(vec![p], vec![l.strides()[1]], l.offset()));
        } else if resize {
            out.resize_for_out(&ctx, &target)?;
        }
        let body = out.body();
        let out_mat = if vector_matrix {
            let st = body.layout.strides();
            Mat::unbatched(body.layout.offset(), 0, 0, st[1])
        } else {
            plan.out_mat(&body.layout)
        };
        let dense = body.layout.is_non_overlapping_and_dense();
        execute(
            dtype,
            &plan.product,
            &a,
            &b,
            None,
            &body,
            &out_mat,
            dense,
            ONE,
            ZERO,
        );
        out.bump_version();
        if let Some(l) = squeeze_to {
            out.set_layout(l);
            out.bump_version();
        }
        Ok(out.clone())
    }

    /// [`Tensor::mm`] written into `out`, which must have the result's dtype. An `out` of
    /// shape `[n, p]` is written where it is, its strides kept; one of another shape is
    /// resized. `out` may share memory with the operands. Returns `out`, whose version goes
    /// up by one.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let a = Tensor::arange(6, DType::F32)?.view(&[2, 3])?;
    /// let out = Tensor::zeros(&[2, 2], DType::F32)?;
    /// a.mm_out(&a.t()?, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![5., 14., 14., 50.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn mm_out(&self, mat2: &Tensor, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("mm_out");
        refuse_out_with_grad(ctx.op(), &[self, mat2], out)?;
        let (plan, dtype) = check_mm(ctx.op(), self, mat2)?;
        product_out(&ctx, &plan, dtype, self, mat2, None, ONE, ZERO, out)
    }

    /// [`Tensor::bmm`] written into `out`, as [`Tensor::mm_out`].
    #[track_caller]
    pub fn bmm_out(&self, mat2: &Tensor, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("bmm_out");
        refuse_out_with_grad(ctx.op(), &[self, mat2], out)?;
        let (plan, dtype) = check_bmm(ctx.op(), self, mat2)?;
        product_out(&ctx, &plan, dtype, self, mat2, None, ONE, ZERO, out)
    }

    /// [`Tensor::dot`] written into `out` (0-d after the resize), which must have the
    /// vectors' dtype.
    #[track_caller]
    pub fn dot_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("dot_out");
        refuse_out_with_grad(ctx.op(), &[self, other], out)?;
        let (plan, dtype) = check_dot(ctx.op(), self, other)?;
        product_out(&ctx, &plan, dtype, self, other, None, ONE, ZERO, out)
    }

    /// [`Tensor::addmm`] written into `out`, which must have the result's dtype and may be
    /// `self` itself (`self` is then read before it is overwritten). Otherwise as
    /// [`Tensor::mm_out`].
    #[track_caller]
    pub fn addmm_out(
        &self,
        mat1: &Tensor,
        mat2: &Tensor,
        beta: impl Into<Scalar>,
        alpha: impl Into<Scalar>,
        out: &Tensor,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("addmm_out");
        refuse_out_with_grad(ctx.op(), &[self, mat1, mat2], out)?;
        let (alpha, beta) = (alpha.into(), beta.into());
        let v = check_addmm(ctx.op(), self, mat1, mat2, beta)?;
        let c = Some((self, &v.c_mat));
        product_out(&ctx, &v.plan, v.dtype, mat1, mat2, c, alpha, beta, out)
    }

    /// [`Tensor::outer`] written into `out`: an element-wise product of `self` as a column
    /// and `other` as a row, so dtypes promote and `out` may have any dtype that holds the
    /// result, as for [`Tensor::mul_out`].
    #[track_caller]
    pub fn outer_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("outer_out");
        refuse_out_with_grad(ctx.op(), &[self, other], out)?;
        let column = outer_column(ctx.op(), self, other)?;
        crate::ops::binary::binary_out(&ctx, &column, Other::Tensor(other), BinaryOp::Mul, out)
    }
}
