//! The usual `MaxPool2d(2)` on f32 planes with AVX-512F: 2×2 windows at stride 2, inside
//! the plane. Each output row is computed 16 windows at a time: the two input rows' 32
//! elements loaded (masked at the row's end), split into even and odd columns with one
//! permute each, the pairwise maxima and their positions chosen with mask compares, and
//! the values and i64 positions stored once, so each input element is read once and each
//! output written once.
//!
//! The choice is [`super::pool2d`]'s for every window: the later element of a pair wins
//! only when it is larger, or when it is the first NaN, so the first maximum in row-major
//! order (or the first NaN) and its position come out, bit for bit as the plain loop.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use crate::backend::kernel::PoolWindows;

/// Whether this CPU runs [`plane`] (AVX-512F) and `w` suits it: 2×2 windows at stride 2
/// inside the plane, rows short enough for 32-bit in-row offsets.
pub(super) fn takes(w: &PoolWindows) -> bool {
    w.is_pairs() && w.w < 1 << 30 && std::arch::is_x86_feature_detected!("avx512f")
}

/// One plane's 2×2 windows: `dst[oy·ow + ox]` is the maximum of the window at `(2·oy,
/// 2·ox)` and `idx[oy·ow + ox]` its flat position in the plane.
///
/// # Safety
/// The CPU has AVX-512F and `w` is [`takes`]'s; `src` holds `h·w` readable f32, `dst` and
/// `idx` `oh·ow` writable f32 and i64, none overlapping another.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn plane(src: *const f32, dst: *mut f32, idx: *mut i64, w: &PoolWindows) {
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    let row = w.w as i32;
    let (zero, one) = (_mm512_setzero_si512(), _mm512_set1_epi32(1));
    let (below, below_right) = (_mm512_set1_epi32(row), _mm512_set1_epi32(row + 1));
    for oy in 0..w.oh {
        let top = 2 * oy * w.w;
        let mut ox = 0;
        while ox < w.ow {
            let lanes = (w.ow - ox).min(16);
            let out = oy * w.ow + ox;
            // SAFETY: the two rows' `2·lanes` elements from column `2·ox` lie inside the
            // plane (`2·ow ≤ w` for windows inside it); masked lanes are not touched.
            let (a, b, c, d) = unsafe {
                let (a, b) = split(src.add(top + 2 * ox), 2 * lanes, even, odd);
                let (c, d) = split(src.add(top + w.w + 2 * ox), 2 * lanes, even, odd);
                (a, b, c, d)
            };
            let upper = beats(b, a);
            let (m0, i0) = (
                _mm512_mask_blend_ps(upper, a, b),
                _mm512_mask_blend_epi32(upper, zero, one),
            );
            let lower = beats(d, c);
            let (m1, i1) = (
                _mm512_mask_blend_ps(lower, c, d),
                _mm512_mask_blend_epi32(lower, below, below_right),
            );
            let second = beats(m1, m0);
            let best = _mm512_mask_blend_ps(second, m0, m1);
            // Each lane's offset from the row pair's first element: 2·lane + the corner.
            let at = _mm512_add_epi32(
                _mm512_add_epi32(even, _mm512_set1_epi32(2 * ox as i32)),
                _mm512_mask_blend_epi32(second, i0, i1),
            );
            let base = _mm512_set1_epi64(top as i64);
            let (lo, hi) = (
                _mm512_add_epi64(base, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(at))),
                _mm512_add_epi64(
                    base,
                    _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(at)),
                ),
            );
            let keep = low_bits(lanes);
            // SAFETY: outputs `out..out + lanes` lie inside the plane's `oh·ow`; masked
            // lanes are not touched.
            unsafe {
                _mm512_mask_storeu_ps(dst.add(out), keep, best);
                _mm512_mask_storeu_epi64(idx.add(out), keep as u8, lo);
                _mm512_mask_storeu_epi64(idx.add(out + 8), (keep >> 8) as u8, hi);
            }
            ox += lanes;
        }
    }
}

/// The even and odd elements of the `n ≤ 32` elements at `p` (lanes past `n / 2` zero).
///
/// # Safety
/// AVX-512F; `n` readable f32 at `p`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn split(p: *const f32, n: usize, even: __m512i, odd: __m512i) -> (__m512, __m512) {
    // SAFETY: only the first `n` elements are loaded (the masks), which the caller vouched for.
    let (lo, hi) = unsafe {
        (
            _mm512_maskz_loadu_ps(low_bits(n), p),
            _mm512_maskz_loadu_ps(low_bits(n.saturating_sub(16)), p.add(16.min(n))),
        )
    };
    (
        _mm512_permutex2var_ps(lo, even, hi),
        _mm512_permutex2var_ps(lo, odd, hi),
    )
}

/// The lanes where `v` replaces `best` as a window's maximum: larger, or the first NaN.
#[inline]
#[target_feature(enable = "avx512f")]
fn beats(v: __m512, best: __m512) -> __mmask16 {
    let larger = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, best);
    let nan =
        _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v) & _mm512_cmp_ps_mask::<_CMP_ORD_Q>(best, best);
    larger | nan
}

/// A mask of the first `n.min(16)` lanes.
#[inline(always)]
fn low_bits(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}
