//! The fast path of `sum` and `mean` for a contiguous floating input (f16, bf16, f32, f64)
//! reduced over one run of adjacent dimensions: the input is `[outer, len, inner]` and the result
//! `[outer, inner]`. Rows (`inner == 1`) are summed in 8 independent f64 lanes; with
//! `inner > 1` a vector of `inner` f64 accumulators takes four contiguous rows at a time, so
//! both the last and the first dimension stream memory. Work is split over strata's pool
//! by `outer` and, when `outer` is small, by column blocks of `inner`. The loops are also
//! built with AVX2 and chosen at run time where the CPU has it.

use rayon::prelude::*;

use super::threads::{pool, GRAIN_SIZE};
use crate::backend::args::DenseSumArgs;
use crate::backend::kernel::sums_densely;
use crate::dtype::DType;

/// An element type the fast path reads, widened to f64 as it is added.
trait Summand: Copy + Send + Sync + 'static {
    fn wide(self) -> f64;
}
impl Summand for f32 {
    #[inline(always)]
    fn wide(self) -> f64 {
        self as f64
    }
}
impl Summand for half::bf16 {
    #[inline(always)]
    fn wide(self) -> f64 {
        f64::from(f32::from_bits(u32::from(self.to_bits()) << 16))
    }
}
impl Summand for half::f16 {
    #[inline(always)]
    fn wide(self) -> f64 {
        f64::from(self.to_f32())
    }
}
impl Summand for f64 {
    #[inline(always)]
    fn wide(self) -> f64 {
        self
    }
}

/// Sums one row in 8 independent f64 lanes.
#[inline(always)]
fn sum_row_body<T: Summand>(x: &[T]) -> f64 {
    let mut lanes = [0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v.wide();
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|v| v.wide()).sum();
    lanes.iter().sum::<f64>() + tail
}

/// Rows added into the accumulators per pass: each pass loads and stores every
/// accumulator once for this many rows.
const ROWS_PER_PASS: usize = 4;

/// Adds the `len` rows of one `[len, inner]` block, columns `cols`, into `acc`: the sum of
/// each group of [`ROWS_PER_PASS`] rows is formed in registers and added to `acc` once.
#[inline(always)]
fn sum_columns_body<T: Summand>(
    x: &[T],
    inner: usize,
    cols: std::ops::Range<usize>,
    acc: &mut [f64],
) {
    acc.fill(0.0);
    let mut rows = x.chunks_exact(inner * ROWS_PER_PASS);
    for group in &mut rows {
        let r: [&[T]; ROWS_PER_PASS] =
            std::array::from_fn(|k| &group[k * inner + cols.start..k * inner + cols.end]);
        for (i, a) in acc.iter_mut().enumerate() {
            *a += (r[0][i].wide() + r[1][i].wide()) + (r[2][i].wide() + r[3][i].wide());
        }
    }
    for row in rows.remainder().chunks_exact(inner) {
        for (a, &v) in acc.iter_mut().zip(&row[cols.clone()]) {
            *a += v.wide();
        }
    }
}

/// [`sum_row_body`], built with AVX2 where the CPU has it.
fn sum_row<T: Summand>(x: &[T]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if super::chunk::avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { sum_row_avx2(x) };
    }
    sum_row_body(x)
}

/// [`sum_columns_body`], built with AVX2 where the CPU has it.
fn sum_columns<T: Summand>(x: &[T], inner: usize, cols: std::ops::Range<usize>, acc: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if super::chunk::avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { sum_columns_avx2(x, inner, cols, acc) };
    }
    sum_columns_body(x, inner, cols, acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum_row_avx2<T: Summand>(x: &[T]) -> f64 {
    sum_row_body(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum_columns_avx2<T: Summand>(
    x: &[T],
    inner: usize,
    cols: std::ops::Range<usize>,
    acc: &mut [f64],
) {
    sum_columns_body(x, inner, cols, acc)
}

/// Column blocks small enough that their accumulators stay in L1.
const COLUMN_BLOCK: usize = 2048;

fn run<T: Summand>(x: &[T], outer: usize, len: usize, inner: usize, out: &mut [f64]) {
    let slab = len * inner;
    let serial = x.len() < GRAIN_SIZE;
    if inner == 1 {
        let body = |(o, r): (usize, &mut f64)| *r = sum_row(&x[o * slab..(o + 1) * slab]);
        if serial || outer == 1 {
            out.iter_mut().enumerate().for_each(body);
        } else {
            pool().install(|| out.par_iter_mut().enumerate().for_each(body));
        }
        return;
    }
    // Units of work: (outer index, column block).
    // Enough units that every thread of the pool gets several even when `outer` is 1 (with
    // one unit per thread, a thread that wakes late finds nothing left to take).
    let threads = pool().current_num_threads();
    let width = if outer >= 4 * threads {
        COLUMN_BLOCK
    } else {
        (inner.div_ceil(4 * threads).next_multiple_of(64)).clamp(64, COLUMN_BLOCK)
    };
    let blocks = inner.div_ceil(width);
    let body = |(u, acc): (usize, &mut [f64])| {
        let (o, b) = (u / blocks, u % blocks);
        let start = b * width;
        let cols = start..(start + width).min(inner);
        sum_columns(&x[o * slab..(o + 1) * slab], inner, cols, acc);
    };
    // `out` is [outer, inner]; cut it into the same units.
    let mut units: Vec<&mut [f64]> = Vec::with_capacity(outer * blocks);
    for row in out.chunks_mut(inner) {
        units.extend(row.chunks_mut(width));
    }
    if serial || units.len() == 1 {
        units.into_iter().enumerate().for_each(body);
    } else {
        pool().install(|| units.into_par_iter().enumerate().for_each(body));
    }
}

/// Sums `outer` contiguous `[len, inner]` blocks of a floating dtype ([`sums_densely`])
/// starting at `args.input` over their `len` dimension, into the `outer·inner` f64 values at
/// `args.out` (`[outer, inner]`); false (nothing written) for another dtype.
///
/// # Safety
/// `args.input` must point to `outer·len·inner` readable elements of the dtype that nothing
/// writes during the call, and `args.out` to `outer·inner` writable f64 elements (aligned)
/// that nothing else touches.
pub(crate) unsafe fn sum_blocks(args: &DenseSumArgs) -> bool {
    let DenseSumArgs {
        dtype,
        input: base,
        outer,
        len,
        inner,
        out,
    } = *args;
    if !sums_densely(dtype) {
        return false;
    }
    // SAFETY: the caller's promise: `out` addresses `outer·inner` f64 elements only we touch.
    let out = unsafe { std::slice::from_raw_parts_mut(out as *mut f64, outer * inner) };
    out.fill(0.0);
    let n = outer * len * inner;
    /// Sums the blocks as elements of `T`.
    ///
    /// # Safety
    /// As [`sum_blocks`], `T` being `dtype`'s type.
    unsafe fn typed<T: Summand>(base: *const u8, n: usize, dims: [usize; 3], out: &mut [f64]) {
        // SAFETY: forwarded from the caller.
        let x = unsafe { std::slice::from_raw_parts(base as *const T, n) };
        run(x, dims[0], dims[1], dims[2], out)
    }
    let dims = [outer, len, inner];
    // SAFETY: forwarded from the caller; each arm reads the dtype's own type.
    unsafe {
        match dtype {
            DType::F16 => typed::<half::f16>(base, n, dims, out),
            DType::BF16 => typed::<half::bf16>(base, n, dims, out),
            DType::F32 => typed::<f32>(base, n, dims, out),
            DType::F64 => typed::<f64>(base, n, dims, out),
            _ => return false,
        }
    }
    true
}
