//! f16 and bf16 products on f32 FMA register tiles (AVX-512F), the operands widened to f32 as
//! they are packed (exactly: every f16 and bf16 value is an f32), summed in f32 and rounded
//! once, in `packed`'s blocks and room (those of the widening path).
//!
//! Both operands are packed in groups, one per step along the depth (`a` in groups of [`MR`]
//! rows, `b` of [`NR`] columns), transposed in registers on the way where their lanes run
//! along the depth (`a`'s rows of a row-major `a`, the columns of a linear layer's `wᵀ`). A
//! tile of [`MR`]×[`NR`] sums takes two FMAs per row and step, `a`'s value broadcast from
//! memory.
//!
//! On cores where `vdpbf16ps` does half the f32 FMAs' multiply-adds per cycle (Intel's, see
//! `dot_bf16`) this is bf16's fastest path without AMX; it is f16's wherever the `gemm`
//! crate's own f16 kernel would round more than once.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::{
    __m256, __m512, _mm256_castsi256_ps, _mm256_cvtepu16_epi32, _mm256_cvtph_ps,
    _mm256_loadu_si256, _mm256_slli_epi32, _mm256_storeu_ps, _mm512_castpd_ps,
    _mm512_castps512_ps256, _mm512_castps_pd, _mm512_castsi512_ps, _mm512_cvtepu16_epi32,
    _mm512_cvtph_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps,
    _mm512_shuffle_f32x4, _mm512_slli_epi32, _mm512_storeu_ps, _mm512_unpackhi_pd,
    _mm512_unpackhi_ps, _mm512_unpacklo_pd, _mm512_unpacklo_ps, _mm_loadu_si128,
};
use std::marker::PhantomData;

use half::{bf16, f16};

use super::blocks::Half;
use super::packed::{load_sums, masks, store_sums, Kernel, Lanes, Tile};
use crate::dtype::cast;

/// Rows of `a` in one register tile (and one packed panel): a divisor of the blocks' 256
/// rows, so that full blocks pack into the room.
const MR: usize = 8;
/// 16-lane vectors across one register tile.
const NV: usize = 2;
/// Columns of `b` in one register tile (and one packed panel).
const NR: usize = 16 * NV;

/// Whether this CPU runs the widened tiles (checked once, cached by the standard library).
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

/// A half-precision type that widens sixteen elements at a time on AVX-512F.
pub(super) trait Widen: Half {
    /// Sixteen elements from `p`, widened.
    ///
    /// # Safety
    /// Sixteen elements from `p` are readable; the CPU has AVX512-F.
    unsafe fn widen16(p: *const Self) -> __m512;

    /// Eight elements from `p`, widened.
    ///
    /// # Safety
    /// Eight elements from `p` are readable; the CPU has AVX512-F.
    unsafe fn widen8(p: *const Self) -> __m256;
}

impl Widen for bf16 {
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn widen16(p: *const bf16) -> __m512 {
        // SAFETY: 32 bytes from `p` are readable (caller's contract). A bf16 is the high half
        // of the f32 of the same value.
        unsafe {
            let bits = _mm256_loadu_si256(p.cast());
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)))
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn widen8(p: *const bf16) -> __m256 {
        // SAFETY: 16 bytes from `p` are readable (caller's contract).
        unsafe {
            let bits = _mm_loadu_si128(p.cast());
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits)))
        }
    }
}

impl Widen for f16 {
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn widen16(p: *const f16) -> __m512 {
        // SAFETY: 32 bytes from `p` are readable (caller's contract); the conversion is exact.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn widen8(p: *const f16) -> __m256 {
        // SAFETY: 16 bytes from `p` are readable (caller's contract); the conversion is exact.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
}

/// The widened-tile kernel for products in `H`.
pub(super) struct Widened<H>(PhantomData<H>);

impl<H: Widen> Kernel for Widened<H> {
    type H = H;
    const MR: usize = MR;
    const NR: usize = NR;
    const PER_WORD: usize = 1;
    const READS_A_IN_PLACE: bool = false;

    unsafe fn pack_a(l: &Lanes<H>, dst: *mut u32) {
        // SAFETY: forwarded from the caller (the CPU has AVX512-F).
        unsafe { pack_groups(l, MR, dst.cast()) }
    }

    unsafe fn pack_b(l: &Lanes<H>, dst: *mut u32) {
        // SAFETY: forwarded from the caller (the CPU has AVX512-F).
        unsafe { pack_groups(l, NR, dst.cast()) }
    }

    unsafe fn tile_packed(t: &Tile, a: *const u32) {
        // SAFETY: forwarded from the caller.
        unsafe { tile_kernel(t, a.cast()) }
    }
}

/// Packs `l`'s lanes widened in groups of `width` (a multiple of 8) f32, one per step along
/// the depth: element `q` of lane `lane` at `dst[q·width + lane]`, zero past the lanes. Lanes
/// side by side are widened eight or sixteen at a time; lanes along the depth sixteen by
/// sixteen (eight lanes padded with zeros), transposed in registers; any other layout element
/// by element.
///
/// # Safety
/// Every element of `l` is readable; `dst` is writable for `width·l.depth` f32; the CPU has
/// AVX512-F.
#[target_feature(enable = "avx512f")]
unsafe fn pack_groups<H: Widen>(l: &Lanes<H>, width: usize, dst: *mut f32) {
    debug_assert!(width.is_multiple_of(8));
    let depth = l.depth;
    let full = l.lanes == width;
    // SAFETY: every element read lies inside `l` and every f32 written inside `dst` (caller's
    // contract): lanes below `l.lanes`, steps below `depth`.
    unsafe {
        if full && l.lane_stride == 1 {
            for q in 0..depth {
                let (src, out) = (l.base.add(q * l.depth_stride), dst.add(q * width));
                let mut v = 0;
                while v + 16 <= width {
                    _mm512_storeu_ps(out.add(v), H::widen16(src.add(v)));
                    v += 16;
                }
                if v < width {
                    _mm256_storeu_ps(out.add(v), H::widen8(src.add(v)));
                }
            }
            return;
        }
        let mut q0 = 0;
        if full && l.depth_stride == 1 {
            while q0 + 16 <= depth {
                for v in (0..width).step_by(16) {
                    let lanes = (width - v).min(16);
                    let mut rows: [__m512; 16] = std::array::from_fn(|lane| {
                        if lane < lanes {
                            H::widen16(l.base.add((v + lane) * l.lane_stride + q0))
                        } else {
                            _mm512_setzero_ps()
                        }
                    });
                    transpose16(&mut rows);
                    for (i, row) in rows.iter().enumerate() {
                        let out = dst.add((q0 + i) * width + v);
                        if lanes == 16 {
                            _mm512_storeu_ps(out, *row);
                        } else {
                            _mm256_storeu_ps(out, _mm512_castps512_ps256(*row));
                        }
                    }
                }
                q0 += 16;
            }
        }
        for lane in 0..width {
            if lane >= l.lanes {
                for q in q0..depth {
                    *dst.add(q * width + lane) = 0.0;
                }
                continue;
            }
            let line = l.base.add(lane * l.lane_stride);
            for q in q0..depth {
                *dst.add(q * width + lane) = cast::<H, f32>(*line.add(q * l.depth_stride));
            }
        }
    }
}

/// Transposes the 16×16 matrix whose rows are `r`: afterwards `r[i]` holds what was column `i`.
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose16(r: &mut [__m512; 16]) {
    // Pairs of rows interleaved by 32-bit lanes, then by 64-bit lanes: each 128-bit quarter
    // holds a 4×4 block transposed; two shuffles of quarters put the blocks in place.
    let mut t = [r[0]; 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for i in 0..4 {
        let (a, b, c, d) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
        r[4 * i] = pd_lo(a, c);
        r[4 * i + 1] = pd_hi(a, c);
        r[4 * i + 2] = pd_lo(b, d);
        r[4 * i + 3] = pd_hi(b, d);
    }
    for i in 0..4 {
        for h in 0..2 {
            let (x, y) = (r[i + 8 * h], r[i + 4 + 8 * h]);
            t[i + 8 * h] = _mm512_shuffle_f32x4::<0x88>(x, y);
            t[i + 4 + 8 * h] = _mm512_shuffle_f32x4::<0xdd>(x, y);
        }
    }
    for i in 0..8 {
        r[i] = _mm512_shuffle_f32x4::<0x88>(t[i], t[i + 8]);
        r[i + 8] = _mm512_shuffle_f32x4::<0xdd>(t[i], t[i + 8]);
    }
}

/// The low 64-bit lanes of each 128-bit quarter of `a` and `b`, interleaved.
#[inline]
#[target_feature(enable = "avx512f")]
fn pd_lo(a: __m512, b: __m512) -> __m512 {
    _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)))
}

/// The high 64-bit lanes of each 128-bit quarter of `a` and `b`, interleaved.
#[inline]
#[target_feature(enable = "avx512f")]
fn pd_hi(a: __m512, b: __m512) -> __m512 {
    _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)))
}

/// Runs tile `t` with `a`'s packed panel at `a` (groups of [`MR`] f32, one per step along
/// the depth).
///
/// # Safety
/// The panel holds the tile's `t.depth` steps; `t.b` holds `NR·t.depth` f32; the sums are
/// readable and writable for `t.rows` rows of `t.cols` (≤ [`NR`]) elements, `t.ld` apart; the
/// CPU has AVX512-F.
#[target_feature(enable = "avx512f")]
unsafe fn tile_kernel(t: &Tile, a: *const f32) {
    let masks = masks::<NV>(t.cols);
    // SAFETY: forwarded from the caller.
    let mut acc = unsafe { load_sums::<MR, NV>(t, &masks) };
    let b = t.b.cast::<f32>();
    for q in 0..t.depth {
        // SAFETY: step `q` of both panels lies inside them (caller's contract).
        unsafe {
            let bv = [
                _mm512_loadu_ps(b.add(q * NR)),
                _mm512_loadu_ps(b.add(q * NR + 16)),
            ];
            let aq = a.add(q * MR);
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*aq.add(r));
                for (acc, &bv) in acc.iter_mut().zip(bv.iter()) {
                    *acc = _mm512_fmadd_ps(av, bv, *acc);
                }
            }
        }
    }
    // SAFETY: forwarded from the caller.
    unsafe { store_sums::<MR, NV>(t, &masks, &acc) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose16_turns_columns_into_rows() {
        if !available() {
            eprintln!("no AVX512-F on this CPU: the widened tiles do not run here");
            return;
        }
        let m: Vec<f32> = (0..256).map(|x| x as f32).collect();
        let mut got = [0f32; 256];
        // SAFETY: the CPU has AVX512-F (checked above); every load and store lies in `m` or
        // `got`.
        unsafe {
            let mut r: [__m512; 16] =
                std::array::from_fn(|i| _mm512_loadu_ps(m.as_ptr().add(16 * i)));
            transpose16(&mut r);
            for (i, r) in r.iter().enumerate() {
                _mm512_storeu_ps(got.as_mut_ptr().add(16 * i), *r);
            }
        }
        for i in 0..16 {
            for j in 0..16 {
                assert_eq!(got[16 * i + j], m[16 * j + i], "({i}, {j})");
            }
        }
    }
}
