//! Matrix products: `matmul`, `mm`, `bmm`, `outer`, `dot`, `addmm` and `matmul_out`, with
//! PyTorch's shapes, dtypes and output layouts.
//!
//! Every product is described as a batch of `m×k · k×n` products over strided operands
//! (`Product`), so transposed, sliced and broadcast operands are read where they are, never
//! copied. Floating products run on the `gemm` crate (f32 and f64 directly; f16 and bf16 widened
//! to f32), integer products on a plain loop with wrapping arithmetic; bool is refused, as PyTorch
//! refuses it on the CPU. Matrix products do not promote: both operands (and `addmm`'s input)
//! must share a dtype. Large products run on strata's pool.

use crate::autograd::formulas::linalg as linalg_grad;
use gemm::Parallelism;
use rayon::prelude::*;

use crate::backend::cpu::pool::{num_threads, pool};
use crate::dtype::{cast, dispatch, DTypeFn, Element};
use crate::layout::broadcast::{broadcast_shapes, broadcast_strides};
use crate::layout::overlap::{internal_overlap, InternalOverlap};
use crate::layout::view::compute_stride;
use crate::layout::{checked_numel, contiguous_strides, Layout};
use crate::op::OpContext;
use crate::ops::binary::{binary, BinaryOp, Other};
use crate::ops::promote::{result_type, Arg};
use crate::storage::{lock_storages, Access};
use crate::tensor::{Body, ViewCreation};
use crate::{DType, Error, Result, Scalar, Tensor};

/// Multiply-adds (`m·n·k`) from which a product is spread over strata's pool.
const PARALLEL_WORK: usize = 1 << 17;

/// Where one operand's matrices are, in elements of its storage: element `(i, j)` of batch
/// entry `idx` lives at `offset + Σ idx[d]·batch[d] + i·rs + j·cs`.
#[derive(Debug, Clone, PartialEq)]
struct Mat {
    offset: usize,
    batch: Vec<usize>,
    rs: usize,
    cs: usize,
}

impl Mat {
    /// Offset of element `(0, 0)` of batch entry `index`.
    fn at(&self, index: &[usize]) -> usize {
        self.offset
            + index
                .iter()
                .zip(&self.batch)
                .map(|(i, s)| i * s)
                .sum::<usize>()
    }

    /// A matrix operand that is the same for every entry of a batch of `nb` dimensions.
    fn unbatched(offset: usize, nb: usize, rs: usize, cs: usize) -> Mat {
        Mat {
            offset,
            batch: vec![0; nb],
            rs,
            cs,
        }
    }
}

/// A batch of products `a[idx] (m×k) · b[idx] (k×n)`.
#[derive(Debug, Clone)]
struct Product {
    batch: Vec<usize>,
    m: usize,
    n: usize,
    k: usize,
    a: Mat,
    b: Mat,
}

/// How `matmul` sees its operands: the product, the result's shape, and whether the result
/// keeps the row and column dimensions (a 1-d operand contributes neither).
struct MatmulPlan {
    product: Product,
    shape: Vec<usize>,
    rows: bool,
    cols: bool,
}

impl MatmulPlan {
    /// Where the product's result lives in a tensor of layout `l` (of shape `self.shape`).
    fn out_mat(&self, l: &Layout) -> Mat {
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

fn shape_error(op: &'static str, message: String, shapes: &[&[usize]], hint: &str) -> Error {
    Error::shape(op, message, shapes.iter().map(|s| s.to_vec()).collect()).with_hint(hint)
}

/// PyTorch's `matmul` shape rules: vectors become a row (first operand) or a column (second
/// operand) that the result drops again; batch dimensions broadcast.
fn plan_matmul(op: &'static str, a: &Layout, b: &Layout) -> Result<MatmulPlan> {
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
enum Kernel {
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
fn product_dtype(
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
    fn trivial(&self) -> bool {
        let p = &self.product;
        p.k == 0 || self.shape.contains(&0)
    }
}

/// The kernel PyTorch's `matmul` uses for operands of these layouts.
fn matmul_kernel(a: &Layout, b: &Layout) -> Kernel {
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
fn expect_ndim(
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

/// A raw pointer to a matrix inside a locked storage, with its strides in elements.
struct MatPtr<T> {
    ptr: *mut T,
    rs: usize,
    cs: usize,
}

impl<T> Clone for MatPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for MatPtr<T> {}

// SAFETY: a MatPtr points into a storage locked for the whole product (or into a buffer the
// product owns); threads only write disjoint rows of the output through it.
unsafe impl<T> Send for MatPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for MatPtr<T> {}

impl<T: Copy> MatPtr<T> {
    /// Address of element `(i, j)`.
    ///
    /// # Safety
    /// `(i, j)` must be inside the matrix.
    #[inline(always)]
    unsafe fn at(&self, i: usize, j: usize) -> *mut T {
        // SAFETY: forwarded from the caller.
        unsafe { self.ptr.add(i * self.rs + j * self.cs) }
    }

    /// The matrix whose `(0, 0)` element is at `offset` from this pointer.
    ///
    /// # Safety
    /// The offset must stay inside the allocation.
    unsafe fn shifted(&self, offset: usize, rs: usize, cs: usize) -> MatPtr<T> {
        MatPtr {
            // SAFETY: forwarded from the caller.
            ptr: unsafe { self.ptr.add(offset) },
            rs,
            cs,
        }
    }
}

/// One `m×k · k×n` product: `dst = beta·c + alpha·(a @ b)`; `c` is ignored when absent or
/// when `beta` is zero (even where it holds NaN), the product when `alpha` is zero.
struct One<T> {
    m: usize,
    n: usize,
    k: usize,
    dst: MatPtr<T>,
    a: MatPtr<T>,
    b: MatPtr<T>,
    c: Option<MatPtr<T>>,
    alpha: Scalar,
    beta: Scalar,
}

impl<T: Element> One<T> {
    /// # Safety
    /// Every pointer must be valid for its matrix; `dst` must not overlap itself or the inputs.
    unsafe fn run(&self, par: Parallelism) {
        // SAFETY (all arms): forwarded from the caller.
        match T::DTYPE {
            DType::F32 | DType::F64 => unsafe { self.run_gemm(par) },
            // Half precision accumulates in f32, as PyTorch's CPU kernels do (an f16
            // accumulator overflows on sums whose result fits).
            DType::F16 | DType::BF16 => unsafe { self.run_widened(par) },
            _ => unsafe { self.run_loop(par) },
        }
    }

    /// f32 and f64: `gemm` on the operands as they lie.
    unsafe fn run_gemm(&self, par: Parallelism) {
        let (m, n, k) = (self.m, self.n, self.k);
        let alpha: T = self.alpha.to();
        let beta: T = self.beta.to();
        let c = self.c.filter(|_| beta != T::ZERO);
        let product = k > 0 && alpha != T::ZERO;
        let d = self.dst;
        // SAFETY: indices stay inside the matrices (caller's contract).
        unsafe {
            if let Some(c) = c {
                let bf = beta.to_f64();
                for i in 0..m {
                    for j in 0..n {
                        *d.at(i, j) = cast::<f64, T>(bf * (*c.at(i, j)).to_f64());
                    }
                }
            } else if !product {
                for i in 0..m {
                    for j in 0..n {
                        *d.at(i, j) = T::ZERO;
                    }
                }
            }
            if product {
                let (a, b) = (self.a, self.b);
                // gemm computes dst := alpha·dst + beta·lhs·rhs, strides column first.
                gemm::gemm::<T>(
                    m,
                    n,
                    k,
                    d.ptr,
                    d.cs as isize,
                    d.rs as isize,
                    c.is_some(),
                    a.ptr,
                    a.cs as isize,
                    a.rs as isize,
                    b.ptr,
                    b.cs as isize,
                    b.rs as isize,
                    T::ONE,
                    alpha,
                    false,
                    false,
                    false,
                    par,
                );
            }
        }
    }

    /// f16 and bf16: the operands widened to contiguous f32, multiplied by `gemm` in f32,
    /// rounded once.
    unsafe fn run_widened(&self, par: Parallelism) {
        let (m, n, k) = (self.m, self.n, self.k);
        let alpha: f32 = self.alpha.to();
        let beta: f32 = self.beta.to();
        let c = self.c.filter(|_| beta != 0.0);
        let mut acc = vec![0f32; m * n];
        // SAFETY: indices stay inside the matrices (caller's contract); the f32 buffers are
        // owned here and sized for their matrices.
        unsafe {
            if k > 0 && alpha != 0.0 {
                let mut a32 = vec![0f32; m * k];
                for i in 0..m {
                    for l in 0..k {
                        a32[i * k + l] = cast::<T, f32>(*self.a.at(i, l));
                    }
                }
                let mut b32 = vec![0f32; k * n];
                for l in 0..k {
                    for j in 0..n {
                        b32[l * n + j] = cast::<T, f32>(*self.b.at(l, j));
                    }
                }
                gemm::gemm::<f32>(
                    m,
                    n,
                    k,
                    acc.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a32.as_ptr(),
                    1,
                    k as isize,
                    b32.as_ptr(),
                    1,
                    n as isize,
                    0.0,
                    alpha,
                    false,
                    false,
                    false,
                    par,
                );
            }
            for i in 0..m {
                for j in 0..n {
                    let mut v = acc[i * n + j];
                    if let Some(c) = c {
                        v += beta * cast::<T, f32>(*c.at(i, j));
                    }
                    *self.dst.at(i, j) = cast::<f32, T>(v);
                }
            }
        }
    }

    /// Integers: a row-at-a-time loop with wrapping arithmetic, in the element type.
    unsafe fn run_loop(&self, par: Parallelism) {
        let (n, k) = (self.n, self.k);
        let alpha: T = self.alpha.to();
        let beta: T = self.beta.to();
        let c = self.c.filter(|_| beta != T::ZERO);
        let (a, b, d) = (self.a, self.b, self.dst);
        let row = |i: usize| {
            let mut acc = vec![T::ZERO; n];
            // SAFETY: indices stay inside the matrices (caller's contract); each row of `dst`
            // is written by one call only.
            unsafe {
                for l in 0..k {
                    let x = *a.at(i, l);
                    if x == T::ZERO {
                        continue;
                    }
                    for (j, s) in acc.iter_mut().enumerate() {
                        *s = s.add(x.mul(*b.at(l, j)));
                    }
                }
                for (j, s) in acc.into_iter().enumerate() {
                    let mut v = alpha.mul(s);
                    if let Some(c) = c {
                        v = v.add(beta.mul(*c.at(i, j)));
                    }
                    *d.at(i, j) = v;
                }
            }
        };
        match par {
            Parallelism::None => (0..self.m).for_each(row),
            _ => (0..self.m).into_par_iter().for_each(row),
        }
    }
}

/// The stride of the single dimension that dimensions `sizes`/`strides` (outermost first)
/// form together, if they do (size-1 dimensions do not matter).
fn merged_stride(sizes: &[usize], strides: &[usize]) -> Option<usize> {
    let mut merged = None;
    let mut next = 0;
    for (&size, &stride) in sizes.iter().zip(strides).rev() {
        if size == 1 {
            continue;
        }
        if merged.is_some() && stride != next {
            return None;
        }
        merged.get_or_insert(stride);
        next = stride * size;
    }
    Some(merged.unwrap_or(0))
}

/// Folds the batch into the rows when `b` is one matrix for every batch entry and the batch
/// and row dimensions of `a` and of the output each form one evenly strided dimension: one
/// large product instead of many small ones.
fn fold(p: &Product, out: &Mat) -> Option<(Product, Mat)> {
    if p.batch.is_empty()
        || p.batch
            .iter()
            .zip(&p.b.batch)
            .any(|(&s, &st)| s > 1 && st != 0)
    {
        return None;
    }
    let mut sizes = p.batch.clone();
    sizes.push(p.m);
    let with_rows = |mat: &Mat| {
        let mut st = mat.batch.clone();
        st.push(mat.rs);
        st
    };
    let a_rs = merged_stride(&sizes, &with_rows(&p.a))?;
    let out_rs = merged_stride(&sizes, &with_rows(out))?;
    let rows = checked_numel(&sizes)?;
    let product = Product {
        batch: vec![],
        m: rows,
        n: p.n,
        k: p.k,
        a: Mat {
            offset: p.a.offset,
            batch: vec![],
            rs: a_rs,
            cs: p.a.cs,
        },
        b: Mat {
            offset: p.b.offset,
            batch: vec![],
            rs: p.b.rs,
            cs: p.b.cs,
        },
    };
    let out = Mat {
        offset: out.offset,
        batch: vec![],
        rs: out_rs,
        cs: out.cs,
    };
    Some((product, out))
}

/// Batch entry `i` (row-major) of a batch of shape `sizes`, written into `index`.
fn unravel(mut i: usize, sizes: &[usize], index: &mut [usize]) {
    for d in (0..sizes.len()).rev() {
        index[d] = i % sizes[d];
        i /= sizes[d];
    }
}

/// A whole product, ready to run: the storages are locked and the pointers are their bases.
struct Job<'a> {
    product: &'a Product,
    out: &'a Mat,
    c: Option<&'a Mat>,
    a_ptr: *const u8,
    b_ptr: *const u8,
    c_ptr: *const u8,
    out_ptr: *mut u8,
    alpha: Scalar,
    beta: Scalar,
    /// Compute into a private buffer first, then copy into the output (which shares memory
    /// with an input, or is not dense).
    buffered: bool,
}

impl DTypeFn for &Job<'_> {
    type Output = ();
    fn call<T: Element>(self) {
        let p = self.product;
        let batches = checked_numel(&p.batch).unwrap_or(0);
        let total = batches.saturating_mul(p.m).saturating_mul(p.n);
        if total == 0 {
            return;
        }
        let base = |ptr: *const u8| MatPtr {
            ptr: ptr as *mut T,
            rs: 0,
            cs: 0,
        };
        let (a, b, c) = (base(self.a_ptr), base(self.b_ptr), base(self.c_ptr));
        let c = self.c.map(|m| (c, m));
        if !self.buffered {
            // SAFETY: the storages are locked by the caller and every layout was validated
            // against them; the output is dense and shares no memory with the inputs.
            unsafe {
                compute(
                    p,
                    base(self.out_ptr),
                    self.out,
                    a,
                    b,
                    c,
                    self.alpha,
                    self.beta,
                )
            };
            return;
        }
        let mut buf = vec![T::ZERO; total];
        let mut strides = contiguous_strides(&p.batch);
        strides.iter_mut().for_each(|s| *s *= p.m * p.n);
        let buf_mat = Mat {
            offset: 0,
            batch: strides,
            rs: p.n,
            cs: 1,
        };
        let buf_ptr = MatPtr {
            ptr: buf.as_mut_ptr(),
            rs: 0,
            cs: 0,
        };
        // SAFETY: as above, writing into `buf`, which holds `total` elements laid out as
        // `buf_mat` and overlaps nothing.
        unsafe { compute(p, buf_ptr, &buf_mat, a, b, c, self.alpha, self.beta) };
        let out = self.out_ptr as *mut T;
        let mut index = vec![0; p.batch.len()];
        let mut src = buf.iter();
        for e in 0..batches {
            unravel(e, &p.batch, &mut index);
            let o = self.out.at(&index);
            for i in 0..p.m {
                for j in 0..p.n {
                    if let Some(&v) = src.next() {
                        // SAFETY: the output storage is write-locked and its layout covers
                        // this element.
                        unsafe { *out.add(o + i * self.out.rs + j * self.out.cs) = v };
                    }
                }
            }
        }
    }
}

/// Runs every product of the batch, spreading large work over strata's pool.
///
/// # Safety
/// The base pointers and layouts must describe locked, valid memory; `dst` must not overlap
/// itself or the inputs.
#[allow(clippy::too_many_arguments)]
unsafe fn compute<T: Element>(
    p: &Product,
    dst: MatPtr<T>,
    dst_mat: &Mat,
    a: MatPtr<T>,
    b: MatPtr<T>,
    c: Option<(MatPtr<T>, &Mat)>,
    alpha: Scalar,
    beta: Scalar,
) {
    let folded = if c.is_none() { fold(p, dst_mat) } else { None };
    let (p, dst_mat) = match &folded {
        Some((p, o)) => (p, o),
        None => (p, dst_mat),
    };
    let batches = checked_numel(&p.batch).unwrap_or(0);
    let work = p.m.saturating_mul(p.n).saturating_mul(p.k.max(1));
    let one = |e: usize, par: Parallelism| {
        let mut index = vec![0; p.batch.len()];
        unravel(e, &p.batch, &mut index);
        // SAFETY: the offsets are those of validated layouts (caller's contract).
        unsafe {
            let job = One {
                m: p.m,
                n: p.n,
                k: p.k,
                dst: dst.shifted(dst_mat.at(&index), dst_mat.rs, dst_mat.cs),
                a: a.shifted(p.a.at(&index), p.a.rs, p.a.cs),
                b: b.shifted(p.b.at(&index), p.b.rs, p.b.cs),
                c: c.map(|(c, cm)| c.shifted(cm.at(&index), cm.rs, cm.cs)),
                alpha,
                beta,
            };
            job.run(par);
        }
    };
    if work >= PARALLEL_WORK {
        let threads = num_threads();
        pool().install(|| (0..batches).for_each(|e| one(e, Parallelism::Rayon(threads))));
    } else if batches > 1 && work.saturating_mul(batches) >= PARALLEL_WORK {
        pool().install(|| {
            (0..batches)
                .into_par_iter()
                .for_each(|e| one(e, Parallelism::None))
        });
    } else {
        (0..batches).for_each(|e| one(e, Parallelism::None));
    }
}

/// `out = beta·c + alpha·(a @ b)` through `out_mat` into `out`'s storage, everything checked.
#[allow(clippy::too_many_arguments)]
fn execute(
    dtype: DType,
    product: &Product,
    a: &Body,
    b: &Body,
    c: Option<(&Body, &Mat)>,
    out: &Body,
    out_mat: &Mat,
    out_dense: bool,
    alpha: Scalar,
    beta: Scalar,
) {
    let id = out.storage.id();
    let shares = a.storage.id() == id
        || b.storage.id() == id
        || c.is_some_and(|(c, _)| c.storage.id() == id);
    let mut locks = vec![
        (&*out.storage, Access::Write),
        (&*a.storage, Access::Read),
        (&*b.storage, Access::Read),
    ];
    if let Some((cb, _)) = c {
        locks.push((&*cb.storage, Access::Read));
    }
    let guards = lock_storages(&locks);
    let job = Job {
        product,
        out: out_mat,
        c: c.map(|(_, m)| m),
        a_ptr: guards.read_ptr(&a.storage),
        b_ptr: guards.read_ptr(&b.storage),
        c_ptr: c.map_or(std::ptr::null(), |(cb, _)| guards.read_ptr(&cb.storage)),
        out_ptr: guards.write_ptr(&out.storage),
        alpha,
        beta,
        buffered: shares || !out_dense,
    };
    dispatch(dtype, &job);
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
    let out = Tensor::uninit_with_layout(ctx, Layout::contiguous(&plan.shape, 0), dtype)?;
    let body = out.body();
    let out_mat = plan.out_mat(&body.layout);
    execute(
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
    );
    Ok(out)
}

/// The shape PyTorch writes a `matmul(out=)` result through when it folds a ≥3-d operand
/// times a 1-d or 2-d one into a single matrix product (its `should_fold` rule); `None` when
/// it does not fold.
fn torch_fold_shape(a: &Layout, b: &Layout) -> Option<Vec<usize>> {
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
fn check_mm(op: &'static str, a: &Tensor, b: &Tensor) -> Result<(MatmulPlan, DType)> {
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
fn check_bmm(op: &'static str, a: &Tensor, b: &Tensor) -> Result<(MatmulPlan, DType)> {
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
fn check_dot(op: &'static str, a: &Tensor, b: &Tensor) -> Result<(MatmulPlan, DType)> {
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
fn outer_column(op: &'static str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
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
struct Addmm {
    plan: MatmulPlan,
    dtype: DType,
    c_mat: Mat,
}

fn check_addmm(
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
    /// assert_eq!(c.shape(), vec![2, 2]);
    /// assert_eq!(c.to_vec::<f32>()?, vec![5., 14., 14., 50.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("matmul");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            let (a, b) = (self.body(), other.body());
            let plan = plan_matmul(ctx.op(), &a.layout, &b.layout)?;
            let operands = [("self", self), ("other", other)];
            let dtype = product_dtype(ctx.op(), &operands, Kernel::Dot, false)?;
            new_product(&ctx, dtype, &plan, &a, &b, None, ONE, ZERO)
        })?;
        if self.dim() == 1 && other.dim() == 2 {
            // PyTorch computes a vector times a matrix as a `[1, p]` product that it squeezes
            // in place, so the result starts at version 1.
            out.bump_version();
        }
        linalg_grad::matmul(&ctx, "MatmulBackward0", self, other, &out)?;
        Ok(out)
    }

    /// The product of two matrices (`[n, m] · [m, p] → [n, p]`), without broadcasting. Both
    /// must have the same dtype. The result is a new contiguous tensor.
    #[track_caller]
    pub fn mm(&self, mat2: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("mm");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            let (plan, dtype) = check_mm(ctx.op(), self, mat2)?;
            let (a, b) = (self.body(), mat2.body());
            new_product(&ctx, dtype, &plan, &a, &b, None, ONE, ZERO)
        })?;
        linalg_grad::matmul(&ctx, "MmBackward0", self, mat2, &out)?;
        Ok(out)
    }

    /// Batched matrix product `[b, n, m] · [b, m, p] → [b, n, p]`: both 3-d with the same
    /// batch size (no broadcasting; see [`Tensor::matmul`] for that) and the same dtype.
    #[track_caller]
    pub fn bmm(&self, mat2: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("bmm");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            let (plan, dtype) = check_bmm(ctx.op(), self, mat2)?;
            let (a, b) = (self.body(), mat2.body());
            new_product(&ctx, dtype, &plan, &a, &b, None, ONE, ZERO)
        })?;
        linalg_grad::matmul(&ctx, "BmmBackward0", self, mat2, &out)?;
        Ok(out)
    }

    /// The dot product of two vectors of the same length and dtype, as a 0-d tensor.
    #[track_caller]
    pub fn dot(&self, other: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("dot");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            let (plan, dtype) = check_dot(ctx.op(), self, other)?;
            let (a, b) = (self.body(), other.body());
            new_product(&ctx, dtype, &plan, &a, &b, None, ONE, ZERO)
        })?;
        linalg_grad::dot(&ctx, self, other, &out)?;
        Ok(out)
    }

    /// The outer product of two vectors: `[n] ⊗ [m] → [n, m]`, element `(i, j)` =
    /// `self[i] * other[j]`. Unlike the other products it promotes dtypes (and takes bool),
    /// as PyTorch's `outer` does.
    #[track_caller]
    pub fn outer(&self, other: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("outer");
        let out = crate::mode::internal(|| -> Result<Tensor> {
            let column = outer_column(ctx.op(), self, other)?;
            binary(&ctx, &column, Other::Tensor(other), BinaryOp::Mul)
        })?;
        linalg_grad::outer(&ctx, self, other, &out)?;
        Ok(out)
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
        let ctx = OpContext::enter("addmm");
        let (alpha, beta) = (alpha.into(), beta.into());
        let v = check_addmm(ctx.op(), self, mat1, mat2, beta)?;
        let (c, a, b) = (self.body(), mat1.body(), mat2.body());
        let c = Some((&c, &v.c_mat));
        let out = new_product(&ctx, v.dtype, &v.plan, &a, &b, c, alpha, beta)?;
        linalg_grad::addmm(&ctx, self, mat1, mat2, beta, alpha, &out)?;
        Ok(out)
    }
}

/// `alpha` and `beta` of a plain product.
const ONE: Scalar = Scalar::Int(1);
const ZERO: Scalar = Scalar::Int(0);

#[path = "matmul_out.rs"]
mod out_forms;

#[cfg(test)]
#[path = "matmul_tests.rs"]
mod tests;
