//! Backward of the matrix products. A transposed operand is a view, so no gradient formula
//! copies one.

use super::{record, take, Grads};
use crate::op::OpContext;
use crate::{Result, Scalar, Tensor};

/// Records `out = a @ b` for `mm`, `bmm` and `matmul` (any of its 1-D and batched forms).
pub(crate) fn matmul(
    ctx: &OpContext,
    name: &'static str,
    a: &Tensor,
    b: &Tensor,
    out: &Tensor,
) -> Result<()> {
    let (a_shape, b_shape) = (a.shape(), b.shape());
    let two_d = a_shape.len() == 2 && b_shape.len() == 2;
    let (a_major, b_major) = (column_major(a), column_major(b));
    record(ctx, name, &[a, b], out, |rec| {
        let (na, nb) = (rec.needs(0), rec.needs(1));
        let sb = rec.save_if(na, b)?;
        let sa = rec.save_if(nb, a)?;
        Ok(move |g: Tensor| -> Grads {
            if two_d {
                return Ok(vec![
                    if na {
                        Some(mat1_grad(&g, &take(&sb)?, a_major)?)
                    } else {
                        None
                    },
                    if nb {
                        Some(mat2_grad(&g, &take(&sa)?, b_major)?)
                    } else {
                        None
                    },
                ]);
            }
            // Work with both operands at least 2-D (a 1-D `a` is a row, a 1-D `b` a column).
            let a2 = |t: Tensor| {
                if a_shape.len() == 1 {
                    t.unsqueeze(0)
                } else {
                    Ok(t)
                }
            };
            let b2 = |t: Tensor| {
                if b_shape.len() == 1 {
                    t.unsqueeze(-1)
                } else {
                    Ok(t)
                }
            };
            let mut g2 = g;
            if a_shape.len() == 1 {
                g2 = g2.unsqueeze(if b_shape.len() == 1 { 0 } else { -2 })?;
            }
            if b_shape.len() == 1 {
                g2 = g2.unsqueeze(-1)?;
            }
            let ga = if na {
                let bm = b2(take(&sb)?)?;
                let full = g2.matmul(&bm.transpose(-1, -2)?)?;
                Some(fold_to(&full, &a_shape)?)
            } else {
                None
            };
            let gb = if !nb {
                None
            } else if b_shape.len() == 2 && a_shape.len() >= 3 {
                // A batch times one matrix (a linear layer on a sequence): the batch folds into
                // rows, one `[k, rows] @ [rows, n]` product as PyTorch's matmul folds it, with no
                // batched temporary to sum and the gradient in `b`'s layout.
                let k = a_shape[a_shape.len() - 1] as i64;
                let rows = take(&sa)?.reshape(&[-1, k])?;
                let g_rows = g2.reshape(&[-1, b_shape[1] as i64])?;
                Some(mat2_grad(&g_rows, &rows, b_major)?)
            } else {
                let am = a2(take(&sa)?)?;
                let full = am.transpose(-1, -2)?.matmul(&g2)?;
                Some(fold_to(&full, &b_shape)?)
            };
            Ok(vec![ga, gb])
        })
    })
}

/// A promoted, batch-broadcast gradient summed and reshaped back to an operand's shape.
fn fold_to(full: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let mut promoted = shape.to_vec();
    if shape.len() == 1 {
        // Either [1, k] (an `a`) or [k, 1] (a `b`): the last two dims of `full` tell.
        let fs = full.shape();
        let n = fs.len();
        promoted = if n >= 2 && fs[n - 2] == 1 && fs[n - 1] == shape[0] {
            vec![1, shape[0]]
        } else {
            vec![shape[0], 1]
        };
    }
    let summed = super::super::view::sum_to(full, &promoted)?;
    if summed.shape().as_slice() == shape {
        return Ok(summed);
    }
    summed.reshape_to(shape)
}

/// Records `out = outer(a, b)`.
pub(crate) fn outer(ctx: &OpContext, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<()> {
    record(ctx, "OuterBackward0", &[a, b], out, |rec| {
        let (na, nb) = (rec.needs(0), rec.needs(1));
        let sb = rec.save_if(na, b)?;
        let sa = rec.save_if(nb, a)?;
        Ok(move |g: Tensor| -> Grads {
            Ok(vec![
                if na {
                    Some(g.matmul(&take(&sb)?)?)
                } else {
                    None
                },
                if nb {
                    Some(g.t()?.matmul(&take(&sa)?)?)
                } else {
                    None
                },
            ])
        })
    })
}

/// Records `out = dot(a, b)`.
pub(crate) fn dot(ctx: &OpContext, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<()> {
    record(ctx, "DotBackward0", &[a, b], out, |rec| {
        let (na, nb) = (rec.needs(0), rec.needs(1));
        let sb = rec.save_if(na, b)?;
        let sa = rec.save_if(nb, a)?;
        Ok(move |g: Tensor| -> Grads {
            Ok(vec![
                if na { Some(take(&sb)?.mul(&g)?) } else { None },
                if nb { Some(take(&sa)?.mul(&g)?) } else { None },
            ])
        })
    })
}

/// Records `out = beta * c + alpha * (a @ b)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn addmm(
    ctx: &OpContext,
    c: &Tensor,
    a: &Tensor,
    b: &Tensor,
    beta: Scalar,
    alpha: Scalar,
    out: &Tensor,
) -> Result<()> {
    let (a_major, b_major) = (column_major(a), column_major(b));
    record(ctx, "AddmmBackward0", &[c, a, b], out, |rec| {
        let (na, nb) = (rec.needs(1), rec.needs(2));
        let sb = rec.save_if(na, b)?;
        let sa = rec.save_if(nb, a)?;
        Ok(move |g: Tensor| -> Grads {
            Ok(vec![
                Some(scaled(g.clone(), beta)?),
                if na {
                    Some(scaled(mat1_grad(&g, &take(&sb)?, a_major)?, alpha)?)
                } else {
                    None
                },
                if nb {
                    Some(scaled(mat2_grad(&g, &take(&sa)?, b_major)?, alpha)?)
                } else {
                    None
                },
            ])
        })
    })
}

/// Whether a 2-d matrix is laid out column by column (a transposed contiguous matrix, such
/// as a linear layer's `w.t()`).
pub(crate) fn column_major(m: &Tensor) -> bool {
    let (shape, strides) = (m.shape(), m.stride());
    shape.len() == 2 && shape[0] > 1 && strides[0] == 1 && strides[1] == shape[0]
}

/// `t · s`, or `t` itself when `s` is one (no copy, as PyTorch's `maybe_multiply`).
fn scaled(t: Tensor, s: Scalar) -> Result<Tensor> {
    if s.to_f64() == 1.0 {
        Ok(t)
    } else {
        t.mul(s)
    }
}

/// The gradient of `a` in `a @ b` (`g @ bᵀ`), computed transposed when `a` is column-major
/// so that it comes out in `a`'s layout (PyTorch's `mm_mat1_backward`).
pub(crate) fn mat1_grad(g: &Tensor, b: &Tensor, a_column_major: bool) -> Result<Tensor> {
    if a_column_major {
        b.mm(&g.t()?)?.t()
    } else {
        g.mm(&b.t()?)
    }
}

/// The gradient of `b` in `a @ b` (`aᵀ @ g`), computed transposed when `b` is column-major
/// so that it comes out in `b`'s layout: a linear layer's `w.t()` gets a gradient whose
/// transpose is contiguous, which `.grad` takes over without a copy (PyTorch's
/// `mm_mat2_backward`).
pub(crate) fn mat2_grad(g: &Tensor, a: &Tensor, b_column_major: bool) -> Result<Tensor> {
    if b_column_major {
        g.t()?.mm(a)?.t()
    } else {
        a.t()?.mm(g)
    }
}
