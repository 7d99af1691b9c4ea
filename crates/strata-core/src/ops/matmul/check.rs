//! The argument checks of the matrix products: PyTorch's shape rules (`plan_matmul`), the
//! dtype rules that depend on the kernel PyTorch would pick, and each product's own checks.
//! They produce the strided [`Product`] the backend runs.

use crate::backend::kernel::{Mat, Product};
use crate::layout::broadcast::{broadcast_shapes, broadcast_strides};
use crate::layout::view::compute_stride;
use crate::layout::{checked_numel, Layout};
use crate::ops::promote::{result_type, Arg};
use crate::tensor::ViewCreation;
use crate::{DType, Error, Result, Scalar, Tensor};

/// How `matmul` sees its operands: the product, the result's shape, and whether the result
/// keeps the row and column dimensions (a 1-d operand contributes neither).
pub(super) struct MatmulPlan {
    pub(super) product: Product,
    pub(super) shape: Vec<usize>,
    rows: bool,
    cols: bool,
}

impl MatmulPlan {
    /// Where the product's result lives in a tensor of layout `l` (of shape `self.shape`).
    pub(super) fn out_mat(&self, l: &Layout) -> Mat {
        let nb = self.product.batch.len();
        let st = l.strides();
        Mat {
            offset: l.offset(),
            batch: st[..nb].to_vec(),
            rs: if self.rows { st[nb] } else { 0 },
            cs: if self.cols { st[st.len() - 1] } else { 0 },
        }
    }
}

pub(super) fn shape_error(
    op: &'static str,
    message: String,
    shapes: &[&[usize]],
    hint: &str,
) -> Error {
    Error::shape(op, message, shapes.iter().map(|s| s.to_vec()).collect()).with_hint(hint)
}

/// PyTorch's `matmul` shape rules: vectors become a row (first operand) or a column (second
/// operand) that the result drops again; batch dimensions broadcast.
pub(super) fn plan_matmul(op: &'static str, a: &Layout, b: &Layout) -> Result<MatmulPlan> {
    let (sa, sb) = (a.sizes(), b.sizes());
    let (da, db) = (sa.len(), sb.len());
    if da == 0 || db == 0 {
        return Err(shape_error(
            op,
            format!("both operands need at least one dimension, got shapes {sa:?} and {sb:?}"),
            &[sa, sb],
            "to scale by a 0-d tensor use mul(); otherwise unsqueeze() it into a vector or matrix",
        ));
    }
    let ka = sa[da - 1];
    let kb = if db == 1 { sb[0] } else { sb[db - 2] };
    if ka != kb {
        let which = if db == 1 {
            "length"
        } else {
            "second-to-last dimension"
        };
        return Err(shape_error(
            op,
            format!(
                "cannot multiply shapes {sa:?} and {sb:?}: the last dimension of the first ({ka}) \
                 must equal the {which} of the second ({kb})"
            ),
            &[sa, sb],
            "check the order of the operands, or transpose one of them (t() or transpose(-2, -1))",
        ));
    }
    let a_batch = &sa[..da.saturating_sub(2)];
    let b_batch = &sb[..db.saturating_sub(2)];
    let batch = broadcast_shapes(a_batch, b_batch).map_err(|e| {
        shape_error(
            op,
            format!(
                "the batch dimensions {a_batch:?} of {sa:?} and {b_batch:?} of {sb:?} do not \
                 broadcast: {}",
                e.describe()
            ),
            &[sa, sb],
            "batch dimensions must be equal or 1, counting from the right; unsqueeze() or \
             expand() an operand to line them up",
        )
    })?;
    let nb = batch.len();
    let (st_a, st_b) = (a.strides(), b.strides());
    let (m, a_mat) = if da == 1 {
        (1, Mat::unbatched(a.offset(), nb, 0, st_a[0]))
    } else {
        let mat = Mat {
            offset: a.offset(),
            batch: broadcast_strides(a_batch, &st_a[..da - 2], &batch),
            rs: st_a[da - 2],
            cs: st_a[da - 1],
        };
        (sa[da - 2], mat)
    };
    let (n, b_mat) = if db == 1 {
        (1, Mat::unbatched(b.offset(), nb, st_b[0], 0))
    } else {
        let mat = Mat {
            offset: b.offset(),
            batch: broadcast_strides(b_batch, &st_b[..db - 2], &batch),
            rs: st_b[db - 2],
            cs: st_b[db - 1],
        };
        (sb[db - 1], mat)
    };
    let mut shape = batch.clone();
    if da > 1 {
        shape.push(m);
    }
    if db > 1 {
        shape.push(n);
    }
    if checked_numel(&shape).is_none() {
        return Err(shape_error(
            op,
            format!("the product of {sa:?} and {sb:?} has shape {shape:?}, too large to address"),
            &[sa, sb],
            "multiply smaller pieces",
        ));
    }
    Ok(MatmulPlan {
        product: Product {
            batch,
            m,
            n,
            k: ka,
            a: a_mat,
            b: b_mat,
        },
        shape,
        rows: da > 1,
        cols: db > 1,
    })
}

/// Which of PyTorch's kernels a product goes to, for the dtype rules that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kernel {
    /// `dot`: same dtype, never bool.
    Dot,
    /// `mm`, `mv` and `addmm` (and `matmul`'s folded batches): same dtype; bool only when
    /// there is nothing to multiply (an empty result or `k == 0`).
    Matrix,
    /// `bmm` (and `matmul`'s unfolded batches): when there is nothing to multiply PyTorch
    /// checks nothing and the result takes the second operand's dtype; otherwise as `Matrix`.
    Batched,
}

/// The result dtype of a product over `operands` (which must share it: matrix products do not
/// promote); `trivial` when the result is empty or `k == 0`, so nothing is multiplied.
pub(super) fn product_dtype(
    op: &'static str,
    operands: &[(&str, &Tensor)],
    kernel: Kernel,
    trivial: bool,
) -> Result<DType> {
    if kernel == Kernel::Batched && trivial {
        return Ok(operands[operands.len() - 1].1.dtype());
    }
    let (first, t0) = operands[0];
    let dtype = t0.dtype();
    for &(name, t) in &operands[1..] {
        if t.dtype() != dtype {
            return Err(Error::dtype(
                op,
                format!(
                    "expected {first} and {name} to have the same dtype, but {first} is {dtype} \
                     and {name} is {}",
                    t.dtype()
                ),
                None,
            )
            .with_hint(format!(
                "matrix products do not promote dtypes: convert one operand first, e.g. \
                 {name}.to(DType::{dtype:?})"
            )));
        }
    }
    if dtype == DType::Bool && (kernel == Kernel::Dot || !trivial) {
        return Err(Error::dtype(
            op,
            "matrix products are not implemented for bool tensors",
            Some(
                "convert the operands to an integer or floating dtype first, e.g. .to(DType::I64)",
            ),
        ));
    }
    Ok(dtype)
}

impl MatmulPlan {
    /// Whether nothing is multiplied: an empty result or `k == 0`.
    pub(super) fn trivial(&self) -> bool {
        let p = &self.product;
        p.k == 0 || self.shape.contains(&0)
    }
}

/// The kernel PyTorch's `matmul` uses for operands of these layouts.
pub(super) fn matmul_kernel(a: &Layout, b: &Layout) -> Kernel {
    let (da, db) = (a.ndim(), b.ndim());
    if da == 1 && db == 1 {
        Kernel::Dot
    } else if (da >= 3 || db >= 3) && torch_fold_shape(a, b).is_none() {
        Kernel::Batched
    } else {
        Kernel::Matrix
    }
}

/// Checks that `t` (named `name`) has `ndim` dimensions.
pub(super) fn expect_ndim(
    op: &'static str,
    name: &str,
    l: &Layout,
    ndim: usize,
    what: &str,
    hint: &str,
) -> Result<()> {
    if l.ndim() == ndim {
        return Ok(());
    }
    Err(shape_error(
        op,
        format!(
            "{name} must be a {what} ({ndim}-d), got a {}-d tensor of shape {:?}",
            l.ndim(),
            l.sizes()
        ),
        &[l.sizes()],
        hint,
    ))
}

/// The shape PyTorch writes a `matmul(out=)` result through when it folds a ≥3-d operand
/// times a 1-d or 2-d one into a single matrix product (its `should_fold` rule); `None` when
/// it does not fold.
pub(super) fn torch_fold_shape(a: &Layout, b: &Layout) -> Option<Vec<usize>> {
    let (da, db) = (a.ndim(), b.ndim());
    let a_larger = da >= db;
    let (dim1, dim2) = if a_larger { (da, db) } else { (db, da) };
    if dim1 < 3 || dim2 > 2 || da == 2 {
        return None;
    }
    let (mut sizes, mut strides) = if a_larger {
        (a.sizes().to_vec(), a.strides().to_vec())
    } else {
        (b.sizes().to_vec(), b.strides().to_vec())
    };
    if !a_larger {
        sizes.swap(dim1 - 1, dim1 - 2);
        strides.swap(dim1 - 1, dim1 - 2);
    }
    let empty = sizes.contains(&0);
    if !empty && (0..dim1 - 2).any(|i| strides[i] != strides[i + 1] * sizes[i + 1]) {
        return None;
    }
    let folded: usize = sizes[..dim1 - 1].iter().product();
    if a_larger && db == 2 {
        Some(vec![folded, b.sizes()[1]])
    } else {
        Some(vec![folded])
    }
}

/// The validated operands of `mm`: the plan and the result's dtype.
pub(super) fn check_mm(op: &'static str, a: &Tensor, b: &Tensor) -> Result<(MatmulPlan, DType)> {
    let (la, lb) = (a.layout(), b.layout());
    let hint = "mm multiplies two matrices; use matmul() for vectors and batches";
    expect_ndim(op, "self", &la, 2, "matrix", hint)?;
    expect_ndim(op, "mat2", &lb, 2, "matrix", hint)?;
    let plan = plan_matmul(op, &la, &lb)?;
    let operands = [("self", a), ("mat2", b)];
    let dtype = product_dtype(op, &operands, Kernel::Batched, plan.trivial())?;
    Ok((plan, dtype))
}

/// The validated operands of `bmm`: the plan and the result's dtype.
pub(super) fn check_bmm(op: &'static str, a: &Tensor, b: &Tensor) -> Result<(MatmulPlan, DType)> {
    let (la, lb) = (a.layout(), b.layout());
    let hint = "bmm takes [batch, n, m] and [batch, m, p]; use matmul() to broadcast";
    expect_ndim(op, "self", &la, 3, "batch of matrices", hint)?;
    expect_ndim(op, "mat2", &lb, 3, "batch of matrices", hint)?;
    let (sa, sb) = (la.sizes(), lb.sizes());
    if sa[0] != sb[0] {
        return Err(shape_error(
            op,
            format!(
                "the batch sizes differ: self {sa:?} has {} matrices and mat2 {sb:?} has {}",
                sa[0], sb[0]
            ),
            &[sa, sb],
            "bmm does not broadcast: expand() the operand with batch size 1, or use matmul()",
        ));
    }
    let plan = plan_matmul(op, &la, &lb)?;
    let operands = [("self", a), ("mat2", b)];
    let dtype = product_dtype(op, &operands, Kernel::Batched, plan.trivial())?;
    Ok((plan, dtype))
}

/// The validated operands of `dot`: the plan and the result's dtype.
pub(super) fn check_dot(op: &'static str, a: &Tensor, b: &Tensor) -> Result<(MatmulPlan, DType)> {
    let (la, lb) = (a.layout(), b.layout());
    let hint = "dot multiplies two vectors; use matmul() for matrices, or flatten() both";
    expect_ndim(op, "self", &la, 1, "vector", hint)?;
    expect_ndim(op, "other", &lb, 1, "vector", hint)?;
    let (sa, sb) = (la.sizes(), lb.sizes());
    if sa != sb {
        return Err(shape_error(
            op,
            format!(
                "the vectors have different lengths: {} (shape {sa:?}) and {} (shape {sb:?})",
                sa[0], sb[0]
            ),
            &[sa, sb],
            "both vectors must have the same number of elements",
        ));
    }
    let plan = plan_matmul(op, &la, &lb)?;
    let operands = [("self", a), ("other", b)];
    let dtype = product_dtype(op, &operands, Kernel::Dot, false)?;
    Ok((plan, dtype))
}

/// The column view `[n, 1]` of a vector that `outer` multiplies by a row, after checking
/// both operands are vectors.
pub(super) fn outer_column(op: &'static str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let l = a.layout();
    let hint = "outer multiplies two vectors; flatten() the operands first";
    expect_ndim(op, "self", &l, 1, "vector", hint)?;
    expect_ndim(op, "other", &b.layout(), 1, "vector", hint)?;
    let n = l.sizes()[0];
    let strides =
        compute_stride(l.sizes(), l.strides(), &[n, 1]).unwrap_or_else(|| vec![l.strides()[0], 1]);
    Ok(a.make_view(
        op,
        Layout::new(vec![n, 1], strides, l.offset()),
        ViewCreation::Plain,
    ))
}

/// A validated `addmm`: the product's plan, the result's dtype, and where `self` (broadcast
/// to the result's shape) is read.
pub(super) struct Addmm {
    pub(super) plan: MatmulPlan,
    pub(super) dtype: DType,
    pub(super) c_mat: Mat,
}

pub(super) fn check_addmm(
    op: &'static str,
    c: &Tensor,
    mat1: &Tensor,
    mat2: &Tensor,
    beta: Scalar,
) -> Result<Addmm> {
    let (lc, la, lb) = (c.layout(), mat1.layout(), mat2.layout());
    let hint = "addmm multiplies two matrices; use matmul() and add() for other shapes";
    expect_ndim(op, "mat1", &la, 2, "matrix", hint)?;
    expect_ndim(op, "mat2", &lb, 2, "matrix", hint)?;
    let plan = plan_matmul(op, &la, &lb)?;
    let target = [plan.product.m, plan.product.n];
    let sc = lc.sizes();
    let fits = sc.len() <= 2
        && broadcast_shapes(sc, &target).is_ok_and(|s| s.as_slice() == target.as_slice());
    if !fits {
        return Err(shape_error(
            op,
            format!(
                "self of shape {sc:?} cannot be broadcast to the shape {target:?} of the \
                 product of {:?} and {:?}",
                la.sizes(),
                lb.sizes()
            ),
            &[sc, la.sizes(), lb.sizes()],
            "self must be broadcastable to [rows of mat1, columns of mat2]",
        ));
    }
    let operands = [("self", c), ("mat1", mat1), ("mat2", mat2)];
    let dtype = product_dtype(op, &operands, Kernel::Matrix, plan.trivial())?;
    if plan.product.k == 0 && beta.to_f64() != 0.0 {
        // PyTorch computes `self * beta` (with type promotion) and casts it to the result.
        let scaled = result_type(&[Arg::Tensor(c), Arg::Scalar(beta)]);
        if !scaled.can_cast_to(dtype) {
            return Err(Error::dtype(
                op,
                format!(
                    "with an empty inner dimension the result is self * beta, which has dtype \
                     {scaled} for self of dtype {dtype} and beta {}; it cannot be stored as \
                     {dtype}",
                    beta.to_f64()
                ),
                Some(
                    "give beta the kind of the tensors (an integer for integer tensors, \
                      true or 0 for bool)",
                ),
            ));
        }
    }
    let cs = broadcast_strides(sc, lc.strides(), &target);
    let c_mat = Mat {
        offset: lc.offset(),
        batch: vec![],
        rs: cs[0],
        cs: cs[1],
    };
    Ok(Addmm { plan, dtype, c_mat })
}
