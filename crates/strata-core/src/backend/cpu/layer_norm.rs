//! The fused layer norm: one pass per row for the forward (mean and variance accumulated in
//! f64, then the normalised, scaled and shifted row), one per row for the input's gradient
//! and one per column block for the weight's and bias's. Each value is rounded as the
//! composed ops round it (PyTorch's CPU kernel's formulas), so the fused and composed paths
//! agree; rows, and column blocks, run in parallel on strata's pool.

use rayon::prelude::*;

use super::threads::{pool, GRAIN_SIZE};
use crate::backend::args::{LayerNormArgs, LayerNormBackwardArgs};
use crate::dtype::DType;

/// What the kernels compute in: f32 or f64, with a fused multiply-add.
trait Real:
    Copy
    + Send
    + Sync
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + Fma
{
    const ONE: Self;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn sqrt(self) -> Self;
    fn recip(self) -> Self;
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            const ONE: Self = 1.0;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }

            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn recip(self) -> Self {
                Self::ONE / self
            }
        }
    };
}
real!(f32);
real!(f64);

impl Fma for f32 {
    /// In f64, where the product of two f32 is exact: one rounding of the sum, then the
    /// rounding to f32, as the composed `fused_mul_add` kernel computes it (and vectorisable
    /// without FMA instructions).
    #[inline(always)]
    fn fma(self, a: Self, b: Self) -> Self {
        (f64::from(self) * f64::from(a) + f64::from(b)) as f32
    }
}

impl Fma for f64 {
    #[inline(always)]
    fn fma(self, a: Self, b: Self) -> Self {
        self.mul_add(a, b)
    }
}

/// `self·a + b` rounded as the composed `fused_mul_add` kernel rounds it.
trait Fma {
    fn fma(self, a: Self, b: Self) -> Self;
}

/// Lanes of the f64 sums: independent accumulators, so that the sums vectorise.
const LANES: usize = 8;

/// `Σ f(j)` over `0..n` for two terms at once, in f64, in [`LANES`] interleaved partial sums.
#[inline(always)]
fn sums2(n: usize, f: impl Fn(usize) -> (f64, f64)) -> (f64, f64) {
    let (mut a, mut b) = ([0f64; LANES], [0f64; LANES]);
    let full = n - n % LANES;
    for c in (0..full).step_by(LANES) {
        for l in 0..LANES {
            let (p, q) = f(c + l);
            a[l] += p;
            b[l] += q;
        }
    }
    let (mut s, mut t) = (a.iter().sum::<f64>(), b.iter().sum::<f64>());
    for j in full..n {
        let (p, q) = f(j);
        s += p;
        t += q;
    }
    (s, t)
}

/// Addresses as integers, so the parallel closures are `Send`.
#[derive(Clone, Copy)]
struct Addr(usize);

/// The `cols` parameters at `ptr`, or `None` for a null pointer.
///
/// # Safety
/// A non-null `ptr` must address `cols` readable elements of `T` that nothing writes while
/// the slice lives.
unsafe fn params<'a, T>(ptr: *const u8, cols: usize) -> Option<&'a [T]> {
    // SAFETY: forwarded from the caller.
    (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr.cast(), cols) })
}

/// Rows per parallel task: about [`GRAIN_SIZE`] elements.
fn rows_per_task(cols: usize) -> usize {
    (GRAIN_SIZE / cols.max(1)).max(1)
}

/// Runs the forward.
///
/// # Safety
/// As [`crate::backend::Backend::layer_norm_forward`]: `x` and `y` address `rows·cols`
/// elements of `dtype` (readable, writable), `mean` and `rstd` `rows`, `weight` and `bias`
/// (when not null) `cols`; nothing written overlaps anything else.
pub(crate) unsafe fn forward(args: &LayerNormArgs) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match args.dtype {
            DType::F32 => forward_in::<f32>(args),
            DType::F64 => forward_in::<f64>(args),
            _ => {}
        }
    }
}

/// # Safety
/// As [`forward`], with `T` the dtype's type.
unsafe fn forward_in<T: Real>(a: &LayerNormArgs) {
    let (rows, cols) = (a.rows, a.cols);
    let (x, y) = (Addr(a.x as usize), Addr(a.y as usize));
    let (mean, rstd) = (Addr(a.mean as usize), Addr(a.rstd as usize));
    // SAFETY: non-null weight and bias address `cols` readable elements (caller).
    let (weight, bias) = unsafe { (params::<T>(a.weight, cols), params::<T>(a.bias, cols)) };
    let n = cols as f64;
    let (eps, welford) = (T::from_f64(a.eps), a.welford);
    let per_task = rows_per_task(cols);
    pool().install(|| {
        (0..rows.div_ceil(per_task))
            .into_par_iter()
            .for_each(|task| {
                let first = task * per_task;
                for r in first..(first + per_task).min(rows) {
                    // SAFETY: row `r < rows` of `x` and `y`, element `r` of `mean` and `rstd`
                    // lie inside the extents the caller gave; each task writes its own rows.
                    let (xr, yr, m, s) = unsafe {
                        (
                            std::slice::from_raw_parts((x.0 as *const T).add(r * cols), cols),
                            std::slice::from_raw_parts_mut((y.0 as *mut T).add(r * cols), cols),
                            &mut *(mean.0 as *mut T).add(r),
                            &mut *(rstd.0 as *mut T).add(r),
                        )
                    };
                    let (mu, inv) = if welford {
                        welford_moments(xr, eps)
                    } else {
                        let mean64 = sums2(cols, |j| (xr[j].to_f64(), 0.0)).0 / n;
                        let var64 = sums2(cols, |j| {
                            let d = xr[j].to_f64() - mean64;
                            (d * d, 0.0)
                        })
                        .0 / n;
                        (
                            T::from_f64(mean64),
                            (T::from_f64(var64) + eps).sqrt().recip(),
                        )
                    };
                    *m = mu;
                    *s = inv;
                    match (weight, bias) {
                        (Some(w), Some(b)) => {
                            for j in 0..cols {
                                yr[j] = ((xr[j] - mu) * inv).fma(w[j], b[j]);
                            }
                        }
                        (Some(w), None) => {
                            for j in 0..cols {
                                yr[j] = (xr[j] - mu) * inv * w[j];
                            }
                        }
                        (None, Some(b)) => {
                            for j in 0..cols {
                                yr[j] = (xr[j] - mu) * inv + b[j];
                            }
                        }
                        (None, None) => {
                            for j in 0..cols {
                                yr[j] = (xr[j] - mu) * inv;
                            }
                        }
                    }
                }
            })
    });
}

/// The mean and `1/sqrt(var + eps)` of a short row by the scalar Welford update, each step
/// rounded in `T` as PyTorch's scalar kernel (and the composed path) rounds it.
fn welford_moments<T: Real>(row: &[T], eps: T) -> (T, T) {
    let (mut m1, mut m2) = (T::from_f64(0.0), T::from_f64(0.0));
    for (k, &x) in row.iter().enumerate() {
        let delta = x - m1;
        m1 = m1 + delta / T::from_f64((k + 1) as f64);
        m2 = m2 + delta * (x - m1);
    }
    let var = m2 / T::from_f64(row.len() as f64);
    (m1, (var + eps).sqrt().recip())
}

/// Runs the backward.
///
/// # Safety
/// As [`crate::backend::Backend::layer_norm_backward`].
pub(crate) unsafe fn backward(args: &LayerNormBackwardArgs) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match args.dtype {
            DType::F32 => backward_in::<f32>(args),
            DType::F64 => backward_in::<f64>(args),
            _ => {}
        }
    }
}

/// # Safety
/// As [`backward`], with `T` the dtype's type.
unsafe fn backward_in<T: Real>(a: &LayerNormBackwardArgs) {
    let (rows, cols) = (a.rows, a.cols);
    let (x, g) = (Addr(a.x as usize), Addr(a.grad as usize));
    let (mean, rstd) = (Addr(a.mean as usize), Addr(a.rstd as usize));
    // SAFETY: a non-null weight addresses `cols` readable elements (caller).
    let weight = unsafe { params::<T>(a.weight, cols) };
    // SAFETY: `x` and `grad` hold `rows·cols` readable elements, `mean` and `rstd` `rows`,
    // which nothing writes during the call (caller).
    let (xs, gs, ms, ss) = unsafe {
        (
            std::slice::from_raw_parts(x.0 as *const T, rows * cols),
            std::slice::from_raw_parts(g.0 as *const T, rows * cols),
            std::slice::from_raw_parts(mean.0 as *const T, rows),
            std::slice::from_raw_parts(rstd.0 as *const T, rows),
        )
    };
    let per_task = rows_per_task(cols);
    if !a.dx.is_null() {
        let dx = Addr(a.dx as usize);
        let scale = T::from_f64(1.0 / cols as f64);
        let times_w = |v: T, j: usize| weight.map_or(v, |w| v * w[j]);
        pool().install(|| {
            (0..rows.div_ceil(per_task))
                .into_par_iter()
                .for_each(|task| {
                    let first = task * per_task;
                    for r in first..(first + per_task).min(rows) {
                        let (xr, gr) = (&xs[r * cols..][..cols], &gs[r * cols..][..cols]);
                        // SAFETY: row `r` of `dx` lies inside its extent; each task writes its own.
                        let dr = unsafe {
                            std::slice::from_raw_parts_mut((dx.0 as *mut T).add(r * cols), cols)
                        };
                        let (mu, inv) = (ms[r], ss[r]);
                        let (ds, db) = sums2(cols, |j| {
                            (
                                times_w(gr[j] * xr[j], j).to_f64(),
                                times_w(gr[j], j).to_f64(),
                            )
                        });
                        let (ds, db) = (T::from_f64(ds), T::from_f64(db));
                        let b = db.fma(mu, -ds) * inv * inv * inv * scale;
                        let db_scaled = -(db * inv * scale);
                        let c = (-b).fma(mu, db_scaled);
                        for j in 0..cols {
                            dr[j] = b.fma(xr[j], times_w(inv * gr[j], j)) + c;
                        }
                    }
                })
        });
    }
    if a.dweight.is_null() && a.dbias.is_null() {
        return;
    }
    // The parameters' gradients: sums over rows, each task a block of columns.
    let (dw, db) = (Addr(a.dweight as usize), Addr(a.dbias as usize));
    let block = (GRAIN_SIZE / rows.max(1)).clamp(8, cols.max(8));
    pool().install(|| {
        (0..cols.div_ceil(block)).into_par_iter().for_each(|task| {
            let (lo, hi) = (task * block, ((task + 1) * block).min(cols));
            let mut wsum = vec![0f64; hi - lo];
            let mut bsum = vec![0f64; hi - lo];
            for r in 0..rows {
                let (xr, gr) = (&xs[r * cols..][..cols], &gs[r * cols..][..cols]);
                let (inv, shift) = (ss[r], -ss[r] * ms[r]);
                for j in lo..hi {
                    wsum[j - lo] += (gr[j] * inv.fma(xr[j], shift)).to_f64();
                    bsum[j - lo] += gr[j].to_f64();
                }
            }
            for j in lo..hi {
                // SAFETY: column `j < cols` of a non-null `dweight`/`dbias` lies inside its
                // extent; each task writes its own columns.
                unsafe {
                    if dw.0 != 0 {
                        *(dw.0 as *mut T).add(j) = T::from_f64(wsum[j - lo]);
                    }
                    if db.0 != 0 {
                        *(db.0 as *mut T).add(j) = T::from_f64(bsum[j - lo]);
                    }
                }
            }
        })
    });
}
