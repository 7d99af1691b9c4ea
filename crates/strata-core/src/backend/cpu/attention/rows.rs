//! The per-row work of the online softmax, written so that it vectorises: sixteen partial
//! maxima and sums (a sum in one accumulator is a chain the compiler may not reorder), and
//! for f32 the straight-line `exp` of [`super::super::math`], compiled for AVX2 and FMA
//! where the CPU has them.

use super::Acc;
use crate::backend::cpu::chunk::avx2;
use crate::backend::cpu::math::exp_f32_with;

/// Partial results per row: element `i` lands in partial `i % LANES`.
const LANES: usize = 16;

/// What the kernels do to a row of scores.
pub(super) trait RowOps: Acc {
    /// The largest of `start` and the row's elements, NaN ignored (a NaN element still makes
    /// the row's [`RowOps::exp_sum`] NaN).
    fn row_max(row: &[Self], start: Self) -> Self;
    /// Replaces each `x` by `exp(x − shift)` and returns their sum.
    fn exp_sum(row: &mut [Self], shift: Self) -> Self;
    /// Replaces each `x` by `exp(x − shift)`.
    fn exp_shift(row: &mut [Self], shift: Self);
}

/// `exp`, fused multiply-adds or not (f64 uses the library's).
trait Exp: Acc {
    fn exp_with<const FUSED: bool>(self) -> Self;
}

impl Exp for f32 {
    #[inline(always)]
    fn exp_with<const FUSED: bool>(self) -> f32 {
        exp_f32_with::<FUSED>(self)
    }
}

impl Exp for f64 {
    #[inline(always)]
    fn exp_with<const FUSED: bool>(self) -> f64 {
        self.exp()
    }
}

#[inline(always)]
fn max_body<C: Acc>(row: &[C], start: C) -> C {
    let mut part = [start; LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (p, &x) in part.iter_mut().zip(c) {
            if x > *p {
                *p = x;
            }
        }
    }
    part.iter()
        .chain(rest)
        .fold(start, |m, &x| if x > m { x } else { m })
}

#[inline(always)]
fn exp_sum_body<C: Exp, const FUSED: bool>(row: &mut [C], shift: C) -> C {
    let mut part = [C::ZERO; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (p, x) in part.iter_mut().zip(c.iter_mut()) {
            *x = (*x - shift).exp_with::<FUSED>();
            *p += *x;
        }
    }
    let mut total = C::ZERO;
    for x in chunks.into_remainder() {
        *x = (*x - shift).exp_with::<FUSED>();
        total += *x;
    }
    part.iter().fold(total, |s, &p| s + p)
}

#[inline(always)]
fn exp_shift_body<C: Exp, const FUSED: bool>(row: &mut [C], shift: C) {
    for x in row.iter_mut() {
        *x = (*x - shift).exp_with::<FUSED>();
    }
}

#[cfg(target_arch = "x86_64")]
mod wide {
    use super::*;

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn row_max(row: &[f32], start: f32) -> f32 {
        max_body(row, start)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn exp_sum(row: &mut [f32], shift: f32) -> f32 {
        exp_sum_body::<f32, true>(row, shift)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn exp_shift(row: &mut [f32], shift: f32) {
        exp_shift_body::<f32, true>(row, shift)
    }
}

impl RowOps for f32 {
    fn row_max(row: &[f32], start: f32) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if avx2() {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { wide::row_max(row, start) };
        }
        max_body(row, start)
    }

    fn exp_sum(row: &mut [f32], shift: f32) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if avx2() {
            // SAFETY: as above.
            return unsafe { wide::exp_sum(row, shift) };
        }
        exp_sum_body::<f32, false>(row, shift)
    }

    fn exp_shift(row: &mut [f32], shift: f32) {
        #[cfg(target_arch = "x86_64")]
        if avx2() {
            // SAFETY: as above.
            return unsafe { wide::exp_shift(row, shift) };
        }
        exp_shift_body::<f32, false>(row, shift)
    }
}

impl RowOps for f64 {
    fn row_max(row: &[f64], start: f64) -> f64 {
        max_body(row, start)
    }

    fn exp_sum(row: &mut [f64], shift: f64) -> f64 {
        exp_sum_body::<f64, false>(row, shift)
    }

    fn exp_shift(row: &mut [f64], shift: f64) {
        exp_shift_body::<f64, false>(row, shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_every_length_match_a_plain_loop() {
        for n in [0usize, 1, 15, 16, 17, 40, 513] {
            let row: Vec<f32> = (0..n)
                .map(|i| ((i * 37) % 23) as f32 * 0.25 - 2.0)
                .collect();
            let top = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            assert_eq!(f32::row_max(&row, f32::NEG_INFINITY), top);
            let mut e = row.clone();
            let total = f32::exp_sum(&mut e, top);
            let want: Vec<f64> = row.iter().map(|&x| f64::from(x - top).exp()).collect();
            for (a, b) in e.iter().zip(&want) {
                assert!(
                    (f64::from(*a) - b).abs() <= 1e-6 * b.max(1e-30),
                    "{a} vs {b}"
                );
            }
            assert!((f64::from(total) - want.iter().sum::<f64>()).abs() <= 1e-5 * n as f64);
            // A NaN is passed over by the maximum and makes the sum NaN.
            if n > 0 {
                let mut nan = row.clone();
                nan[n / 2] = f32::NAN;
                let passed = f32::row_max(&nan, f32::NEG_INFINITY);
                assert!(!passed.is_nan() && passed <= top);
                assert!(f32::exp_sum(&mut nan, top).is_nan());
            }
            // A masked (−inf) score gives 0.
            let mut m = vec![f32::NEG_INFINITY; n];
            f32::exp_shift(&mut m, 0.0);
            assert!(m.iter().all(|&x| x == 0.0));
        }
    }
}
