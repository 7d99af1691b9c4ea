//! Folding a batch of products into the rows of one product, and walking a batch.

use crate::backend::kernel::{Mat, Product};
use crate::layout::checked_numel;

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
pub(super) fn fold(p: &Product, out: &Mat) -> Option<(Product, Mat)> {
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
pub(crate) fn unravel(mut i: usize, sizes: &[usize], index: &mut [usize]) {
    for d in (0..sizes.len()).rev() {
        index[d] = i % sizes[d];
        i /= sizes[d];
    }
}
