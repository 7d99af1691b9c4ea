//! `index_select`, `gather` and `scatter_add`: their validation (dims, shapes, dtypes and
//! every index value, checked before anything is allocated or written) and their runs over the
//! backend's strided index walk (`Backend::pick`, `Backend::scatter_add`), which reads the
//! index tensor where it lies. Indices are never wrapped: as in PyTorch, a negative index is
//! out of range.

use crate::backend::args::{IndexOperand, PickArgs, ScatterAddArgs};
use crate::backend::{for_device, Backend};
use crate::backend::{Operand, Plan};
use crate::layout::order::{iteration_order, OrderOperand};
use crate::layout::overlap::{internal_overlap, InternalOverlap};
use crate::layout::Layout;
use crate::op::OpContext;
use crate::ops::joining::check_addressable;
use crate::ops::views::dim_arg;
use crate::storage::{lock_storages, Access, StorageGuards};
use crate::tensor::index_elements;
use crate::{DType, Error, Result, Tensor};

// ---------------------------------------------------------------------------------------------
// Validation helpers

/// `t.dim()`, with a 0-d tensor counted as 1-d (PyTorch's `ensure_nonempty_dim`).
fn nonempty_dim(t: &Tensor) -> usize {
    t.dim().max(1)
}

/// Size of dimension `d`, 1 for a 0-d tensor (PyTorch's `ensure_nonempty_size`).
fn nonempty_size(shape: &[usize], d: usize) -> usize {
    if shape.is_empty() {
        1
    } else {
        shape[d]
    }
}

/// Stride of dimension `d` for a walk, 0 for a 0-d tensor (whose only coordinate is 0).
fn nonempty_stride(strides: &[usize], d: usize) -> isize {
    strides.get(d).map_or(0, |&s| s as isize)
}

fn check_index_dtype(op: &'static str, index: &Tensor) -> Result<()> {
    if matches!(index.dtype(), DType::I64 | DType::I32) {
        return Ok(());
    }
    Err(Error::dtype(
        op,
        format!(
            "the index must be an i64 or i32 tensor, got {}",
            index.dtype()
        ),
        Some("convert the index with .to(DType::I64)"),
    ))
}

/// Checks every value of `index` to lie in `0..size` (dimension `dim` of the indexed tensor),
/// reading the index through its backend. Negative values are out of range, as in PyTorch.
fn check_index_values(op: &'static str, index: &Tensor, dim: usize, size: usize) -> Result<()> {
    let values = index_elements(op, index)?;
    if let Some(&bad) = values.iter().find(|&&i| i < 0 || i as u64 >= size as u64) {
        return Err(Error::Index {
            op,
            index: bad,
            dim,
            size,
        });
    }
    Ok(())
}

/// The address of `t`'s first element in the storage `guards` holds locked.
fn read_address(guards: &StorageGuards<'_>, t: &Tensor) -> *const u8 {
    let body = t.body();
    guards
        .read_ptr(&body.storage)
        .wrapping_add(body.layout.offset() * t.element_size())
}

/// `index` as the operand of a walk whose dimensions move through it with `strides`.
fn index_operand<'a>(
    guards: &StorageGuards<'_>,
    index: &Tensor,
    strides: &'a [isize],
    bound: usize,
) -> IndexOperand<'a> {
    IndexOperand {
        ptr: read_address(guards, index),
        dtype: index.dtype(),
        strides,
        bound,
    }
}

fn same_dtype(op: &'static str, what: &str, expected: DType, got: DType) -> Result<()> {
    if expected == got {
        return Ok(());
    }
    Err(Error::dtype(
        op,
        format!("self is {expected} but {what} is {got}"),
        Some("convert it with .to(self.dtype())"),
    ))
}

// ---------------------------------------------------------------------------------------------
// index_select

/// A validated `index_select`: the picked dimension and its size, and the result's shape.
pub(crate) struct IndexSelect {
    dim: usize,
    bound: usize,
    pub(crate) shape: Vec<usize>,
}

impl IndexSelect {
    pub(crate) fn infer(
        op: &'static str,
        x: &Tensor,
        dim: i64,
        index: &Tensor,
    ) -> Result<IndexSelect> {
        let x_shape = x.shape().to_vec();
        let d = dim_arg(op, dim, x_shape.len())?;
        if index.dim() > 1 {
            return Err(Error::shape(
                op,
                format!(
                    "the index must be 0-d or 1-d, got shape {:?}",
                    index.shape()
                ),
                vec![index.shape().to_vec()],
            )
            .with_hint("flatten the index, or use gather for an index per element"));
        }
        let n = index.numel();
        if x_shape.is_empty() && n != 1 {
            return Err(Error::shape(
                op,
                format!("indexing a 0-d tensor takes exactly one index, got {n}"),
                vec![vec![], index.shape().to_vec()],
            ));
        }
        check_index_dtype(op, index)?;
        let mut shape = x_shape.clone();
        if let Some(s) = shape.get_mut(d) {
            *s = n;
        }
        check_addressable(op, &shape, x.dtype())?;
        let bound = nonempty_size(&x_shape, d);
        check_index_values(op, index, d, bound)?;
        Ok(IndexSelect {
            dim: d,
            bound,
            shape,
        })
    }

    /// Writes the selection of `x` by `index` into `out` (which has the result's shape and
    /// `x`'s dtype).
    pub(crate) fn execute(
        &self,
        backend: &dyn Backend,
        x: &Tensor,
        index: &Tensor,
        out: &Tensor,
        parallel: bool,
    ) {
        let (xb, ob, ib) = (x.body(), out.body(), index.body());
        let guards = lock_storages(&[
            (&ob.storage, Access::Write),
            (&xb.storage, Access::Read),
            (&ib.storage, Access::Read),
        ]);
        let esize = x.element_size();
        let out_ptr = guards
            .write_ptr(&ob.storage)
            .wrapping_add(ob.layout.offset() * esize);
        let src_ptr = read_address(&guards, x);
        let has_dim = !self.shape.is_empty();
        let d = self.dim;
        let (x_strides, o_strides) = (xb.layout.strides(), ob.layout.strides());
        let dim_stride = nonempty_stride(x_strides, d);
        // When the dimensions after `dim` are contiguous in both, each index copies one block.
        let inner_contiguous = |strides: &[usize]| {
            Layout::new(self.shape[d + 1..].to_vec(), strides[d + 1..].to_vec(), 0).is_contiguous()
        };
        let blocked = has_dim && inner_contiguous(x_strides) && inner_contiguous(o_strides);
        let (shape, block) = if blocked {
            (&self.shape[..=d], self.shape[d + 1..].iter().product())
        } else {
            (&self.shape[..], 1)
        };
        let to_isize = |st: &[usize]| -> Vec<isize> {
            st[..shape.len()].iter().map(|&s| s as isize).collect()
        };
        let mut src_strides = to_isize(x_strides);
        // The walk moves through the (0-d or 1-d) index along `d` only.
        let mut index_strides = vec![0isize; shape.len()];
        if has_dim {
            src_strides[d] = 0;
            index_strides[d] = nonempty_stride(ib.layout.strides(), 0);
        }
        // SAFETY: all three storages are locked (the output's for writing) and the pointers are
        // their first elements; the output walk stays within its layout, the index walk visits
        // each of its elements along `d`, and every source position is an index in
        // `0..bound` along `d` plus an in-range position elsewhere. A block spans the
        // dimensions after `d`, contiguous in both. The caller asks for `parallel` only when
        // the output does not overlap itself, the source or the index.
        unsafe {
            backend.pick(&PickArgs {
                dtype: x.dtype(),
                shape,
                out_strides: &to_isize(o_strides),
                src_strides: &src_strides,
                block,
                out: out_ptr,
                src: src_ptr,
                parallel,
                index: index_operand(&guards, index, &index_strides, self.bound),
                dim_stride,
            })
        };
    }
}

// ---------------------------------------------------------------------------------------------
// gather and scatter_add

/// A validated `gather`: the picked dimension and its size, and the result's (the index's)
/// shape.
pub(crate) struct Gather {
    dim: usize,
    bound: usize,
    pub(crate) shape: Vec<usize>,
}

impl Gather {
    pub(crate) fn infer(op: &'static str, x: &Tensor, dim: i64, index: &Tensor) -> Result<Gather> {
        let x_shape = x.shape().to_vec();
        let d = dim_arg(op, dim, x_shape.len())?;
        let i_shape = index.shape().to_vec();
        let empty = index.numel() == 0;
        // As PyTorch, an empty index is not checked further: the result is empty.
        if !empty {
            check_index_dtype(op, index)?;
            if nonempty_dim(x) != nonempty_dim(index) {
                return Err(Error::shape(
                    op,
                    format!(
                        "the index must have as many dimensions as self: index {i_shape:?}, \
                         self {x_shape:?}"
                    ),
                    vec![x_shape.clone(), i_shape.clone()],
                ));
            }
            if let Some(k) = (0..nonempty_dim(x))
                .find(|&k| k != d && nonempty_size(&i_shape, k) > nonempty_size(&x_shape, k))
            {
                return Err(Error::shape(
                    op,
                    format!(
                        "the index {i_shape:?} is larger than self {x_shape:?} in dimension {k}"
                    ),
                    vec![x_shape.clone(), i_shape.clone()],
                )
                .with_hint("outside `dim`, each index size must be at most self's size"));
            }
        }
        check_addressable(op, &i_shape, x.dtype())?;
        let bound = nonempty_size(&x_shape, d);
        if !empty {
            check_index_values(op, index, d, bound)?;
        }
        Ok(Gather {
            dim: d,
            bound,
            shape: i_shape,
        })
    }

    /// Writes the elements of `x` that `index` picks into `out` (the index's shape, `x`'s
    /// dtype) through its strides.
    pub(crate) fn execute(
        &self,
        backend: &dyn Backend,
        x: &Tensor,
        index: &Tensor,
        out: &Tensor,
        parallel: bool,
    ) {
        if self.shape.contains(&0) {
            return;
        }
        let (xb, ob, ib) = (x.body(), out.body(), index.body());
        let guards = lock_storages(&[
            (&ob.storage, Access::Write),
            (&xb.storage, Access::Read),
            (&ib.storage, Access::Read),
        ]);
        let esize = x.element_size();
        let x_strides = xb.layout.strides();
        let dim_stride = nonempty_stride(x_strides, self.dim);
        let src_strides: Vec<isize> = (0..self.shape.len())
            .map(|k| {
                if k == self.dim {
                    0
                } else {
                    nonempty_stride(x_strides, k)
                }
            })
            .collect();
        let out_strides: Vec<isize> = ob.layout.strides().iter().map(|&s| s as isize).collect();
        let index_strides: Vec<isize> = ib.layout.strides().iter().map(|&s| s as isize).collect();
        // SAFETY: all three storages are locked (the output's for writing) and the pointers are
        // their first elements; the walk is the index's own shape, which fits the output and,
        // outside `dim`, the source, and along `dim` the source is read at an index in
        // `0..bound`. The caller asks for `parallel` only when the output does not overlap
        // itself, the source or the index.
        unsafe {
            backend.pick(&PickArgs {
                dtype: x.dtype(),
                shape: &self.shape,
                out_strides: &out_strides,
                src_strides: &src_strides,
                block: 1,
                out: guards
                    .write_ptr(&ob.storage)
                    .wrapping_add(ob.layout.offset() * esize),
                src: read_address(&guards, x),
                parallel,
                index: index_operand(&guards, index, &index_strides, self.bound),
                dim_stride,
            })
        };
    }
}

/// A validated `scatter_add`: the dimension and its size, and the index's shape.
pub(crate) struct ScatterAddPlan {
    dim: usize,
    bound: usize,
    i_shape: Vec<usize>,
}

impl ScatterAddPlan {
    pub(crate) fn infer(
        op: &'static str,
        x: &Tensor,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
    ) -> Result<ScatterAddPlan> {
        let x_shape = x.shape().to_vec();
        let d = dim_arg(op, dim, x_shape.len())?;
        let (i_shape, s_shape) = (index.shape().to_vec(), src.shape().to_vec());
        let empty = index.numel() == 0;
        if !empty {
            check_index_dtype(op, index)?;
        }
        same_dtype(op, "src", x.dtype(), src.dtype())?;
        // As PyTorch, an empty index is not checked further: the result is a copy of self.
        if !empty {
            let shapes = vec![x_shape.clone(), i_shape.clone(), s_shape.clone()];
            let n = nonempty_dim(index);
            if nonempty_dim(x) != n || nonempty_dim(src) != n {
                return Err(Error::shape(
                    op,
                    format!(
                        "self, index and src must have the same number of dimensions: self \
                         {x_shape:?}, index {i_shape:?}, src {s_shape:?}"
                    ),
                    shapes,
                ));
            }
            let too_big = (0..n).find(|&k| {
                let i = nonempty_size(&i_shape, k);
                (k != d && i > nonempty_size(&x_shape, k)) || i > nonempty_size(&s_shape, k)
            });
            if let Some(k) = too_big {
                return Err(Error::shape(
                    op,
                    format!(
                        "the index {i_shape:?} is larger than src {s_shape:?}, or than self \
                         {x_shape:?} outside dimension {d}, in dimension {k}"
                    ),
                    shapes,
                )
                .with_hint("the index must fit inside src, and inside self except along dim"));
            }
        }
        let bound = nonempty_size(&x_shape, d);
        if !empty {
            check_index_values(op, index, d, bound)?;
        }
        Ok(ScatterAddPlan {
            dim: d,
            bound,
            i_shape,
        })
    }

    /// Writes `x` with `src` added at the positions `index` names into `result` (`x`'s shape
    /// and dtype), through its strides: a copy of `x` first unless `copy` is false (`result`
    /// is `x` itself), then the additions in row-major order of the index.
    pub(crate) fn execute(
        &self,
        backend: &dyn Backend,
        x: &Tensor,
        index: &Tensor,
        src: &Tensor,
        result: &Tensor,
        copy: bool,
    ) {
        let (xb, sb, rb, ib) = (x.body(), src.body(), result.body(), index.body());
        let guards = lock_storages(&[
            (&rb.storage, Access::Write),
            (&xb.storage, Access::Read),
            (&sb.storage, Access::Read),
            (&ib.storage, Access::Read),
        ]);
        let esize = x.element_size();
        let dst = guards
            .write_ptr(&rb.storage)
            .wrapping_add(rb.layout.offset() * esize);
        let r_strides = rb.layout.strides();
        let x_shape = xb.layout.sizes();
        if copy && !x_shape.contains(&0) {
            let operands = [
                Operand {
                    ptr: dst,
                    strides: r_strides.to_vec(),
                    dtype: x.dtype(),
                },
                Operand {
                    ptr: guards
                        .read_ptr(&xb.storage)
                        .wrapping_add(xb.layout.offset() * esize)
                        as *mut u8,
                    strides: xb.layout.strides().to_vec(),
                    dtype: x.dtype(),
                },
            ];
            let perm = iteration_order(
                x_shape,
                &[
                    OrderOperand {
                        strides: r_strides,
                        is_reduction_output: false,
                    },
                    OrderOperand {
                        strides: xb.layout.strides(),
                        is_reduction_output: false,
                    },
                ],
            );
            let parallel = internal_overlap(&rb.layout) == InternalOverlap::No
                && rb.storage.id() != xb.storage.id();
            let plan = Plan::new(x_shape, &operands, &perm, parallel);
            // SAFETY: the result is write-locked and self read-locked (one write lock when they
            // share a storage), each layout within its storage; the copy runs in parallel only
            // when the result does not overlap itself and shares no storage with self.
            unsafe { backend.copy(&plan) };
        }
        if self.i_shape.contains(&0) {
            return;
        }
        let d = self.dim;
        let s_strides = sb.layout.strides();
        let walk_src: Vec<isize> = (0..self.i_shape.len())
            .map(|k| nonempty_stride(s_strides, k))
            .collect();
        let walk_dst: Vec<isize> = (0..self.i_shape.len())
            .map(|k| {
                if k == d {
                    0
                } else {
                    nonempty_stride(r_strides, k)
                }
            })
            .collect();
        let index_strides: Vec<isize> = ib.layout.strides().iter().map(|&s| s as isize).collect();
        // SAFETY: src and the index are read-locked and the result write-locked, the pointers
        // at their first elements; the walk is the index's own shape, which fits inside src
        // and, outside `d`, the result (checked by `infer`), and along `d` the result is
        // written at an index in `0..bound`, its size there.
        unsafe {
            backend.scatter_add(&ScatterAddArgs {
                dtype: x.dtype(),
                shape: &self.i_shape,
                src_strides: &walk_src,
                dst_strides: &walk_dst,
                src: read_address(&guards, src),
                dst,
                index: index_operand(&guards, index, &index_strides, self.bound),
                dim_stride: nonempty_stride(r_strides, d),
            })
        };
    }
}

// ---------------------------------------------------------------------------------------------
// The ops

/// `x.index_select(dim, index)` into a new contiguous tensor.
pub(crate) fn index_select(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
) -> Result<Tensor> {
    let sel = IndexSelect::infer(ctx.op(), x, dim, index)?;
    let out = Tensor::uninit_with_layout(
        ctx,
        Layout::contiguous(&sel.shape, 0),
        x.dtype(),
        x.device(),
    )?;
    sel.execute(for_device(x.device())?, x, index, &out, true);
    Ok(out)
}

/// `x.gather(dim, index)` into a new contiguous tensor.
pub(crate) fn gather(ctx: &OpContext, x: &Tensor, dim: i64, index: &Tensor) -> Result<Tensor> {
    let g = Gather::infer(ctx.op(), x, dim, index)?;
    let out =
        Tensor::uninit_with_layout(ctx, Layout::contiguous(&g.shape, 0), x.dtype(), x.device())?;
    g.execute(for_device(x.device())?, x, index, &out, true);
    Ok(out)
}

/// `x.scatter_add(dim, index, src)` into a new contiguous tensor.
pub(crate) fn scatter_add(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    index: &Tensor,
    src: &Tensor,
) -> Result<Tensor> {
    let sc = ScatterAddPlan::infer(ctx.op(), x, dim, index, src)?;
    let result = Tensor::uninit_with_layout(
        ctx,
        Layout::contiguous(&x.shape(), 0),
        x.dtype(),
        x.device(),
    )?;
    sc.execute(for_device(x.device())?, x, index, src, &result, true);
    Ok(result)
}
