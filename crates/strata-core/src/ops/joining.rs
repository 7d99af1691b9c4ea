//! Gathering and joining: `index_select` (and its `out=` form), `gather`, `scatter_add`, `cat`,
//! `stack`.
//!
//! Every op validates its dims, shapes, dtypes and every index value before it allocates or
//! writes anything. Indices are never wrapped: as in PyTorch, a negative index is out of range.
//! The copies of `cat` run through the element-wise engine (one plan per input, all storages
//! locked in one call); the indexed ops walk their index with a small strided loop below.

use crate::autograd::formulas::index as index_grad;
use std::ops::Range;

use rayon::prelude::*;

use crate::dtype::{dispatch, DTypeFn, Element};
use crate::engine::pool::{pool, GRAIN_SIZE};
use crate::engine::{kernels, Operand, Plan};
use crate::layout::order::{iteration_order, OrderOperand};
use crate::layout::overlap::{internal_overlap, overlap, InternalOverlap, Overlap};
use crate::layout::view::compute_stride;
use crate::layout::{channels_last_strides, checked_numel, contiguous_strides, wrap_dim, Layout};
use crate::op::OpContext;
use crate::ops::promote::{result_type, Arg};
use crate::ops::views::dim_arg;
use crate::storage::{lock_storages, Access};
use crate::tensor::{read_elements, Body, ViewCreation};
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

/// The values of `index` in row-major order, each checked to lie in `0..size` (dimension
/// `dim` of the indexed tensor). Negative values are out of range, as in PyTorch.
fn index_values(op: &'static str, index: &Tensor, dim: usize, size: usize) -> Result<Vec<i64>> {
    let values = read_elements::<i64>(index);
    if let Some(&bad) = values.iter().find(|&&i| i < 0 || i as u64 >= size as u64) {
        return Err(Error::Index {
            op,
            index: bad,
            dim,
            size,
        });
    }
    Ok(values)
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

fn check_addressable(op: &'static str, shape: &[usize], dtype: DType) -> Result<()> {
    if Layout::contiguous(shape, 0)
        .validate(dtype.size())
        .is_some()
    {
        return Ok(());
    }
    Err(Error::shape(
        op,
        format!("a result of shape {shape:?} is too large to address"),
        vec![shape.to_vec()],
    ))
}

// ---------------------------------------------------------------------------------------------
// A strided walk for the indexed ops

/// A raw address that the walk's closures may share across the pool's threads.
#[derive(Clone, Copy)]
struct SharedPtr(*mut u8);

// SAFETY: only an address. The kernels below dereference it while the op holds the storage
// locks, and run in parallel only when every element of the written tensor is written by
// exactly one iteration (its layout has no internal overlap and it shares no memory with the
// tensors read).
unsafe impl Send for SharedPtr {}
// SAFETY: as above.
unsafe impl Sync for SharedPtr {}

impl SharedPtr {
    fn get(self) -> *mut u8 {
        self.0
    }
}

/// Visits the elements `range` (row-major positions) of `shape`, calling `f(k, coords, offs)`
/// with each operand's element offset `Σ coords[d] * strides[j][d]`.
fn walk_range<const N: usize>(
    shape: &[usize],
    strides: &[Vec<isize>; N],
    range: Range<usize>,
    f: &impl Fn(usize, &[usize], &[isize; N]),
) {
    if range.is_empty() {
        return;
    }
    let nd = shape.len();
    if nd == 0 {
        f(0, &[], &[0; N]);
        return;
    }
    let last = nd - 1;
    let mut coords = vec![0usize; nd];
    let mut rem = range.start;
    for d in (0..nd).rev() {
        coords[d] = rem % shape[d];
        rem /= shape[d];
    }
    // Offsets of the start of the current row (coords[last] = 0).
    let mut base = [0isize; N];
    for (j, b) in base.iter_mut().enumerate() {
        *b = (0..last).map(|d| coords[d] as isize * strides[j][d]).sum();
    }
    let mut k = range.start;
    loop {
        let start = coords[last];
        let n = (shape[last] - start).min(range.end - k);
        let mut offs = [0isize; N];
        for j in 0..N {
            offs[j] = base[j] + start as isize * strides[j][last];
        }
        for i in 0..n {
            coords[last] = start + i;
            f(k + i, &coords, &offs);
            for j in 0..N {
                offs[j] += strides[j][last];
            }
        }
        k += n;
        if k >= range.end {
            return;
        }
        coords[last] = 0;
        for d in (0..last).rev() {
            coords[d] += 1;
            for j in 0..N {
                base[j] += strides[j][d];
            }
            if coords[d] < shape[d] {
                break;
            }
            for j in 0..N {
                base[j] -= shape[d] as isize * strides[j][d];
            }
            coords[d] = 0;
        }
    }
}

/// Visits every element of `shape` (see [`walk_range`]), split across strata's pool when
/// `parallel` and the loop is large enough; `weight` is the number of elements each visit
/// moves.
fn walk<const N: usize>(
    shape: &[usize],
    strides: &[Vec<isize>; N],
    parallel: bool,
    weight: usize,
    f: impl Fn(usize, &[usize], &[isize; N]) + Sync,
) {
    let numel = checked_numel(shape).unwrap_or(0);
    let work = numel.saturating_mul(weight.max(1));
    let threads = pool().current_num_threads();
    if !parallel || work < GRAIN_SIZE || threads < 2 || numel < 2 {
        walk_range(shape, strides, 0..numel, &f);
        return;
    }
    let chunks = (threads * 4).min(work / (GRAIN_SIZE / 4)).min(numel).max(2);
    pool().install(|| {
        (0..chunks).into_par_iter().for_each(|c| {
            walk_range(
                shape,
                strides,
                numel * c / chunks..numel * (c + 1) / chunks,
                &f,
            );
        })
    });
}

/// `out[k] = src[offs[1] + pick(k, coords)]` over `shape`: the copy behind `index_select` and
/// `gather`. Operand 0 is the output, operand 1 the source with stride 0 along the picked
/// dimension; `pick` gives the element offset along it. Each visit copies `block` consecutive
/// elements (more than one when the dimensions after the picked one are contiguous in both).
/// Output and source have the same dtype.
struct Pick<'a, F> {
    shape: &'a [usize],
    strides: [Vec<isize>; 2],
    block: usize,
    out: SharedPtr,
    src: SharedPtr,
    parallel: bool,
    pick: F,
}

impl<F: Fn(usize, &[usize]) -> isize + Sync> DTypeFn for Pick<'_, F> {
    type Output = ();
    fn call<T: Element>(self) {
        let (out, src, pick, block) = (self.out, self.src, &self.pick, self.block);
        walk(
            self.shape,
            &self.strides,
            self.parallel,
            block,
            |k, coords, offs| {
                let (o, s) = (out.get() as *mut T, src.get() as *const T);
                // SAFETY: `out` and `src` point at the first elements of the output and source,
                // whose storages the caller holds locked (the output's for writing). `offs[0]` is
                // an output position within its layout; `offs[1] + pick` is a source position,
                // whose index the op checked against the source's size along the picked
                // dimension before running. Both layouts lie within their storages, and from
                // each position `block` elements are consecutive in both. `copy` allows the two
                // ranges to overlap (an `out=` tensor may share a storage with the source).
                unsafe {
                    let (o, s) = (o.offset(offs[0]), s.offset(offs[1] + pick(k, coords)));
                    if block == 1 {
                        o.write(s.read());
                    } else {
                        std::ptr::copy(s, o, block);
                    }
                }
            },
        );
    }
}

/// `dst[offs[1] + idx[k] * dim_stride] += src[offs[0]]` over the index's shape, in row-major
/// order (repeated indices accumulate in that order, each add rounded to the dtype as
/// PyTorch's CPU kernel does). Serial: several elements may add into one location.
struct ScatterAdd<'a> {
    shape: &'a [usize],
    strides: [Vec<isize>; 2],
    src: SharedPtr,
    dst: SharedPtr,
    idx: &'a [i64],
    dim_stride: isize,
}

impl DTypeFn for ScatterAdd<'_> {
    type Output = ();
    fn call<T: Element>(self) {
        let (src, dst, idx, dim_stride) = (self.src, self.dst, self.idx, self.dim_stride);
        walk(self.shape, &self.strides, false, 1, |k, _, offs| {
            let (s, d) = (src.get() as *const T, dst.get() as *mut T);
            // SAFETY: `src` and `dst` point at the first elements of src and of the (fresh,
            // contiguous) result, both locked by the caller, the result for writing. The
            // index's shape fits inside both (checked), and `idx[k]` lies in the result's
            // dimension (checked), so both offsets address elements of their tensors.
            unsafe {
                let at = d.offset(offs[1] + idx[k] as isize * dim_stride);
                at.write(at.read().add(s.offset(offs[0]).read()));
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// index_select

/// A validated `index_select`: the result's shape and the checked indices.
struct IndexSelect {
    dim: usize,
    shape: Vec<usize>,
    indices: Vec<i64>,
}

impl IndexSelect {
    fn infer(op: &'static str, x: &Tensor, dim: i64, index: &Tensor) -> Result<IndexSelect> {
        let x_shape = x.shape();
        let d = dim_arg(op, dim, x_shape.len())?;
        if index.dim() > 1 {
            return Err(Error::shape(
                op,
                format!(
                    "the index must be 0-d or 1-d, got shape {:?}",
                    index.shape()
                ),
                vec![index.shape()],
            )
            .with_hint("flatten the index, or use gather for an index per element"));
        }
        let n = index.numel();
        if x_shape.is_empty() && n != 1 {
            return Err(Error::shape(
                op,
                format!("indexing a 0-d tensor takes exactly one index, got {n}"),
                vec![vec![], index.shape()],
            ));
        }
        check_index_dtype(op, index)?;
        let mut shape = x_shape.clone();
        if let Some(s) = shape.get_mut(d) {
            *s = n;
        }
        check_addressable(op, &shape, x.dtype())?;
        let indices = index_values(op, index, d, nonempty_size(&x_shape, d))?;
        Ok(IndexSelect {
            dim: d,
            shape,
            indices,
        })
    }

    /// Writes the selection into `out` (which has the result's shape and `x`'s dtype).
    fn execute(&self, x: &Tensor, out: &Tensor, parallel: bool) {
        let (xb, ob) = (x.body(), out.body());
        let guards = lock_storages(&[(&ob.storage, Access::Write), (&xb.storage, Access::Read)]);
        let esize = x.element_size();
        let out_ptr = guards
            .write_ptr(&ob.storage)
            .wrapping_add(ob.layout.offset() * esize);
        let src_ptr = guards
            .read_ptr(&xb.storage)
            .wrapping_add(xb.layout.offset() * esize) as *mut u8;
        let has_dim = !self.shape.is_empty();
        let d = self.dim;
        let (x_strides, o_strides) = (xb.layout.strides(), ob.layout.strides());
        let dim_stride = nonempty_stride(x_strides, d);
        let table: Vec<isize> = self
            .indices
            .iter()
            .map(|&i| i as isize * dim_stride)
            .collect();
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
        if has_dim {
            src_strides[d] = 0;
        }
        dispatch(
            x.dtype(),
            Pick {
                shape,
                strides: [to_isize(o_strides), src_strides],
                block,
                out: SharedPtr(out_ptr),
                src: SharedPtr(src_ptr),
                parallel,
                pick: |_: usize, coords: &[usize]| {
                    if has_dim {
                        table[coords[d]]
                    } else {
                        table[0]
                    }
                },
            },
        );
    }
}

// ---------------------------------------------------------------------------------------------
// cat

/// The memory format PyTorch suggests for a tensor (`suggest_memory_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Contiguous,
    ChannelsLast,
    ChannelsLast3d,
}

/// PyTorch's `is_channels_last_strides_2d_s4` / `_3d_s5`: whether the strides look like
/// channels-last, with `order` the dimensions from fastest to slowest.
fn strides_like(sizes: &[usize], strides: &[usize], order: &[usize]) -> bool {
    if strides[1] == 0 {
        return false;
    }
    let mut min = 0usize;
    for &d in order {
        if sizes[d] == 0 || strides[d] < min {
            return false;
        }
        // N111-style ambiguity falls back to contiguous, as PyTorch does.
        if d == 0 && min == strides[1] {
            return false;
        }
        min = strides[d];
        if sizes[d] > 1 {
            min *= sizes[d];
        }
    }
    true
}

fn suggest_format(l: &Layout) -> Format {
    match l.ndim() {
        4 if strides_like(l.sizes(), l.strides(), &[1, 3, 2, 0]) => Format::ChannelsLast,
        5 if strides_like(l.sizes(), l.strides(), &[1, 4, 3, 2, 0]) => Format::ChannelsLast3d,
        _ => Format::Contiguous,
    }
}

/// Channels-last strides of a 5-d `[N, C, D, H, W]` shape (C fastest, then W, H, D, N).
fn channels_last_3d_strides(sizes: &[usize]) -> Vec<usize> {
    let mut s = vec![0; 5];
    s[1] = 1;
    s[4] = sizes[1].max(1);
    s[3] = s[4] * sizes[4].max(1);
    s[2] = s[3] * sizes[3].max(1);
    s[0] = s[2] * sizes[2].max(1);
    s
}

/// PyTorch's legacy rule: 1-d tensors of shape `[0]` are left out of `cat` whatever `dim` is.
fn skipped(shape: &[usize]) -> bool {
    shape == [0]
}

fn cat_in(ctx: &OpContext, tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
    let op = ctx.op();
    if tensors.is_empty() {
        return Err(Error::argument(
            op,
            "expected a non-empty list of tensors",
            Some("pass at least one tensor"),
        ));
    }
    let bodies: Vec<Body> = tensors.iter().map(|t| t.body()).collect();
    if let Some(i) = bodies.iter().position(|b| b.layout.ndim() == 0) {
        return Err(Error::shape(
            op,
            format!("the tensor at position {i} is 0-d and cannot be concatenated"),
            vec![vec![]],
        )
        .with_hint("unsqueeze(0) it first, or use stack to join tensors along a new dimension"));
    }
    let valid = bodies.iter().position(|b| !skipped(b.layout.sizes()));
    let dtype = result_type(&tensors.iter().map(|t| Arg::Tensor(t)).collect::<Vec<_>>());
    let format = bodies
        .iter()
        .map(|b| suggest_format(&b.layout))
        .try_fold(None, |acc: Option<Format>, f| match (acc, f) {
            (_, Format::Contiguous) => Err(()),
            (Some(a), f) if a != f => Err(()),
            (_, f) => Ok(Some(f)),
        })
        .ok()
        .flatten()
        .unwrap_or(Format::Contiguous);
    // Every input but the skipped ones goes at `start` along `dim` of the result.
    let mut pieces: Vec<(usize, usize)> = Vec::new();
    let (sizes, d) = match valid {
        None => (vec![0], 0),
        Some(v) => {
            let first = bodies[v].layout.sizes();
            let d = dim_arg(op, dim, first.len())?;
            let mut total = 0usize;
            for (i, b) in bodies.iter().enumerate() {
                let s = b.layout.sizes();
                if skipped(s) {
                    continue;
                }
                if s.len() != first.len() {
                    return Err(Error::shape(
                        op,
                        format!(
                            "tensors must have the same number of dimensions: tensor {v} has \
                             shape {first:?} but tensor {i} has shape {s:?}"
                        ),
                        vec![first.to_vec(), s.to_vec()],
                    )
                    .with_hint("reshape or unsqueeze the tensors to the same rank"));
                }
                if let Some(k) = (0..s.len()).find(|&k| k != d && s[k] != first[k]) {
                    return Err(Error::shape(
                        op,
                        format!(
                            "sizes must match except in dimension {d}: tensor {v} has shape \
                             {first:?} but tensor {i} has shape {s:?} (dimension {k} differs)"
                        ),
                        vec![first.to_vec(), s.to_vec()],
                    )
                    .with_hint("only the concatenated dimension may differ in size"));
                }
                pieces.push((i, total));
                total = total.checked_add(s[d]).ok_or_else(|| {
                    Error::shape(op, "the result is too large to address", vec![])
                })?;
            }
            let mut sizes = first.to_vec();
            sizes[d] = total;
            (sizes, d)
        }
    };
    let strides = match format {
        Format::Contiguous => contiguous_strides(&sizes),
        Format::ChannelsLast => channels_last_strides(&sizes),
        Format::ChannelsLast3d => channels_last_3d_strides(&sizes),
    };
    check_addressable(op, &sizes, dtype)?;
    let out =
        Tensor::uninit_with_layout(ctx, Layout::new(sizes.clone(), strides.clone(), 0), dtype)?;
    let ob = out.body();
    let mut locks = vec![(&*ob.storage, Access::Write)];
    locks.extend(bodies.iter().map(|b| (&*b.storage, Access::Read)));
    let guards = lock_storages(&locks);
    let out_base = guards.write_ptr(&ob.storage);
    for &(i, start) in &pieces {
        let b = &bodies[i];
        let shape = b.layout.sizes();
        if shape.contains(&0) {
            continue;
        }
        let in_strides = b.layout.strides();
        let perm = iteration_order(
            shape,
            &[
                OrderOperand {
                    strides: &strides,
                    is_reduction_output: false,
                },
                OrderOperand {
                    strides: in_strides,
                    is_reduction_output: false,
                },
            ],
        );
        let in_dtype = tensors[i].dtype();
        let operands = [
            Operand {
                ptr: out_base.wrapping_add(start * strides[d] * dtype.size()),
                strides: strides.clone(),
                dtype,
            },
            Operand {
                ptr: guards
                    .read_ptr(&b.storage)
                    .wrapping_add(b.layout.offset() * in_dtype.size())
                    as *mut u8,
                strides: in_strides.to_vec(),
                dtype: in_dtype,
            },
        ];
        // Parallel is sound: the piece of the fresh output is dense within its slice, written
        // once per element, and shares no memory with any input.
        let plan = Plan::new(shape, &operands, &perm, true);
        // SAFETY: every storage is locked (the output's for writing); the piece is the
        // output's elements `start..start + size` along `dim`, inside the output, and the
        // input's layout lies within its storage.
        unsafe { kernels::copy(&plan) };
    }
    drop(guards);
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The ops

impl Tensor {
    /// The slices `index[0], index[1], ...` of dimension `dim`, copied into a new contiguous
    /// tensor whose `dim` has `index.numel()` elements. `index` is a 0-d or 1-d i64 or i32
    /// tensor; every index must lie in `0..size(dim)`.
    ///
    /// ```
    /// use strata_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[3, 2])?;
    /// let rows = x.index_select(0, &Tensor::from_vec(vec![2i64, 0], &[2])?)?;
    /// assert_eq!(rows.to_vec::<i64>()?, vec![5, 6, 1, 2]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn index_select(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("index_select");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            let sel = IndexSelect::infer(ctx.op(), self, dim, index)?;
            let out =
                Tensor::uninit_with_layout(&ctx, Layout::contiguous(&sel.shape, 0), self.dtype())?;
            sel.execute(self, &out, true);
            Ok(out)
        })?;
        index_grad::index_select(&ctx, self, dim, index, &out)?;
        Ok(out)
    }

    /// [`Tensor::index_select`] into `out`, which must have `self`'s dtype and share no memory
    /// with `self` or `index`. An `out` of another shape is resized (contiguous, keeping its
    /// storage) as PyTorch does; one of the right shape keeps its strides. Returns `out`, whose
    /// version goes up by one.
    #[track_caller]
    pub fn index_select_out(&self, dim: i64, index: &Tensor, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("index_select_out");
        crate::autograd::record::refuse_out_with_grad(ctx.op(), &[self], out)?;
        let op = ctx.op();
        let sel = IndexSelect::infer(op, self, dim, index)?;
        same_dtype(op, "out", self.dtype(), out.dtype())?;
        let ob = out.body();
        let overlap_error = |message: &str| Error::Overlap {
            op,
            message: message.into(),
            hint: Some("pass a fresh output tensor (or deep_clone() the input)".into()),
        };
        if internal_overlap(&ob.layout) == InternalOverlap::Yes {
            return Err(overlap_error(
                "more than one element of the output refers to the same memory location",
            ));
        }
        // The output as it will be written: resized outputs become contiguous at their offset.
        let written = if ob.layout.sizes() == sel.shape.as_slice() {
            ob.layout.clone()
        } else {
            Layout::contiguous(&sel.shape, ob.layout.offset())
        };
        for input in [self, index] {
            let ib = input.body();
            if ib.storage.id() != ob.storage.id() {
                continue;
            }
            for l in [&ob.layout, &written] {
                if matches!(overlap(l, &ib.layout), Overlap::Partial | Overlap::Full) {
                    return Err(overlap_error(
                        "the output shares memory with an input: some of their elements refer \
                         to the same memory location",
                    ));
                }
            }
        }
        out.resize_for_out(&ctx, &sel.shape)?;
        // Parallel only when every output element is written once and nothing read is written.
        let ol = out.layout();
        let parallel = internal_overlap(&ol) == InternalOverlap::No
            && (ob.storage.id() != self.storage_id()
                || overlap(&ol, &self.layout()) == Overlap::No);
        sel.execute(self, out, parallel);
        out.bump_version();
        Ok(out.clone())
    }

    /// Picks along `dim`: `out[i][j][k] = self[index[i][j][k]][j][k]` for `dim == 0`, and so
    /// on. `index` (i64 or i32) has as many dimensions as `self` and is no larger than it
    /// outside `dim`; the result has `index`'s shape and is contiguous.
    ///
    /// ```
    /// use strata_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2., 3., 4.], &[2, 2])?;
    /// let i = Tensor::from_vec(vec![1i64, 1, 0, 1], &[2, 2])?;
    /// assert_eq!(x.gather(1, &i)?.to_vec::<f32>()?, vec![2., 2., 3., 4.]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn gather(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("gather");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            let op = ctx.op();
            let x_shape = self.shape();
            let d = dim_arg(op, dim, x_shape.len())?;
            let i_shape = index.shape();
            let empty = index.numel() == 0;
            // As PyTorch, an empty index is not checked further: the result is empty.
            if !empty {
                check_index_dtype(op, index)?;
                if nonempty_dim(self) != nonempty_dim(index) {
                    return Err(Error::shape(
                        op,
                        format!(
                            "the index must have as many dimensions as self: index {i_shape:?}, \
                             self {x_shape:?}"
                        ),
                        vec![x_shape.clone(), i_shape.clone()],
                    ));
                }
                if let Some(k) = (0..nonempty_dim(self))
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
            check_addressable(op, &i_shape, self.dtype())?;
            let idx = if empty {
                Vec::new()
            } else {
                index_values(op, index, d, nonempty_size(&x_shape, d))?
            };
            let out =
                Tensor::uninit_with_layout(&ctx, Layout::contiguous(&i_shape, 0), self.dtype())?;
            if empty {
                return Ok(out);
            }
            let (xb, ob) = (self.body(), out.body());
            let guards =
                lock_storages(&[(&ob.storage, Access::Write), (&xb.storage, Access::Read)]);
            let esize = self.element_size();
            let x_strides = xb.layout.strides();
            let dim_stride = nonempty_stride(x_strides, d);
            let src_strides: Vec<isize> = (0..i_shape.len())
                .map(|k| {
                    if k == d {
                        0
                    } else {
                        nonempty_stride(x_strides, k)
                    }
                })
                .collect();
            let out_strides: Vec<isize> = ob.layout.strides().iter().map(|&s| s as isize).collect();
            dispatch(
                self.dtype(),
                Pick {
                    shape: &i_shape,
                    strides: [out_strides, src_strides],
                    block: 1,
                    out: SharedPtr(guards.write_ptr(&ob.storage)),
                    src: SharedPtr(
                        guards
                            .read_ptr(&xb.storage)
                            .wrapping_add(xb.layout.offset() * esize)
                            as *mut u8,
                    ),
                    parallel: true,
                    pick: |k: usize, _: &[usize]| idx[k] as isize * dim_stride,
                },
            );
            drop(guards);
            Ok(out)
        })?;
        index_grad::gather(&ctx, self, dim, index, &out)?;
        Ok(out)
    }

    /// A contiguous copy of `self` with `src`'s values added at the positions `index` names
    /// along `dim` (`result[index[i][j]][j] += src[i][j]` for `dim == 0`); repeated indices
    /// accumulate. `index` (i64 or i32) has as many dimensions as `self` and `src`, and is no
    /// larger than `src` anywhere nor than `self` outside `dim`; `src` has `self`'s dtype.
    ///
    /// ```
    /// use strata_core::Tensor;
    /// let x = Tensor::from_vec(vec![0i64; 3], &[3])?;
    /// let i = Tensor::from_vec(vec![2i64, 0, 2], &[3])?;
    /// let src = Tensor::from_vec(vec![1i64, 2, 3], &[3])?;
    /// assert_eq!(x.scatter_add(0, &i, &src)?.to_vec::<i64>()?, vec![2, 0, 4]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn scatter_add(&self, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("scatter_add");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            let op = ctx.op();
            let x_shape = self.shape();
            let d = dim_arg(op, dim, x_shape.len())?;
            let (i_shape, s_shape) = (index.shape(), src.shape());
            let empty = index.numel() == 0;
            if !empty {
                check_index_dtype(op, index)?;
            }
            same_dtype(op, "src", self.dtype(), src.dtype())?;
            // As PyTorch, an empty index is not checked further: the result is a copy of self.
            if !empty {
                let shapes = vec![x_shape.clone(), i_shape.clone(), s_shape.clone()];
                let n = nonempty_dim(index);
                if nonempty_dim(self) != n || nonempty_dim(src) != n {
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
            let idx = if empty {
                Vec::new()
            } else {
                index_values(op, index, d, nonempty_size(&x_shape, d))?
            };
            let result =
                Tensor::uninit_with_layout(&ctx, Layout::contiguous(&x_shape, 0), self.dtype())?;
            let (xb, sb, rb) = (self.body(), src.body(), result.body());
            let guards = lock_storages(&[
                (&rb.storage, Access::Write),
                (&xb.storage, Access::Read),
                (&sb.storage, Access::Read),
            ]);
            let esize = self.element_size();
            let dst = guards.write_ptr(&rb.storage);
            let r_strides = rb.layout.strides();
            let operands = [
                Operand {
                    ptr: dst,
                    strides: r_strides.to_vec(),
                    dtype: self.dtype(),
                },
                Operand {
                    ptr: guards
                        .read_ptr(&xb.storage)
                        .wrapping_add(xb.layout.offset() * esize)
                        as *mut u8,
                    strides: xb.layout.strides().to_vec(),
                    dtype: self.dtype(),
                },
            ];
            let perm = iteration_order(
                &x_shape,
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
            let plan = Plan::new(&x_shape, &operands, &perm, true);
            // SAFETY: the result is fresh and write-locked, self is read-locked and its layout
            // lies within its storage; they share no memory, so the copy may run in parallel.
            unsafe { kernels::copy(&plan) };
            if !empty {
                let s_strides = sb.layout.strides();
                let walk_src: Vec<isize> = (0..i_shape.len())
                    .map(|k| nonempty_stride(s_strides, k))
                    .collect();
                let walk_dst: Vec<isize> = (0..i_shape.len())
                    .map(|k| {
                        if k == d {
                            0
                        } else {
                            nonempty_stride(r_strides, k)
                        }
                    })
                    .collect();
                dispatch(
                    self.dtype(),
                    ScatterAdd {
                        shape: &i_shape,
                        strides: [walk_src, walk_dst],
                        src: SharedPtr(
                            guards
                                .read_ptr(&sb.storage)
                                .wrapping_add(sb.layout.offset() * esize)
                                as *mut u8,
                        ),
                        dst: SharedPtr(dst),
                        idx: &idx,
                        dim_stride: nonempty_stride(r_strides, d),
                    },
                );
            }
            drop(guards);
            Ok(result)
        })?;
        index_grad::scatter_add(&ctx, self, dim, index, src, &out)?;
        Ok(out)
    }

    /// Joins `tensors` along `dim`. Their dtypes promote as in an element-wise op; their shapes
    /// must match except along `dim`; 1-d tensors of shape `[0]` are left out whatever their
    /// shape (PyTorch's legacy rule). The result is contiguous, or channels-last when every
    /// input is.
    ///
    /// ```
    /// use strata_core::{Tensor, DType};
    /// let a = Tensor::ones(&[1, 2], DType::I32)?;
    /// let b = Tensor::zeros(&[2, 2], DType::F32)?;
    /// let c = Tensor::cat(&[&a, &b], 0)?;
    /// assert_eq!((c.shape(), c.dtype()), (vec![3, 2], DType::F32));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn cat(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        let ctx = OpContext::enter("cat");
        let out =
            crate::autograd::mode::internal(|| -> Result<Tensor> { cat_in(&ctx, tensors, dim) })?;
        index_grad::cat(&ctx, tensors, dim, false, &out)?;
        Ok(out)
    }

    /// Joins equally shaped `tensors` along a new dimension `dim` (`0..=ndim`, negative counting
    /// from the end of the result's dimensions). Dtypes promote as in [`Tensor::cat`].
    ///
    /// ```
    /// use strata_core::{Tensor, DType};
    /// let a = Tensor::zeros(&[2, 3], DType::F32)?;
    /// assert_eq!(Tensor::stack(&[&a, &a], -1)?.shape(), vec![2, 3, 2]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn stack(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        let ctx = OpContext::enter("stack");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            let op = ctx.op();
            let Some(first) = tensors.first() else {
                return Err(Error::argument(
                    op,
                    "expected a non-empty list of tensors",
                    Some("pass at least one tensor"),
                ));
            };
            let shape = first.shape();
            let n = shape.len();
            let d = wrap_dim(dim, n + 1).ok_or(Error::Dim {
                op,
                dim,
                ndim: n + 1,
            })?;
            if let Some((i, t)) = tensors.iter().enumerate().find(|(_, t)| t.shape() != shape) {
                return Err(Error::shape(
                    op,
                    format!(
                        "every tensor must have the same shape, but tensor 0 has shape {shape:?} and \
                         tensor {i} has shape {:?}",
                        t.shape()
                    ),
                    vec![shape.clone(), t.shape()],
                ));
            }
            if d < n {
                // As PyTorch: join along `d`, then split `d` into [len, size] with a view, so the
                // result keeps the joined layout (channels-last included).
                let joined = cat_in(&ctx, tensors, d as i64)?;
                let mut sizes = shape.clone();
                sizes.insert(d, tensors.len());
                let jl = joined.layout();
                let strides =
                    compute_stride(jl.sizes(), jl.strides(), &sizes).ok_or_else(|| {
                        Error::Unsupported {
                            op,
                            message: "internal: the joined result cannot be viewed as the stack"
                                .into(),
                        }
                    })?;
                return Ok(Tensor::from_parts(
                    joined.body().storage,
                    Layout::new(sizes, strides, 0),
                    joined.dtype(),
                    None,
                ));
            }
            // A new last dimension: join the tensors each seen with a trailing size-1 dimension.
            let unsqueezed: Vec<Tensor> = tensors
                .iter()
                .map(|t| {
                    let l = t.layout();
                    let (mut sizes, mut strides) = (l.sizes().to_vec(), l.strides().to_vec());
                    sizes.push(1);
                    strides.push(1);
                    t.make_view(
                        op,
                        Layout::new(sizes, strides, l.offset()),
                        ViewCreation::Plain,
                    )
                })
                .collect();
            let refs: Vec<&Tensor> = unsqueezed.iter().collect();
            cat_in(&ctx, &refs, d as i64)
        })?;
        index_grad::cat(&ctx, tensors, dim, true, &out)?;
        Ok(out)
    }
}

#[cfg(test)]
#[path = "joining_tests.rs"]
mod tests;
