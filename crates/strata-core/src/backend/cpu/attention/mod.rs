//! The fused ("flash") attention kernels: softmax(q·kᵀ·scale + mask)·v computed one block of
//! query rows against one block of keys at a time, with an online softmax (a running row
//! maximum and sum rescale what has been accumulated when a larger score arrives), so that
//! no thread ever holds more than one `q_block × kv_block` tile of scores. The forward saves
//! only the output and each row's log-sum-exp; the backward recomputes each tile's
//! probabilities from them. Tiles are multiplied by the `gemm` crate on one thread each;
//! the threads share the work by (batch, head, query block) forward and by (batch,
//! key/value head) backward, so that each gradient row is written by one thread only.
//!
//! f32 and f64 are read and written where they lie; f16 and bf16 are widened to f32 in the
//! thread's scratch first, and the results rounded once.

mod backward;
mod forward;
mod rows;

use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Sub};

use ::gemm::Parallelism;
use half::{bf16, f16};
use rayon::prelude::*;

use super::math::Float;
use super::threads::pool;
use crate::backend::attention::{
    AttentionArgs, AttentionBackwardArgs, AttentionProblem, HeadOperand, MaskOperand,
};
use crate::DType;

/// The compute types (f32, also for f16 and bf16, and f64): [`Float`] with arithmetic.
pub(super) trait Acc:
    Float
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + AddAssign
    + MulAssign
{
    /// Negative infinity: a masked score.
    const NEG_INF: Self;
    /// Whether this is NaN.
    fn is_nan_value(self) -> bool;
}

impl Acc for f32 {
    const NEG_INF: f32 = f32::NEG_INFINITY;
    #[inline(always)]
    fn is_nan_value(self) -> bool {
        self.is_nan()
    }
}

impl Acc for f64 {
    const NEG_INF: f64 = f64::NEG_INFINITY;
    #[inline(always)]
    fn is_nan_value(self) -> bool {
        self.is_nan()
    }
}

/// The fused forward.
///
/// # Safety
/// As for [`crate::backend::Backend::attention_forward`].
pub(crate) unsafe fn attention_forward(args: &AttentionArgs<'_>) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match AttentionProblem::compute(args.dtype) {
            DType::F64 => forward::run::<f64>(args),
            _ => forward::run::<f32>(args),
        }
    }
}

/// The fused backward.
///
/// # Safety
/// As for [`crate::backend::Backend::attention_backward`].
pub(crate) unsafe fn attention_backward(args: &AttentionBackwardArgs<'_>) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match AttentionProblem::compute(args.forward.dtype) {
            DType::F64 => backward::run::<f64>(args),
            _ => backward::run::<f32>(args),
        }
    }
}

/// A raw pointer shared by the threads of one kernel call, each of which touches only its
/// own part of what it points to.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);

// SAFETY: the kernels hand each thread disjoint slots of scratch and disjoint rows of the
// outputs; the inputs are only read.
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The pointer (a method, so that a closure captures the wrapper, not its field).
    fn get(self) -> *mut T {
        self.0
    }
}

/// The arguments of a kernel call, read by all of its threads.
struct ReadOnly<'a, T>(&'a T);

// SAFETY: the arguments are plain data and pointers that the threads only read through
// (each writes only its own part of the outputs, through `Shared`).
unsafe impl<T> Sync for ReadOnly<'_, T> {}

impl<'a, T> ReadOnly<'a, T> {
    /// The arguments (a method, so that a closure captures the wrapper, not its field).
    fn get(&self) -> &'a T {
        self.0
    }
}

/// Runs `work(item, slot)` for every item in `0..items` on `slots` threads, thread `s`
/// taking items `s, s + slots, …` (so that cheap and dear items, as under causal masking,
/// spread evenly) with slot `s` of the scratch: `slot_len` elements, zeroed first.
///
/// # Safety
/// `scratch` must address `slots · slot_len` writable elements used by nothing else, and
/// `work` must write only memory that its item owns.
unsafe fn spread<C: Acc>(
    slots: usize,
    items: usize,
    slot_len: usize,
    scratch: *mut C,
    work: impl Fn(usize, &mut [C]) + Sync,
) {
    if items == 0 || slots == 0 {
        return;
    }
    let base = Shared(scratch);
    let run = |slot: usize| {
        // SAFETY: slot `slot` is this thread's own `slot_len` elements of the scratch (the
        // caller's contract); zeroing them first makes every element a valid value.
        let buf = unsafe {
            let start = base.get().add(slot * slot_len);
            std::ptr::write_bytes(start, 0, slot_len);
            std::slice::from_raw_parts_mut(start, slot_len)
        };
        let mut item = slot;
        while item < items {
            work(item, buf);
            item += slots;
        }
    };
    if slots <= 1 {
        run(0);
    } else {
        pool().install(|| (0..slots).into_par_iter().for_each(run));
    }
}

/// A row-major matrix of the compute type: row `i` starts `i·stride` elements from `ptr`,
/// its elements contiguous.
#[derive(Clone, Copy)]
struct Rows<C> {
    ptr: *const C,
    stride: usize,
}

/// Row 0 of head `(b, h)` of `op`, an operand of `dtype`.
fn head_start(op: &HeadOperand, dtype: DType, b: usize, h: usize) -> *const u8 {
    op.ptr.wrapping_add(op.row_at(b, h, 0) * dtype.size())
}

/// Rows `first..first + rows` of head `(b, h)` of `op` as rows of the compute type: where
/// they lie when `dtype` is the compute type, else widened into `room` (`rows · cols`
/// elements at least).
///
/// # Safety
/// Those rows of the head, `cols` elements each, must be readable.
unsafe fn head_rows<C: Acc>(
    op: &HeadOperand,
    dtype: DType,
    (b, h, first): (usize, usize, usize),
    rows: usize,
    cols: usize,
    room: &mut [C],
) -> Rows<C> {
    let start = head_start(op, dtype, b, h).wrapping_add(first * op.row * dtype.size());
    if dtype == C::DTYPE {
        return Rows {
            ptr: start.cast(),
            stride: op.row,
        };
    }
    for i in 0..rows {
        let src = start.wrapping_add(i * op.row * dtype.size());
        // SAFETY: row `first + i` of the head is readable (the caller's contract).
        unsafe { widen(dtype, src, &mut room[i * cols..(i + 1) * cols]) };
    }
    Rows {
        ptr: room.as_ptr(),
        stride: cols,
    }
}

/// `dst.len()` contiguous elements of the half-precision `dtype` at `src`, widened.
///
/// # Safety
/// `src` must address `dst.len()` readable elements of `dtype`.
unsafe fn widen<C: Acc>(dtype: DType, src: *const u8, dst: &mut [C]) {
    let n = dst.len();
    // SAFETY: forwarded from the caller.
    unsafe {
        match dtype {
            DType::BF16 => {
                let s = std::slice::from_raw_parts(src.cast::<bf16>(), n);
                for (d, x) in dst.iter_mut().zip(s) {
                    *d = C::from_f64(f64::from(x.to_f32()));
                }
            }
            DType::F16 => {
                let s = std::slice::from_raw_parts(src.cast::<f16>(), n);
                for (d, x) in dst.iter_mut().zip(s) {
                    *d = C::from_f64(f64::from(x.to_f32()));
                }
            }
            _ => {
                let s = std::slice::from_raw_parts(src.cast::<C>(), n);
                dst.copy_from_slice(s);
            }
        }
    }
}

/// Writes `src` to `dst` as `src.len()` contiguous elements of `dtype`, each rounded once.
///
/// # Safety
/// `dst` must address `src.len()` writable elements of `dtype` that nothing else touches.
unsafe fn narrow<C: Acc>(dtype: DType, src: &[C], dst: *mut u8) {
    let n = src.len();
    // SAFETY: forwarded from the caller.
    unsafe {
        match dtype {
            DType::BF16 => {
                let d = std::slice::from_raw_parts_mut(dst.cast::<bf16>(), n);
                for (d, x) in d.iter_mut().zip(src) {
                    *d = bf16::from_f64(x.to_f64());
                }
            }
            DType::F16 => {
                let d = std::slice::from_raw_parts_mut(dst.cast::<f16>(), n);
                for (d, x) in d.iter_mut().zip(src) {
                    *d = f16::from_f64(x.to_f64());
                }
            }
            _ => std::slice::from_raw_parts_mut(dst.cast::<C>(), n).copy_from_slice(src),
        }
    }
}

/// Masks one row of scores: for query `i` of head `(b, h)`, the scores of keys `j0..` in
/// `row`. A bool mask sets the keys it does not attend to `-inf`; a floating one is added.
/// With causal masking, keys after `i` are set to `-inf`.
///
/// # Safety
/// The mask, if any, must address readable elements for every key of the row.
unsafe fn mask_row<C: Acc>(
    p: &AttentionProblem,
    mask: Option<&MaskOperand>,
    (b, h, i): (usize, usize, usize),
    j0: usize,
    row: &mut [C],
) {
    if let Some(m) = mask {
        let [sb, sh, sl, ss] = m.strides;
        let base = m
            .ptr
            .wrapping_add((b * sb + h * sh + i * sl) * m.dtype.size());
        let at = |j: usize| base.wrapping_add((j0 + j) * ss * m.dtype.size());
        // SAFETY: every key of the row is readable (the caller's contract).
        unsafe {
            match m.dtype {
                DType::Bool => {
                    for (j, x) in row.iter_mut().enumerate() {
                        if *at(j) == 0 {
                            *x = C::NEG_INF;
                        }
                    }
                }
                DType::F32 => add_row(row, |j| f64::from(*at(j).cast::<f32>())),
                DType::F64 => add_row(row, |j| *at(j).cast::<f64>()),
                DType::BF16 => add_row(row, |j| f64::from((*at(j).cast::<bf16>()).to_f32())),
                DType::F16 => add_row(row, |j| f64::from((*at(j).cast::<f16>()).to_f32())),
                _ => {}
            }
        }
    }
    if p.causal && j0 + row.len() > i + 1 {
        let first = (i + 1).saturating_sub(j0);
        row[first..].fill(C::NEG_INF);
    }
}

/// The masked scores of query rows `i0..i0 + rows` of head `(b, h)` against keys
/// `j0..j0 + cols`: `scale·q·kᵀ` into `tile` (rows `stride` apart), then each row masked by
/// [`mask_row`]. The forward and the backward both compute their scores here, so the
/// probabilities the backward recomputes are the forward's.
///
/// # Safety
/// `q` must address `rows` rows and `k` `cols` rows of `p.e` elements (each pointer with its
/// row stride), the mask every element of those rows and keys; `tile` holds `rows` rows of
/// `stride ≥ cols`.
unsafe fn score_tile<C: Acc>(
    p: &AttentionProblem,
    mask: Option<&MaskOperand>,
    (b, h, i0, j0): (usize, usize, usize, usize),
    (rows, cols): (usize, usize),
    (q, k): (Rows<C>, Rows<C>),
    tile: &mut [C],
    stride: usize,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        product(
            (rows, cols, p.e),
            tile.as_mut_ptr(),
            stride,
            false,
            (q.ptr, q.stride, 1),
            (k.ptr, 1, k.stride),
            C::from_f64(p.scale),
        );
        for r in 0..rows {
            mask_row(
                p,
                mask,
                (b, h, i0 + r),
                j0,
                &mut tile[r * stride..r * stride + cols],
            );
        }
    }
}

/// `row[j] += value(j)` for every element.
fn add_row<C: Acc>(row: &mut [C], value: impl Fn(usize) -> f64) {
    for (j, x) in row.iter_mut().enumerate() {
        *x += C::from_f64(value(j));
    }
}

/// `dst (m×n) = [dst +] alpha · lhs (m×k) · rhs (k×n)` on this thread, each operand given by
/// its pointer, row stride and column stride; `dst`'s columns are contiguous.
///
/// # Safety
/// Every element the strides address must lie in valid memory: `lhs` and `rhs` readable,
/// `dst` writable and apart from both.
#[allow(clippy::too_many_arguments)]
unsafe fn product<C: Acc>(
    (m, n, k): (usize, usize, usize),
    dst: *mut C,
    dst_rs: usize,
    accumulate: bool,
    lhs: (*const C, usize, usize),
    rhs: (*const C, usize, usize),
    alpha: C,
) {
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: forwarded from the caller. gemm computes dst := 1·dst + alpha·lhs·rhs (dst
    // not read unless `accumulate`), strides column first.
    unsafe {
        ::gemm::gemm::<C>(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            accumulate,
            lhs.0,
            lhs.2 as isize,
            lhs.1 as isize,
            rhs.0,
            rhs.2 as isize,
            rhs.1 as isize,
            C::ONE,
            alpha,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}
