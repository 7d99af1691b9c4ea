//! The vector operations the direct convolution's kernels are written over ([`Isa`]), for
//! AVX-512F (16 lanes, masks in mask registers) and AVX2 with FMA (8 lanes, masks as
//! vectors).

use std::arch::x86_64::{
    __m256, __m256i, __m512, _mm256_and_si256, _mm256_castps256_ps128, _mm256_cmpgt_epi32,
    _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_maskload_ps,
    _mm256_maskstore_ps, _mm256_set1_epi32, _mm256_set1_ps, _mm256_setr_epi32, _mm256_setzero_ps,
    _mm256_storeu_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_mask_storeu_ps,
    _mm512_maskz_loadu_ps, _mm512_reduce_add_ps, _mm512_set1_ps, _mm512_setzero_ps,
    _mm512_storeu_ps, _mm_add_ps, _mm_add_ss, _mm_cvtss_f32, _mm_movehdup_ps, _mm_movehl_ps,
};

/// The vector operations a tile needs.
pub(super) trait Isa {
    /// A vector of f32.
    type V: Copy;
    /// Its lanes.
    const LANES: usize;

    /// All lanes zero.
    unsafe fn zero() -> Self::V;
    /// All lanes `x`.
    unsafe fn splat(x: f32) -> Self::V;
    /// `LANES` elements from `p`.
    unsafe fn load(p: *const f32) -> Self::V;
    /// Stores `v` to `LANES` elements from `p`.
    unsafe fn store(p: *mut f32, v: Self::V);
    /// The sum of the lanes, in a fixed order.
    unsafe fn sum(v: Self::V) -> f32;
    /// `a·b + c`, rounded once.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// A set of lanes.
    type M: Copy;
    /// Lanes `lo..hi` (`lo ≤ hi ≤ LANES`).
    unsafe fn range(lo: usize, hi: usize) -> Self::M;
    /// The lanes of `m` from `p + lane`, zero elsewhere; no other lane is read (its address
    /// may lie outside memory).
    unsafe fn load_masked(p: *const f32, m: Self::M) -> Self::V;
    /// Stores the lanes of `m` of `v` to `p + lane`; no other lane is written.
    unsafe fn store_masked(p: *mut f32, v: Self::V, m: Self::M);
}

/// AVX-512F: 16 lanes, masks in mask registers.
pub(super) struct Avx512;

impl Isa for Avx512 {
    type V = __m512;
    const LANES: usize = 16;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        // SAFETY: only called from kernels compiled for AVX-512F.
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        // SAFETY: as above.
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        // SAFETY: as above; 16 elements from `p` are readable (caller's contract).
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        // SAFETY: as above; 16 elements from `p` are writable (caller's contract).
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn sum(v: __m512) -> f32 {
        // SAFETY: as above.
        unsafe { _mm512_reduce_add_ps(v) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        // SAFETY: as above.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    type M = u16;
    #[inline(always)]
    unsafe fn range(lo: usize, hi: usize) -> u16 {
        (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as u16
    }
    #[inline(always)]
    unsafe fn load_masked(p: *const f32, m: u16) -> __m512 {
        // SAFETY: as above; masked-off lanes are neither read nor faulted on.
        unsafe { _mm512_maskz_loadu_ps(m, p) }
    }
    #[inline(always)]
    unsafe fn store_masked(p: *mut f32, v: __m512, m: u16) {
        // SAFETY: as above; masked-off lanes are not written.
        unsafe { _mm512_mask_storeu_ps(p, m, v) }
    }
}

/// AVX2 with FMA: 8 lanes, masks as vectors of all-ones lanes.
pub(super) struct Avx2;

impl Isa for Avx2 {
    type V = __m256;
    const LANES: usize = 8;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        // SAFETY: only called from kernels compiled for AVX2 and FMA.
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        // SAFETY: as above.
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: as above; 8 elements from `p` are readable (caller's contract).
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        // SAFETY: as above; 8 elements from `p` are writable (caller's contract).
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn sum(v: __m256) -> f32 {
        // SAFETY: as above.
        unsafe {
            let quads = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let pairs = _mm_add_ps(quads, _mm_movehl_ps(quads, quads));
            _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)))
        }
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: as above.
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    type M = __m256i;
    #[inline(always)]
    unsafe fn range(lo: usize, hi: usize) -> __m256i {
        // SAFETY: only called from kernels compiled for AVX2.
        unsafe {
            let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let above = _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(lo as i32 - 1));
            let below = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi as i32), lane);
            _mm256_and_si256(above, below)
        }
    }
    #[inline(always)]
    unsafe fn load_masked(p: *const f32, m: __m256i) -> __m256 {
        // SAFETY: as above; masked-off lanes are neither read nor faulted on.
        unsafe { _mm256_maskload_ps(p, m) }
    }
    #[inline(always)]
    unsafe fn store_masked(p: *mut f32, v: __m256, m: __m256i) {
        // SAFETY: as above; masked-off lanes are not written.
        unsafe { _mm256_maskstore_ps(p, m, v) }
    }
}
