//! The indexed ops behind `index_select`, `gather` and `scatter_add`: their validation
//! (every index checked before anything is written) and a small strided walk that copies or
//! accumulates element by element into a destination with any strides.

use super::*;

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
            // SAFETY: `src` and `dst` point at the first elements of src and of the result,
            // both locked by the caller, the result for writing. The
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
pub(super) struct IndexSelect {
    dim: usize,
    pub(super) shape: Vec<usize>,
    indices: Vec<i64>,
}

impl IndexSelect {
    pub(super) fn infer(
        op: &'static str,
        x: &Tensor,
        dim: i64,
        index: &Tensor,
    ) -> Result<IndexSelect> {
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
    pub(super) fn execute(&self, x: &Tensor, out: &Tensor, parallel: bool) {
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
// gather and scatter_add

/// A validated `gather`: the picked dimension, the result's (the index's) shape, and the
/// checked indices in row-major order (none for an empty index).
pub(super) struct Gather {
    dim: usize,
    pub(super) shape: Vec<usize>,
    indices: Vec<i64>,
}

impl Gather {
    pub(super) fn infer(op: &'static str, x: &Tensor, dim: i64, index: &Tensor) -> Result<Gather> {
        let x_shape = x.shape();
        let d = dim_arg(op, dim, x_shape.len())?;
        let i_shape = index.shape();
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
        let indices = if empty {
            Vec::new()
        } else {
            index_values(op, index, d, nonempty_size(&x_shape, d))?
        };
        Ok(Gather {
            dim: d,
            shape: i_shape,
            indices,
        })
    }

    /// Writes the picked elements into `out` (the index's shape, `x`'s dtype) through its
    /// strides.
    pub(super) fn execute(&self, x: &Tensor, out: &Tensor, parallel: bool) {
        if self.indices.is_empty() {
            return;
        }
        let (xb, ob) = (x.body(), out.body());
        let guards = lock_storages(&[(&ob.storage, Access::Write), (&xb.storage, Access::Read)]);
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
        let idx = &self.indices;
        dispatch(
            x.dtype(),
            Pick {
                shape: &self.shape,
                strides: [out_strides, src_strides],
                block: 1,
                out: SharedPtr(
                    guards
                        .write_ptr(&ob.storage)
                        .wrapping_add(ob.layout.offset() * esize),
                ),
                src: SharedPtr(
                    guards
                        .read_ptr(&xb.storage)
                        .wrapping_add(xb.layout.offset() * esize) as *mut u8,
                ),
                parallel,
                pick: |k: usize, _: &[usize]| idx[k] as isize * dim_stride,
            },
        );
    }
}

/// A validated `scatter_add`: the dimension, the index's shape and its checked values (none
/// for an empty index).
pub(super) struct ScatterAddPlan {
    dim: usize,
    i_shape: Vec<usize>,
    indices: Vec<i64>,
}

impl ScatterAddPlan {
    pub(super) fn infer(
        op: &'static str,
        x: &Tensor,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
    ) -> Result<ScatterAddPlan> {
        let x_shape = x.shape();
        let d = dim_arg(op, dim, x_shape.len())?;
        let (i_shape, s_shape) = (index.shape(), src.shape());
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
        let indices = if empty {
            Vec::new()
        } else {
            index_values(op, index, d, nonempty_size(&x_shape, d))?
        };
        Ok(ScatterAddPlan {
            dim: d,
            i_shape,
            indices,
        })
    }

    /// Writes `x` with `src` added at the indexed positions into `result` (`x`'s shape and
    /// dtype), through its strides: a copy of `x` first unless `copy` is false (`result` is
    /// `x` itself), then the additions in row-major order of the index.
    pub(super) fn execute(&self, x: &Tensor, src: &Tensor, result: &Tensor, copy: bool) {
        let (xb, sb, rb) = (x.body(), src.body(), result.body());
        let guards = lock_storages(&[
            (&rb.storage, Access::Write),
            (&xb.storage, Access::Read),
            (&sb.storage, Access::Read),
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
            unsafe { kernels::copy(&plan) };
        }
        if self.indices.is_empty() {
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
        dispatch(
            x.dtype(),
            ScatterAdd {
                shape: &self.i_shape,
                strides: [walk_src, walk_dst],
                src: SharedPtr(
                    guards
                        .read_ptr(&sb.storage)
                        .wrapping_add(sb.layout.offset() * esize) as *mut u8,
                ),
                dst: SharedPtr(dst),
                idx: &self.indices,
                dim_stride: nonempty_stride(r_strides, d),
            },
        );
    }
}
