//! What the fused recurrent cells ([`super::lstm_cell`], [`super::gru_cell`]) share: row
//! operands held as integers (so the parallel closures are `Send`), the split of rows across
//! strata's pool, chunked loads and stores of [`LANE`] columns, and the sigmoid as the
//! sigmoid kernel evaluates it.

use super::chunk::avx2;
use super::math::Float;
use super::threads::spread;
use crate::backend::args::RowsAt;
use crate::dtype::DType;

/// One pass of a fused cell over its rows: its operands, and the work on one row.
pub(super) trait RowPass: Sync {
    /// Computes row `r` in `T` (implementations are `#[inline(always)]`, so that the
    /// AVX2 copy of [`run_rows`] compiles them with AVX2 and FMA).
    ///
    /// # Safety
    /// Row `r` of every operand lies inside the extents the caller gave; no other thread
    /// touches the row's written elements.
    unsafe fn row<T: Float>(&self, r: usize);
}

/// Implements [`RowPass`] for each operand struct by its `#[inline(always)]` row function
/// (`unsafe fn(&Self, usize)`, generic over the compute type).
macro_rules! row_passes {
    ($($pass:ty => $row:ident),* $(,)?) => {
        $(
            impl $crate::backend::cpu::cell_rows::RowPass for $pass {
                #[inline(always)]
                unsafe fn row<T: $crate::backend::cpu::math::Float>(&self, r: usize) {
                    // SAFETY: forwarded.
                    unsafe { $row::<T>(self, r) }
                }
            }
        )*
    };
}
pub(super) use row_passes;

/// Runs `pass` on each of `rows` rows of `hidden` units in `dtype` across strata's pool,
/// with AVX2 and FMA where the CPU has them; false (nothing written) for a dtype other than
/// f32 and f64.
///
/// # Safety
/// As [`RowPass::row`], for every `r < rows`, concurrently for different rows.
pub(super) unsafe fn run_rows<P: RowPass>(
    pass: &P,
    dtype: DType,
    rows: usize,
    hidden: usize,
) -> bool {
    let row = match dtype {
        DType::F32 => row_for_cpu::<P, f32>(),
        DType::F64 => row_for_cpu::<P, f64>(),
        _ => return false,
    };
    // SAFETY: `row` runs only on a CPU with the features it was built for, and the rest is
    // forwarded from the caller.
    unsafe { in_parallel(rows, hidden, |r| row(pass, r)) };
    true
}

/// The build of `pass.row::<T>` this CPU runs, chosen once per call: with AVX-512F, with
/// AVX2 and FMA, or the plain one. The function it returns has [`RowPass::row`]'s contract.
fn row_for_cpu<P: RowPass, T: Float>() -> unsafe fn(&P, usize) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return row_avx512::<P, T>;
        }
        return row_avx::<P, T>;
    }
    row_plain::<P, T>
}

/// The row without extra target features.
///
/// # Safety
/// As [`RowPass::row`].
unsafe fn row_plain<P: RowPass, T: Float>(pass: &P, r: usize) {
    // SAFETY: forwarded.
    unsafe { pass.row::<T>(r) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx<P: RowPass, T: Float>(pass: &P, r: usize) {
    // SAFETY: forwarded.
    unsafe { pass.row::<T>(r) }
}

/// The row with AVX-512F as well: a chunk of [`LANE`] f32 columns is one register, and
/// twice as many registers hold a row's chunks without spilling. The operations are the
/// same, lane for lane, so the results are too.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_avx512<P: RowPass, T: Float>(pass: &P, r: usize) {
    // SAFETY: forwarded.
    unsafe { pass.row::<T>(r) }
}

/// One build of a pass's row function.
#[cfg(test)]
pub(super) type RowBuild<P> = unsafe fn(&P, usize);

/// Every build of the row this CPU runs, the plain one first, for tests that hold the
/// vector builds to the plain one's bits.
#[cfg(test)]
pub(super) fn row_builds<P: RowPass, T: Float>() -> Vec<(&'static str, RowBuild<P>)> {
    /// The row as compiled for the baseline instruction set.
    unsafe fn plain<P: RowPass, T: Float>(pass: &P, r: usize) {
        // SAFETY: forwarded.
        unsafe { pass.row::<T>(r) }
    }
    let mut all: Vec<(&'static str, RowBuild<P>)> = vec![("plain", plain::<P, T>)];
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        all.push(("AVX2", row_avx::<P, T>));
        if std::arch::is_x86_feature_detected!("avx512f") {
            all.push(("AVX-512F", row_avx512::<P, T>));
        }
    }
    all
}

/// Columns computed together.
pub(super) const LANE: usize = 16;

/// State elements per parallel task: each costs five activations, so tasks are smaller than
/// the element-wise kernels' grain.
pub(super) const STATE_PER_TASK: usize = 4096;

/// A row operand as integers, so the parallel closures are `Send`; `addr` 0 is absent.
#[derive(Clone, Copy)]
pub(super) struct Rows {
    pub(super) addr: usize,
    pub(super) stride: usize,
}

impl Rows {
    pub(super) fn present(self) -> bool {
        self.addr != 0
    }

    /// Element `col` of row `row`, as a `T` pointer.
    #[inline(always)]
    pub(super) fn at<T>(self, row: usize, col: usize) -> *mut T {
        (self.addr as *mut T).wrapping_add(row * self.stride + col)
    }
}

/// A bias: a gate row of contiguous elements read as row 0, or absent when null.
pub(super) fn bias(p: *const u8) -> Rows {
    Rows {
        addr: p as usize,
        stride: 0,
    }
}

/// Converts a row operand's pointer to an address.
pub(super) fn rows<P>(at: RowsAt<*const P>) -> Rows {
    Rows {
        addr: at.ptr as usize,
        stride: at.row_stride,
    }
}

/// Converts a written row operand's pointer to an address.
pub(super) fn rows_mut<P>(at: RowsAt<*mut P>) -> Rows {
    Rows {
        addr: at.ptr as usize,
        stride: at.row_stride,
    }
}

/// Runs `row(r)` for every `r < rows`, in tasks of about [`STATE_PER_TASK`] state elements
/// on strata's pool (on the calling thread when there is one task).
///
/// # Safety
/// `row(r)` must be safe to call for every `r < rows`, concurrently for different rows.
unsafe fn in_parallel(rows: usize, hidden: usize, row: impl Fn(usize) + Sync) {
    let per_task = (STATE_PER_TASK / hidden.max(1)).max(1);
    let tasks = rows.div_ceil(per_task);
    let run = |task: usize| {
        for r in task * per_task..((task + 1) * per_task).min(rows) {
            row(r);
        }
    };
    if tasks <= 1 {
        (0..tasks).for_each(run);
    } else {
        spread(tasks, &run);
    }
}

/// Reads `n ≤ LANE` elements from `rows`' row `r` at column `col` into `into`, added to what
/// is there (nothing for an absent operand).
///
/// # Safety
/// A present operand's row `r` holds columns `col..col + n`, readable.
#[inline(always)]
pub(super) unsafe fn add_from<T: Float>(
    into: &mut [T; LANE],
    rows: Rows,
    r: usize,
    col: usize,
    n: usize,
) {
    if !rows.present() {
        return;
    }
    let src = rows.at::<T>(r, col) as *const T;
    if n == LANE {
        // A whole chunk: a loop of constant length, which compiles to vector loads that
        // keep the chunk in registers (the counted loop below goes through memory).
        // SAFETY: the caller's contract, `n` being `LANE`.
        let whole = unsafe { std::ptr::read_unaligned(src as *const [T; LANE]) };
        for (v, w) in into.iter_mut().zip(whole) {
            *v = v.add(w);
        }
        return;
    }
    for (k, v) in into.iter_mut().enumerate().take(n) {
        // SAFETY: `k < n`; the caller's contract.
        *v = v.add(unsafe { *src.add(k) });
    }
}

/// Reads `n ≤ LANE` elements of a present operand, as [`add_from`] into zeros.
///
/// # Safety
/// As [`add_from`].
#[inline(always)]
pub(super) unsafe fn load<T: Float>(rows: Rows, r: usize, col: usize, n: usize) -> [T; LANE] {
    let mut v = [T::ZERO; LANE];
    // SAFETY: forwarded.
    unsafe { add_from(&mut v, rows, r, col, n) };
    v
}

/// Writes the first `n` elements of `from` to `rows`' row `r` at column `col`.
///
/// # Safety
/// Row `r` holds columns `col..col + n`, writable by this thread alone.
#[inline(always)]
pub(super) unsafe fn store<T: Float>(from: &[T; LANE], rows: Rows, r: usize, col: usize, n: usize) {
    let dst = rows.at::<T>(r, col);
    if n == LANE {
        // A whole chunk in one store of constant size (see `add_from`).
        // SAFETY: the caller's contract, `n` being `LANE`.
        unsafe { std::ptr::write_unaligned(dst as *mut [T; LANE], *from) };
        return;
    }
    for (k, v) in from.iter().enumerate().take(n) {
        // SAFETY: `k < n`; the caller's contract.
        unsafe { *dst.add(k) = *v };
    }
}

/// `1 / (1 + e^-x)`, as the sigmoid kernel evaluates it.
#[inline(always)]
pub(super) fn sigmoid<T: Float>(x: T) -> T {
    T::ONE.div(T::ONE.add(x.neg().exp_vectorisable()))
}
