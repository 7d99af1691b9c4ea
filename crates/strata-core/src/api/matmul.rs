//! Matrix products: `matmul`, `mm`, `bmm`, `dot`, `outer` and `addmm`, and their `out=` forms.
//! Forward in [`crate::ops::matmul`], backward in [`crate::autograd::formulas::matmul`].

use super::entry::Entry;
use crate::autograd::formulas::matmul as grad;
use crate::ops::matmul::{self as fwd, out};
use crate::{Result, Scalar, Tensor};

impl Tensor {
    /// The matrix product with PyTorch's `matmul` rules: 1-d·1-d is a dot product (0-d
    /// result), a 1-d first operand is a row and a 1-d second operand a column (dropped again
    /// from the result), and dimensions before the last two are batch dimensions that
    /// broadcast. Both operands must have the same dtype (no promotion); bool is refused. The
    /// result is a new contiguous tensor (at version 1 for a vector times a matrix, which
    /// PyTorch squeezes in place).
    ///
    /// ```
    /// use strata_core::{Tensor, DType};
    /// let a = Tensor::arange(6, DType::F32)?.view(&[2, 3])?;
    /// let b = Tensor::arange(6, DType::F32)?.view(&[2, 3])?;
    /// let c = a.matmul(&b.t()?)?;           // the transpose is read in place
    /// assert_eq!(c.shape().as_slice(), [2, 2]);
    /// assert_eq!(c.to_vec::<f32>()?, vec![5., 14., 14., 50.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        Entry::new("matmul", &[self, other])?.run(
            |ctx, x| fwd::matmul(ctx, x[0], x[1]),
            |ctx, x, out| grad::matmul(ctx, "MatmulBackward0", x[0], x[1], out),
        )
    }

    /// The product of two matrices (`[n, m] · [m, p] → [n, p]`), without broadcasting. Both
    /// must have the same dtype. The result is a new contiguous tensor.
    #[track_caller]
    pub fn mm(&self, mat2: &Tensor) -> Result<Tensor> {
        Entry::new("mm", &[self, mat2])?.run(
            |ctx, x| fwd::mm(ctx, x[0], x[1]),
            |ctx, x, out| grad::matmul(ctx, "MmBackward0", x[0], x[1], out),
        )
    }

    /// Batched matrix product `[b, n, m] · [b, m, p] → [b, n, p]`: both 3-d with the same
    /// batch size (no broadcasting; see [`Tensor::matmul`] for that) and the same dtype.
    #[track_caller]
    pub fn bmm(&self, mat2: &Tensor) -> Result<Tensor> {
        Entry::new("bmm", &[self, mat2])?.run(
            |ctx, x| fwd::bmm(ctx, x[0], x[1]),
            |ctx, x, out| grad::matmul(ctx, "BmmBackward0", x[0], x[1], out),
        )
    }

    /// The dot product of two vectors of the same length and dtype, as a 0-d tensor.
    #[track_caller]
    pub fn dot(&self, other: &Tensor) -> Result<Tensor> {
        Entry::new("dot", &[self, other])?.run(
            |ctx, x| fwd::dot(ctx, x[0], x[1]),
            |ctx, x, out| grad::dot(ctx, x[0], x[1], out),
        )
    }

    /// The outer product of two vectors: `[n] ⊗ [m] → [n, m]`, element `(i, j)` =
    /// `self[i] * other[j]`. Unlike the other products it promotes dtypes (and takes bool),
    /// as PyTorch's `outer` does.
    #[track_caller]
    pub fn outer(&self, other: &Tensor) -> Result<Tensor> {
        Entry::new("outer", &[self, other])?.run(
            |ctx, x| fwd::outer(ctx, x[0], x[1]),
            |ctx, x, out| grad::outer(ctx, x[0], x[1], out),
        )
    }

    /// `beta * self + alpha * (mat1 @ mat2)` for matrices `mat1 [n, m]` and `mat2 [m, p]`;
    /// `self` broadcasts to `[n, p]`. All three must have the same dtype; `beta` and `alpha`
    /// are converted to it. With `beta == 0` `self` is not read at all (NaN in it does not
    /// propagate), and with `alpha == 0` neither is the product. The result is a new
    /// contiguous tensor.
    #[track_caller]
    pub fn addmm(
        &self,
        mat1: &Tensor,
        mat2: &Tensor,
        beta: impl Into<Scalar>,
        alpha: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let (alpha, beta) = (alpha.into(), beta.into());
        Entry::new("addmm", &[self, mat1, mat2])?.run(
            |ctx, x| fwd::addmm(ctx, x[0], x[1], x[2], beta, alpha),
            |ctx, x, out| grad::addmm(ctx, x[0], x[1], x[2], beta, alpha, out),
        )
    }

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
        Entry::new("matmul_out", &[self, other])?
            .run_out(out, |ctx, x| out::matmul_out(ctx, x[0], x[1], out))
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
        Entry::new("mm_out", &[self, mat2])?
            .run_out(out, |ctx, x| out::mm_out(ctx, x[0], x[1], out))
    }

    /// [`Tensor::bmm`] written into `out`, as [`Tensor::mm_out`].
    #[track_caller]
    pub fn bmm_out(&self, mat2: &Tensor, out: &Tensor) -> Result<Tensor> {
        Entry::new("bmm_out", &[self, mat2])?
            .run_out(out, |ctx, x| out::bmm_out(ctx, x[0], x[1], out))
    }

    /// [`Tensor::dot`] written into `out` (0-d after the resize), which must have the
    /// vectors' dtype.
    #[track_caller]
    pub fn dot_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        Entry::new("dot_out", &[self, other])?
            .run_out(out, |ctx, x| out::dot_out(ctx, x[0], x[1], out))
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
        let (alpha, beta) = (alpha.into(), beta.into());
        Entry::new("addmm_out", &[self, mat1, mat2])?.run_out(out, |ctx, x| {
            out::addmm_out(ctx, x[0], x[1], x[2], beta, alpha, out)
        })
    }

    /// [`Tensor::outer`] written into `out`: an element-wise product of `self` as a column
    /// and `other` as a row, so dtypes promote and `out` may have any dtype that holds the
    /// result, as for [`Tensor::mul_out`].
    #[track_caller]
    pub fn outer_out(&self, other: &Tensor, out: &Tensor) -> Result<Tensor> {
        Entry::new("outer_out", &[self, other])?
            .run_out(out, |ctx, x| out::outer_out(ctx, x[0], x[1], out))
    }
}
