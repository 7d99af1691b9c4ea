//! The kernels of the indexed copies (`index_select`, `gather`) and of `scatter_add`: a small
//! strided walk that copies or accumulates element by element between operands with any
//! strides. The op layer checks every index before these run.

use std::ops::Range;

use rayon::prelude::*;

use super::pool::{pool, GRAIN_SIZE};
use crate::backend::args::{PickArgs, ScatterAddArgs};
use crate::dtype::{dispatch, DTypeFn, Element};
use crate::layout::checked_numel;

/// Copies `out[k] = src[offs[1] + pick(k, coords)]` over `shape` in `dtype` (the operands'
/// common dtype): `strides` are the output's, then the source's with stride 0 along the picked
/// dimension, in elements; `pick(k, coords)` gives the element offset along it for visit `k`
/// (row-major) at `coords`. Each visit copies `block` consecutive elements. Split across
/// strata's pool when `parallel` and the work is large enough.
///
/// # Safety
/// `out` and `src` point at the first elements of the output and source, in memory that stays
/// valid for the call (the source readable, the output writable). For every visit the output
/// position and the source position plus `pick` must address `block` elements inside them.
/// With `parallel`, every output element must be written by one visit only and the output
/// must share no memory with the source.
pub(crate) unsafe fn pick(args: &PickArgs<'_>, pick: impl Fn(usize, &[usize]) -> isize + Sync) {
    dispatch(
        args.dtype,
        Pick {
            shape: args.shape,
            strides: [args.out_strides.to_vec(), args.src_strides.to_vec()],
            block: args.block,
            out: SharedPtr(args.out),
            src: SharedPtr(args.src as *mut u8),
            parallel: args.parallel,
            pick,
        },
    );
}

/// Accumulates `dst[offs[1] + idx[k] * dim_stride] += src[offs[0]]` over the index's `shape`
/// in row-major order, in `dtype`: `strides` are the source's, then the destination's with
/// stride 0 along the indexed dimension, in elements. Serial, as several elements may add into
/// one location (repeated indices accumulate in order, each add rounded to the dtype as
/// PyTorch's CPU kernel does).
///
/// # Safety
/// `src` and `dst` point at the first elements of the source and destination, in memory that
/// stays valid for the call (the destination writable). Every position the walk forms must
/// address an element inside them: `shape` fits in both, and every `idx[k]` lies in the
/// destination's indexed dimension.
pub(crate) unsafe fn scatter_add(args: &ScatterAddArgs<'_>) {
    dispatch(
        args.dtype,
        ScatterAdd {
            shape: args.shape,
            strides: [args.src_strides.to_vec(), args.dst_strides.to_vec()],
            src: SharedPtr(args.src as *mut u8),
            dst: SharedPtr(args.dst),
            idx: args.idx,
            dim_stride: args.dim_stride,
        },
    );
}

/// A raw address that the walk's closures may share across the pool's threads.
#[derive(Clone, Copy)]
pub(super) struct SharedPtr(pub(super) *mut u8);

// SAFETY: only an address. The kernels below dereference it while the op holds the storage
// locks, and run in parallel only when every element of the written tensor is written by
// exactly one iteration (its layout has no internal overlap and it shares no memory with the
// tensors read).
unsafe impl Send for SharedPtr {}
// SAFETY: as above.
unsafe impl Sync for SharedPtr {}

impl SharedPtr {
    pub(super) fn get(self) -> *mut u8 {
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
