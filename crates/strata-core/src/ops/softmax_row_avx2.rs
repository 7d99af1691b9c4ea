//! The f32 softmax / log-softmax of one contiguous row with AVX2 and FMA intrinsics: eight
//! lanes per instruction in every pass, several independent accumulators, and the same
//! `exp` as [`super::softmax::exp_f32`] (its fused form), so results do not depend on
//! which path ran.
//!
//! The row is read from memory once (the maximum); the second pass keeps `exp(x - max)` in
//! a per-thread scratch row that stays in the L1 cache, and the last pass writes the output
//! once. For outputs larger than the cache that write uses streaming (non-temporal) stores,
//! so the output's cache lines are not first read from memory: the row then costs what a
//! memory copy costs.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::softmax::exp_f32_fused;

/// Lanes of one vector.
const W: usize = 8;

/// `e^x` in every lane: the algorithm of [`super::softmax::exp_f32`] step for step.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp8(x: __m256) -> __m256 {
    let xc = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(-87.3)),
        _mm256_set1_ps(88.72),
    );
    const MAGIC: f32 = 12_582_912.0;
    let magic = _mm256_set1_ps(MAGIC);
    let t = _mm256_fmadd_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E), magic);
    let n = _mm256_sub_ps(t, magic);
    let ni = _mm256_sub_epi32(
        _mm256_castps_si256(t),
        _mm256_set1_epi32(MAGIC.to_bits() as i32),
    );
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), xc);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_fmadd_ps(
        r,
        _mm256_set1_ps(0.001_393_98),
        _mm256_set1_ps(0.008_333_49),
    );
    for c in [0.041_666_52, 0.166_666_67, 0.5, 1.0, 1.0] {
        p = _mm256_fmadd_ps(r, p, _mm256_set1_ps(c));
    }
    let half = _mm256_srai_epi32::<1>(ni);
    let bias = _mm256_set1_epi32(127);
    let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(half, bias)));
    let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_sub_epi32(ni, half),
        bias,
    )));
    let y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    let over = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(88.72));
    let y = _mm256_blendv_ps(y, _mm256_set1_ps(f32::INFINITY), over);
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-87.3));
    let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
    _mm256_blendv_ps(y, x, nan)
}

/// Horizontal sum of the lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum(v: __m256) -> f32 {
    let mut lanes = [0f32; W];
    _mm256_storeu_ps(lanes.as_mut_ptr(), v);
    lanes.iter().sum()
}

/// The maximum of `x`, NaN if any element is NaN (as PyTorch's softmax propagates it).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_max(x: &[f32]) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    let mut acc = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
    let mut nan = _mm256_setzero_ps();
    let mut i = 0;
    while i + 4 * W <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: i + 4W ≤ n, so the 8 lanes at i + kW are inside `x`.
            let v = unsafe { _mm256_loadu_ps(p.add(i + k * W)) };
            *a = _mm256_max_ps(*a, v);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
        }
        i += 4 * W;
    }
    let m = _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]));
    let mut lanes = [0f32; W];
    _mm256_storeu_ps(lanes.as_mut_ptr(), m);
    let mut best = lanes.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let mut any_nan = _mm256_movemask_ps(nan) != 0;
    for &v in &x[i..] {
        any_nan |= v.is_nan();
        best = best.max(v);
    }
    if any_nan {
        f32::NAN
    } else {
        best
    }
}

/// `scratch[i] = exp(x[i] - m)` (when `keep`) and the sum of those values.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_sum(x: &[f32], m: f32, scratch: &mut [f32], keep: bool) -> f32 {
    let n = x.len();
    let (p, s) = (x.as_ptr(), scratch.as_mut_ptr());
    let mv = _mm256_set1_ps(m);
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut i = 0;
    while i + 2 * W <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: i + 2W ≤ n = x.len() ≤ scratch.len().
            unsafe {
                let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i + k * W)), mv));
                if keep {
                    _mm256_storeu_ps(s.add(i + k * W), e);
                }
                *a = _mm256_add_ps(*a, e);
            }
        }
        i += 2 * W;
    }
    let mut sum = hsum(_mm256_add_ps(acc[0], acc[1]));
    for k in i..n {
        let e = exp_f32_fused(x[k] - m);
        if keep {
            scratch[k] = e;
        }
        sum += e;
    }
    sum
}

/// Writes `f(src[i])` to `out[i]` for the whole row, eight lanes at a time, with streaming
/// stores (when `stream`) wherever the output is 32-byte aligned.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn write_row(
    src: &[f32],
    out: &mut [f32],
    stream: bool,
    f: impl Fn(__m256) -> __m256,
    f1: impl Fn(f32) -> f32,
) {
    let n = out.len();
    let (s, o) = (src.as_ptr(), out.as_mut_ptr());
    // Scalar head up to 32-byte alignment of the output (streaming stores need it).
    let head = if stream {
        (o.align_offset(32)).min(n)
    } else {
        0
    };
    for k in 0..head {
        out[k] = f1(src[k]);
    }
    let mut i = head;
    while i + W <= n {
        // SAFETY: i + W ≤ n = out.len() = src.len(); with `stream` the address is 32-byte
        // aligned (head above, and W·4 = 32 bytes per step).
        unsafe {
            let v = f(_mm256_loadu_ps(s.add(i)));
            if stream {
                _mm256_stream_ps(o.add(i), v);
            } else {
                _mm256_storeu_ps(o.add(i), v);
            }
        }
        i += W;
    }
    for k in i..n {
        out[k] = f1(src[k]);
    }
}

/// Softmax (or log-softmax) of the row `x` into `out` (same length). `scratch` is resized to
/// the row length. With `stream` the output is written with non-temporal stores; the caller
/// then issues [`store_fence`] before the output is read by anyone.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn row(
    x: &[f32],
    out: &mut [f32],
    log: bool,
    scratch: &mut Vec<f32>,
    stream: bool,
) {
    debug_assert_eq!(x.len(), out.len());
    let m = row_max(x);
    if log {
        // x - max - log(sum(exp(x - max))), in that order (no cancellation for large x).
        let lse = exp_sum(x, m, &mut [], false).ln();
        let (mv, lv) = (_mm256_set1_ps(m), _mm256_set1_ps(lse));
        write_row(
            x,
            out,
            stream,
            |v| _mm256_sub_ps(_mm256_sub_ps(v, mv), lv),
            |v| v - m - lse,
        );
    } else {
        scratch.resize(x.len(), 0.0);
        let s = exp_sum(x, m, scratch, true);
        let r = 1.0 / s;
        let rv = _mm256_set1_ps(r);
        write_row(scratch, out, stream, |v| _mm256_mul_ps(v, rv), |v| v * r);
    }
}

/// Orders this thread's streaming stores before anything it does next (a no-op cost when
/// none were issued).
pub(super) fn store_fence() {
    // SAFETY: `sfence` is part of SSE, which every x86_64 CPU has.
    unsafe { _mm_sfence() };
}
