//! The f32 softmax / log-softmax of one contiguous row in vector registers: 8 lanes with
//! AVX2 and FMA, 16 with AVX-512, whichever the CPU has. Both run one generic algorithm,
//! lane for lane the `exp` of [`super::math::exp_f32`] (its fused form), and add the
//! row's exponentials in the same sixteen partial sums combined in the same order, so the
//! result does not depend on which path ran.
//!
//! The row is read from memory once (the maximum); the second pass keeps `exp(x - max)` in
//! a per-thread scratch row that stays in the L1 cache, and the last pass writes the output
//! once. For outputs of [`crate::backend::cpu::stream_bytes`] or more that write uses streaming
//! (non-temporal) stores, so the output's cache lines are not first read from memory.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::math::exp_f32_fused;

/// Elements per block of the exponential sum: one AVX-512 vector, two AVX2 vectors. Element
/// `i` of a row always lands in partial sum `i % SUM_LANES`.
const SUM_LANES: usize = 16;

/// One vector of f32 lanes and the operations the row kernel needs.
///
/// # Safety
/// Every method requires the CPU features of the implementing type; pointers must be valid
/// for `W` lanes (and aligned to `W * 4` bytes for [`Lanes::stream`]).
trait Lanes: Copy {
    /// Lanes per vector.
    const W: usize;
    unsafe fn splat(v: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(p: *mut f32, v: Self);
    unsafe fn stream(p: *mut f32, v: Self);
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn sub(a: Self, b: Self) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    unsafe fn max(a: Self, b: Self) -> Self;
    unsafe fn min(a: Self, b: Self) -> Self;
    /// `a * b + c`, rounded once.
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self;
    /// `c - a * b`, rounded once.
    unsafe fn fnmadd(a: Self, b: Self, c: Self) -> Self;
    /// Whether any lane is NaN.
    unsafe fn any_nan(v: Self) -> bool;
    /// `p · 2^n` where `n` is the integer whose bits `t - magic` holds, applied as two
    /// halves so that neither power overflows.
    unsafe fn scale_pow2(p: Self, t: Self, magic: Self) -> Self;
    /// `p · 2^n` for the integer `n = t - magic` (also given as bits of `t`), when
    /// `-126 ≤ n ≤ 0`: one scaling, with the same single rounding as [`Lanes::scale_pow2`].
    unsafe fn scale_pow2_small(p: Self, n: Self, t: Self, magic: Self) -> Self;
    /// Lane by lane: `+inf` where `x > hi`, `0` where `x < lo`, `x` where `x` is NaN, else `y`.
    unsafe fn fix_range(x: Self, y: Self, lo: f32, hi: f32) -> Self;
    /// Lane by lane: `0` where `x < lo`, else `y`.
    unsafe fn zero_below(x: Self, y: Self, lo: f32) -> Self;
    /// The lanes as an array (first `W` entries used).
    unsafe fn to_array(v: Self) -> [f32; SUM_LANES];
}

#[derive(Clone, Copy)]
struct Avx2(__m256);

#[derive(Clone, Copy)]
struct Avx512(__m512);

// Every method of both impls runs with the type's CPU features (the trait's contract);
// loads and stores touch `W` lanes the caller vouched for.
impl Lanes for Avx2 {
    const W: usize = 8;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx2(unsafe { _mm256_set1_ps(v) })
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: this type's CPU features, and `W` readable lanes at `p` (the caller's).
        Avx2(unsafe { _mm256_loadu_ps(p) })
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        // SAFETY: this type's CPU features, and `W` writable lanes at `p` (the caller's).
        unsafe { _mm256_storeu_ps(p, v.0) }
    }
    #[inline(always)]
    unsafe fn stream(p: *mut f32, v: Self) {
        // SAFETY: this type's CPU features, and `W` writable lanes at `p` (the caller's).
        unsafe { _mm256_stream_ps(p, v.0) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx2(unsafe { _mm256_add_ps(a.0, b.0) })
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx2(unsafe { _mm256_sub_ps(a.0, b.0) })
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx2(unsafe { _mm256_mul_ps(a.0, b.0) })
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx2(unsafe { _mm256_max_ps(a.0, b.0) })
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx2(unsafe { _mm256_min_ps(a.0, b.0) })
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx2(unsafe { _mm256_fmadd_ps(a.0, b.0, c.0) })
    }
    #[inline(always)]
    unsafe fn fnmadd(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx2(unsafe { _mm256_fnmadd_ps(a.0, b.0, c.0) })
    }
    #[inline(always)]
    unsafe fn any_nan(v: Self) -> bool {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        unsafe { _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(v.0, v.0)) != 0 }
    }
    #[inline(always)]
    unsafe fn scale_pow2(p: Self, t: Self, magic: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        unsafe {
            let n = _mm256_sub_epi32(_mm256_castps_si256(t.0), _mm256_castps_si256(magic.0));
            let half = _mm256_srai_epi32::<1>(n);
            let bias = _mm256_set1_epi32(127);
            let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(half, bias)));
            let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                _mm256_sub_epi32(n, half),
                bias,
            )));
            Avx2(_mm256_mul_ps(_mm256_mul_ps(p.0, s1), s2))
        }
    }
    #[inline(always)]
    unsafe fn scale_pow2_small(p: Self, _n: Self, t: Self, magic: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        unsafe {
            let n = _mm256_sub_epi32(_mm256_castps_si256(t.0), _mm256_castps_si256(magic.0));
            let s = _mm256_slli_epi32::<23>(_mm256_add_epi32(n, _mm256_set1_epi32(127)));
            Avx2(_mm256_mul_ps(p.0, _mm256_castsi256_ps(s)))
        }
    }
    #[inline(always)]
    unsafe fn zero_below(x: Self, y: Self, lo: f32) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        unsafe {
            let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x.0, _mm256_set1_ps(lo));
            Avx2(_mm256_andnot_ps(under, y.0))
        }
    }
    #[inline(always)]
    unsafe fn fix_range(x: Self, y: Self, lo: f32, hi: f32) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        unsafe {
            let over = _mm256_cmp_ps::<_CMP_GT_OQ>(x.0, _mm256_set1_ps(hi));
            let y = _mm256_blendv_ps(y.0, _mm256_set1_ps(f32::INFINITY), over);
            let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x.0, _mm256_set1_ps(lo));
            let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
            let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x.0, x.0);
            Avx2(_mm256_blendv_ps(y, x.0, nan))
        }
    }
    #[inline(always)]
    unsafe fn to_array(v: Self) -> [f32; SUM_LANES] {
        let mut a = [0f32; SUM_LANES];
        // SAFETY: this type's CPU features, and `W` writable lanes at `p` (the caller's).
        unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v.0) };
        a
    }
}

impl Lanes for Avx512 {
    const W: usize = 16;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx512(unsafe { _mm512_set1_ps(v) })
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: this type's CPU features, and `W` readable lanes at `p` (the caller's).
        Avx512(unsafe { _mm512_loadu_ps(p) })
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        // SAFETY: this type's CPU features, and `W` writable lanes at `p` (the caller's).
        unsafe { _mm512_storeu_ps(p, v.0) }
    }
    #[inline(always)]
    unsafe fn stream(p: *mut f32, v: Self) {
        // SAFETY: this type's CPU features, and `W` writable lanes at `p` (the caller's).
        unsafe { _mm512_stream_ps(p, v.0) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx512(unsafe { _mm512_add_ps(a.0, b.0) })
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx512(unsafe { _mm512_sub_ps(a.0, b.0) })
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx512(unsafe { _mm512_mul_ps(a.0, b.0) })
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx512(unsafe { _mm512_max_ps(a.0, b.0) })
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx512(unsafe { _mm512_min_ps(a.0, b.0) })
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx512(unsafe { _mm512_fmadd_ps(a.0, b.0, c.0) })
    }
    #[inline(always)]
    unsafe fn fnmadd(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx512(unsafe { _mm512_fnmadd_ps(a.0, b.0, c.0) })
    }
    #[inline(always)]
    unsafe fn any_nan(v: Self) -> bool {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v.0, v.0) != 0 }
    }
    #[inline(always)]
    unsafe fn scale_pow2(p: Self, t: Self, magic: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        unsafe {
            let n = _mm512_sub_epi32(_mm512_castps_si512(t.0), _mm512_castps_si512(magic.0));
            let half = _mm512_srai_epi32::<1>(n);
            let bias = _mm512_set1_epi32(127);
            let s1 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(half, bias)));
            let s2 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
                _mm512_sub_epi32(n, half),
                bias,
            )));
            Avx512(_mm512_mul_ps(_mm512_mul_ps(p.0, s1), s2))
        }
    }
    #[inline(always)]
    unsafe fn scale_pow2_small(p: Self, n: Self, _t: Self, _magic: Self) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        Avx512(unsafe { _mm512_scalef_ps(p.0, n.0) })
    }
    #[inline(always)]
    unsafe fn zero_below(x: Self, y: Self, lo: f32) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        unsafe {
            let keep = _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(x.0, _mm512_set1_ps(lo));
            Avx512(_mm512_maskz_mov_ps(keep, y.0))
        }
    }
    #[inline(always)]
    unsafe fn fix_range(x: Self, y: Self, lo: f32, hi: f32) -> Self {
        // SAFETY: the caller runs with this type's CPU features (registers only).
        unsafe {
            let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x.0, _mm512_set1_ps(hi));
            let y = _mm512_mask_mov_ps(y.0, over, _mm512_set1_ps(f32::INFINITY));
            let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x.0, _mm512_set1_ps(lo));
            let y = _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x.0, x.0);
            Avx512(_mm512_mask_mov_ps(y, nan, x.0))
        }
    }
    #[inline(always)]
    unsafe fn to_array(v: Self) -> [f32; SUM_LANES] {
        let mut a = [0f32; SUM_LANES];
        // SAFETY: this type's CPU features, and `W` writable lanes at `p` (the caller's).
        unsafe { _mm512_storeu_ps(a.as_mut_ptr(), v.0) };
        a
    }
}

/// `e^x` in every lane: the algorithm of [`super::math::exp_f32`] step for step. With
/// `NONPOS` the caller guarantees every lane is `≤ 0` or `-inf` (never NaN), as `x - max`
/// is in a row with a finite maximum: the overflow and NaN fix-ups are then skipped and
/// `2^n` is applied in one step, with bit-identical results.
#[inline(always)]
unsafe fn exp<V: Lanes, const NONPOS: bool>(x: V) -> V {
    const LO: f32 = -87.3;
    const HI: f32 = 88.72;
    const MAGIC: f32 = 12_582_912.0;
    // SAFETY: the caller runs with V's features.
    unsafe {
        let xc = if NONPOS {
            V::max(x, V::splat(LO))
        } else {
            V::min(V::max(x, V::splat(LO)), V::splat(HI))
        };
        let magic = V::splat(MAGIC);
        let t = V::fmadd(xc, V::splat(std::f32::consts::LOG2_E), magic);
        let n = V::sub(t, magic);
        let r = V::fnmadd(n, V::splat(0.693_359_4), xc);
        let r = V::fnmadd(n, V::splat(-2.121_944_4e-4), r);
        let mut p = V::fmadd(r, V::splat(0.001_393_98), V::splat(0.008_333_49));
        for c in [0.041_666_52, 0.166_666_67, 0.5, 1.0, 1.0] {
            p = V::fmadd(r, p, V::splat(c));
        }
        if NONPOS {
            // n = round(xc·log2 e) ∈ [-126, 0] for xc ∈ [-87.3, 0].
            V::zero_below(x, V::scale_pow2_small(p, n, t, magic), LO)
        } else {
            V::fix_range(x, V::scale_pow2(p, t, magic), LO, HI)
        }
    }
}

/// The maximum of `x`, NaN if any element is NaN (as PyTorch's softmax propagates it).
#[inline(always)]
unsafe fn row_max<V: Lanes>(x: &[f32]) -> f32 {
    let (n, p) = (x.len(), x.as_ptr());
    let mut best = f32::NEG_INFINITY;
    let mut i = 0;
    // SAFETY: the caller runs with V's features; every load covers lanes i..i + 4W ≤ n.
    let all_finite = unsafe {
        let mut acc = [V::splat(f32::NEG_INFINITY); 4];
        // Stays 0 while every element is finite: v·0 is NaN for NaN and ±inf.
        let mut probe = V::splat(0.0);
        let zero = V::splat(0.0);
        while i + 4 * V::W <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let v = V::load(p.add(i + k * V::W));
                *a = V::max(*a, v);
                probe = V::fmadd(v, zero, probe);
            }
            i += 4 * V::W;
        }
        let m = V::max(V::max(acc[0], acc[1]), V::max(acc[2], acc[3]));
        best = V::to_array(m)[..V::W].iter().fold(best, |a, &b| a.max(b));
        !V::any_nan(probe)
    };
    if !all_finite {
        // Rare: an infinity or a NaN among the vector part; decide exactly.
        return x.iter().fold(f32::NEG_INFINITY, |a, &v| {
            if a.is_nan() || v.is_nan() {
                f32::NAN
            } else {
                a.max(v)
            }
        });
    }
    let mut any_nan = false;
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

/// `scratch[i] = exp(x[i] - m)` (when `keep`) and the sum of those values, element `i` added
/// into partial sum `i % SUM_LANES`, the partial sums then combined in a fixed order.
/// `NONPOS`: `m` is the finite maximum of `x` (see [`exp`]).
#[inline(always)]
unsafe fn exp_sum<V: Lanes, const NONPOS: bool>(
    x: &[f32],
    m: f32,
    scratch: &mut [f32],
    keep: bool,
) -> f32 {
    let n = x.len();
    let (p, s) = (x.as_ptr(), scratch.as_mut_ptr());
    let per_block = SUM_LANES / V::W;
    let mut i = 0;
    let mut partial = [0f32; SUM_LANES];
    // SAFETY: the caller runs with V's features; every vector covers lanes below
    // i + SUM_LANES ≤ n = x.len() ≤ scratch.len() (when `keep`).
    unsafe {
        let mv = V::splat(m);
        let mut acc = [V::splat(0.0); 2];
        while i + SUM_LANES <= n {
            for (k, a) in acc.iter_mut().enumerate().take(per_block) {
                let e = exp::<V, NONPOS>(V::sub(V::load(p.add(i + k * V::W)), mv));
                if keep {
                    V::store(s.add(i + k * V::W), e);
                }
                *a = V::add(*a, e);
            }
            i += SUM_LANES;
        }
        for (k, a) in acc.iter().enumerate().take(per_block) {
            partial[k * V::W..(k + 1) * V::W].copy_from_slice(&V::to_array(*a)[..V::W]);
        }
    }
    let (lo, hi) = partial.split_at(SUM_LANES / 2);
    let mut sum: f32 = lo.iter().zip(hi).map(|(a, b)| a + b).sum();
    for k in i..n {
        let e = exp_f32_fused(x[k] - m);
        if keep {
            scratch[k] = e;
        }
        sum += e;
    }
    sum
}

/// Writes `f(src[i])` to `out[i]` for the whole row, a vector at a time, with streaming
/// stores (when `stream`) from the first address aligned to a whole vector on.
#[inline(always)]
unsafe fn write_row<V: Lanes>(
    src: &[f32],
    out: &mut [f32],
    stream: bool,
    f: impl Fn(V) -> V,
    f1: impl Fn(f32) -> f32,
) {
    let n = out.len();
    let (s, o) = (src.as_ptr(), out.as_mut_ptr());
    let head = if stream {
        o.align_offset(V::W * 4).min(n)
    } else {
        0
    };
    for k in 0..head {
        out[k] = f1(src[k]);
    }
    let mut i = head;
    // With `stream` the address is aligned to a whole vector (the head above, then whole
    // vectors per step).
    if stream {
        while i + V::W <= n {
            // SAFETY: i + W ≤ n = out.len() = src.len(), aligned when streaming; V's features
            // are the caller's.
            unsafe { V::stream(o.add(i), f(V::load(s.add(i)))) };
            i += V::W;
        }
    } else {
        while i + V::W <= n {
            // SAFETY: i + W ≤ n = out.len() = src.len(), aligned when streaming; V's features
            // are the caller's.
            unsafe { V::store(o.add(i), f(V::load(s.add(i)))) };
            i += V::W;
        }
    }
    for k in i..n {
        out[k] = f1(src[k]);
    }
}

/// Softmax (or log-softmax) of the row `x` into `out` with vectors `V`.
#[inline(always)]
unsafe fn row<V: Lanes>(
    x: &[f32],
    out: &mut [f32],
    log: bool,
    scratch: &mut Vec<f32>,
    stream: bool,
) {
    debug_assert_eq!(x.len(), out.len());
    // SAFETY: (all calls) the caller runs with V's features.
    unsafe {
        let m = row_max::<V>(x);
        if log {
            // x - max - log(sum(exp(x - max))), in that order (no cancellation for large x).
            let lse = if m.is_finite() {
                exp_sum::<V, true>(x, m, &mut [], false)
            } else {
                exp_sum::<V, false>(x, m, &mut [], false)
            }
            .ln();
            let (mv, lv) = (V::splat(m), V::splat(lse));
            write_row::<V>(
                x,
                out,
                stream,
                |v| V::sub(V::sub(v, mv), lv),
                |v| v - m - lse,
            );
        } else {
            scratch.resize(x.len(), 0.0);
            let s = if m.is_finite() {
                exp_sum::<V, true>(x, m, scratch, true)
            } else {
                exp_sum::<V, false>(x, m, scratch, true)
            };
            let r = 1.0 / s;
            let rv = V::splat(r);
            write_row::<V>(scratch, out, stream, |v| V::mul(v, rv), |v| v * r);
        }
    }
}

/// Softmax (or log-softmax) of the row `x` into `out` (same length) with AVX2. `scratch` is
/// resized to the row length. With `stream` the output is written with non-temporal stores;
/// the caller then issues a store fence before the output is read by anyone.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn row_avx2(
    x: &[f32],
    out: &mut [f32],
    log: bool,
    scratch: &mut Vec<f32>,
    stream: bool,
) {
    // SAFETY: the CPU has AVX2 and FMA.
    unsafe { row::<Avx2>(x, out, log, scratch, stream) }
}

/// [`row_avx2`] with AVX-512: sixteen lanes, the same results.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn row_avx512(
    x: &[f32],
    out: &mut [f32],
    log: bool,
    scratch: &mut Vec<f32>,
    stream: bool,
) {
    // SAFETY: the CPU has AVX-512F (and with it AVX2 and FMA).
    unsafe { row::<Avx512>(x, out, log, scratch, stream) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_widths_give_identical_rows() {
        if !(is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma"))
        {
            return;
        }
        for n in [1usize, 7, 15, 16, 17, 33, 100, 1000, 1029] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37)
                .collect();
            for log in [false, true] {
                let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
                let mut scratch = Vec::new();
                // SAFETY: the features were checked above.
                unsafe {
                    row_avx2(&x, &mut a, log, &mut scratch, false);
                    row_avx512(&x, &mut b, log, &mut scratch, true);
                }
                crate::backend::cpu::chunk::stream_fence();
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "n={n} log={log}");
            }
        }
    }
}
