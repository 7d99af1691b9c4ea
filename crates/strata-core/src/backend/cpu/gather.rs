//! The kernels of the indexed copies (`index_select`, `gather`) and of `scatter_add`: a small
//! strided walk over the output, the source and the index (read where it lies, i64 or i32)
//! that copies or accumulates element by element between operands with any strides. The op
//! layer checks every index before these run; the kernels check each again and leave a visit
//! alone whose index is out of range.

use std::ops::Range;

use rayon::prelude::*;

use super::threads::{pool, GRAIN_SIZE};
use crate::backend::args::{IndexOperand, PickArgs, ScatterAddArgs};
use crate::dtype::{dispatch, DTypeFn, Element};
use crate::layout::checked_numel;
use crate::DType;

/// Copies `out[offs[0]] = src[offs[1] + index[offs[2]]·dim_stride]` over `args.shape`, `block`
/// consecutive elements per visit, split across strata's pool when `args.parallel` and the work
/// is large enough. A visit whose index lies outside `0..bound` writes nothing.
///
/// # Safety
/// `out`, `src` and the index point at the first elements of the output, source and index, in
/// memory that stays valid for the call (the source and index readable, the output writable).
/// For every visit the output position, the index position, and the source position plus any
/// index in `0..bound` times `dim_stride`, must address `block` elements (one for the index)
/// inside them. With `parallel`, every output element must be written by one visit only and
/// the output must share no memory with the source or the index.
pub(crate) unsafe fn pick(args: &PickArgs<'_>) {
    dispatch(args.dtype, Pick { args });
}

/// Accumulates `dst[offs[1] + index[offs[2]]·dim_stride] += src[offs[0]]` over the index's
/// `shape` in row-major order. Serial, as several elements may add into one location (repeated
/// indices accumulate in order, each add rounded to the dtype as PyTorch's CPU kernel does). A
/// visit whose index lies outside `0..bound` adds nothing.
///
/// # Safety
/// `src`, `dst` and the index point at the first elements of the source, destination and
/// index, in memory that stays valid for the call (the destination writable). Every position
/// the walk forms must address an element inside them, for any index in `0..bound`.
pub(crate) unsafe fn scatter_add(args: &ScatterAddArgs<'_>) {
    dispatch(args.dtype, ScatterAdd { args });
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

/// Visits the elements `range` (row-major positions) of `shape`, calling `f(offs)` with each
/// operand's element offset `Σ coords[d] * strides[j][d]`.
fn walk_range<const N: usize>(
    shape: &[usize],
    strides: &[Vec<isize>; N],
    range: Range<usize>,
    f: &impl Fn(&[isize; N]),
) {
    if range.is_empty() {
        return;
    }
    let nd = shape.len();
    if nd == 0 {
        f(&[0; N]);
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
        for _ in 0..n {
            f(&offs);
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
    f: impl Fn(&[isize; N]) + Sync,
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

/// An index element: i64 or i32, widened to i64.
trait IndexElement: Copy + Into<i64> {}
impl IndexElement for i64 {}
impl IndexElement for i32 {}

/// Where a walk finds its index and what it makes of one (see [`IndexOperand`]).
#[derive(Clone, Copy)]
struct IndexReader {
    ptr: SharedPtr,
    bound: u64,
    dim_stride: isize,
}

impl IndexReader {
    fn new(index: &IndexOperand<'_>, dim_stride: isize) -> IndexReader {
        IndexReader {
            ptr: SharedPtr(index.ptr as *mut u8),
            bound: index.bound as u64,
            dim_stride,
        }
    }

    /// The index `offset` elements from the first, as an element offset along the indexed
    /// dimension (`index·dim_stride`), or `None` when it lies outside `0..bound`.
    ///
    /// # Safety
    /// The index holds `I` elements and `offset` addresses one of them, readable.
    unsafe fn at<I: IndexElement>(self, offset: isize) -> Option<isize> {
        // SAFETY: forwarded from the caller.
        let i: i64 = unsafe { (self.ptr.get() as *const I).offset(offset).read() }.into();
        (i >= 0 && (i as u64) < self.bound).then(|| i as isize * self.dim_stride)
    }
}

/// The three operands' strides over the walk, in the order output/source, the other, index.
fn walk_strides(first: &[isize], second: &[isize], index: &[isize]) -> [Vec<isize>; 3] {
    [first.to_vec(), second.to_vec(), index.to_vec()]
}

/// The copy behind `index_select` and `gather` (see [`pick`]), in the element type `T`.
struct Pick<'a, 'b> {
    args: &'a PickArgs<'b>,
}

impl DTypeFn for Pick<'_, '_> {
    type Output = ();
    fn call<T: Element>(self) {
        match self.args.index.dtype {
            DType::I64 => self.run::<T, i64>(),
            DType::I32 => self.run::<T, i32>(),
            // The op refuses an index of another dtype: nothing is read or written.
            _ => {}
        }
    }
}

impl Pick<'_, '_> {
    fn run<T: Element, I: IndexElement>(&self) {
        let a = self.args;
        let strides = walk_strides(a.out_strides, a.src_strides, a.index.strides);
        let (out, src) = (SharedPtr(a.out), SharedPtr(a.src as *mut u8));
        let index = IndexReader::new(&a.index, a.dim_stride);
        let block = a.block;
        walk(a.shape, &strides, a.parallel, block, |offs| {
            // SAFETY: the caller's contract (see [`pick`]): `offs[2]` is an index position,
            // `offs[0]` an output position and `offs[1]` plus an index in `0..bound` times
            // `dim_stride` a source position, each with `block` elements consecutive in both
            // tensors; an index outside `0..bound` is skipped. `copy` allows the ranges to
            // overlap (an `out=` tensor may share a storage with the source).
            unsafe {
                let Some(along) = index.at::<I>(offs[2]) else {
                    return;
                };
                let o = (out.get() as *mut T).offset(offs[0]);
                let s = (src.get() as *const T).offset(offs[1] + along);
                if block == 1 {
                    o.write(s.read());
                } else {
                    std::ptr::copy(s, o, block);
                }
            }
        });
    }
}

/// The accumulation behind `scatter_add` (see [`scatter_add`]), in the element type `T`.
struct ScatterAdd<'a, 'b> {
    args: &'a ScatterAddArgs<'b>,
}

impl DTypeFn for ScatterAdd<'_, '_> {
    type Output = ();
    fn call<T: Element>(self) {
        match self.args.index.dtype {
            DType::I64 => self.run::<T, i64>(),
            DType::I32 => self.run::<T, i32>(),
            // The op refuses an index of another dtype: nothing is read or written.
            _ => {}
        }
    }
}

impl ScatterAdd<'_, '_> {
    fn run<T: Element, I: IndexElement>(&self) {
        let a = self.args;
        let strides = walk_strides(a.src_strides, a.dst_strides, a.index.strides);
        let (src, dst) = (SharedPtr(a.src as *mut u8), SharedPtr(a.dst));
        let index = IndexReader::new(&a.index, a.dim_stride);
        walk(a.shape, &strides, false, 1, |offs| {
            // SAFETY: the caller's contract (see [`scatter_add`]): `offs[0]` is a source
            // position, `offs[2]` an index position, and `offs[1]` plus an index in `0..bound`
            // times `dim_stride` a destination position; an index outside `0..bound` is
            // skipped.
            unsafe {
                let Some(along) = index.at::<I>(offs[2]) else {
                    return;
                };
                let at = (dst.get() as *mut T).offset(offs[1] + along);
                at.write(
                    at.read()
                        .add((src.get() as *const T).offset(offs[0]).read()),
                );
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(values: &[i32], strides: &'static [isize], bound: usize) -> IndexOperand<'static> {
        IndexOperand {
            ptr: values.as_ptr() as *const u8,
            dtype: DType::I32,
            strides,
            bound,
        }
    }

    #[test]
    fn pick_reads_the_index_through_its_strides_and_skips_out_of_range_visits() {
        let src = [10.0f32, 11.0, 12.0];
        let mut out = [-1.0f32; 4];
        // Every other element of the index; 7 and -1 lie outside `0..3`.
        let idx = [2i32, 0, 7, 0, -1, 0, 1, 0];
        let args = PickArgs {
            dtype: DType::F32,
            shape: &[4],
            out_strides: &[1],
            src_strides: &[0],
            block: 1,
            out: out.as_mut_ptr() as *mut u8,
            src: src.as_ptr() as *const u8,
            parallel: false,
            index: index(&idx, &[2], 3),
            dim_stride: 1,
        };
        // SAFETY: four visits of a 4-element output, an 8-element index read at 0, 2, 4, 6,
        // and a 3-element source read at an index in 0..3.
        unsafe { pick(&args) };
        assert_eq!(out, [12.0, -1.0, -1.0, 11.0]);
    }

    #[test]
    fn scatter_add_accumulates_repeats_in_order_and_skips_out_of_range_visits() {
        let src = [1i64, 2, 3, 4];
        let mut dst = [0i64; 2];
        let idx = [1i32, 1, 2, 0];
        let args = ScatterAddArgs {
            dtype: DType::I64,
            shape: &[4],
            src_strides: &[1],
            dst_strides: &[0],
            src: src.as_ptr() as *const u8,
            dst: dst.as_mut_ptr() as *mut u8,
            index: index(&idx, &[1], 2),
            dim_stride: 1,
        };
        // SAFETY: four visits of a 4-element source and index, adding into a 2-element
        // destination at an index in 0..2.
        unsafe { scatter_add(&args) };
        assert_eq!(dst, [4, 3]);
    }
}
