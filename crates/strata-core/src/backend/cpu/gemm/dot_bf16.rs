//! bf16 products on AVX512-BF16's dot-product instruction (`vdpbf16ps`), which multiplies
//! pairs of bf16 values and adds both products into one f32 lane: twice the multiply-adds of
//! an f32 FMA per instruction, with no widening of the operands.
//!
//! The kernel runs in `packed`'s blocks and room (those of the widening path): `a` and `b`
//! are packed as pairs along the depth, a register tile of [`MR`]×[`NR`] f32 sums runs over
//! every pair. The instruction treats subnormal inputs as zero and flushes subnormal results,
//! as PyTorch's own bf16 kernels on such CPUs do.
//!
//! How fast the instruction runs depends on the core: on AMD's Zen 4 the products ran at
//! about 1.5× the f32 `gemm`'s rate, while on Intel's Sapphire and Emerald Rapids one
//! `vdpbf16ps` on 512 bits issues every two cycles against two f32 FMAs per cycle, so the
//! dot products peak at half the f32 rate and those CPUs widen instead (`widened`).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::{
    __m512, __m512bh, __m512i, _mm512_castps_si512, _mm512_dpbf16_ps, _mm512_fmadd_ps,
    _mm512_loadu_si512, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setzero_ps, _mm512_setzero_si512,
};

use half::bf16;

use super::packed::{load_sums, masks, store_sums, Kernel, Lanes, Tile};

/// Rows of `a` in one register tile (and one packed panel).
const MR: usize = 12;
/// 16-lane vectors across one register tile.
const NV: usize = 2;
/// Columns of `b` in one register tile (and one packed panel).
const NR: usize = 16 * NV;

/// Whether this CPU runs the bf16 dot products (checked once, cached by the standard library).
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512bf16")
}

/// Whether this CPU's cores run `vdpbf16ps`'s multiply-adds at half the f32 FMAs' rate:
/// Intel's (on Emerald Rapids one 512-bit `vdpbf16ps` issues every two cycles, against two
/// 512-bit FMAs per cycle). Read once: CPUID traps to the hypervisor in a virtual machine.
pub(super) fn half_rate() -> bool {
    static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INTEL.get_or_init(|| {
        let id = std::arch::x86_64::__cpuid(0);
        let vendor = [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes);
        vendor.concat() == b"GenuineIntel"
    })
}

/// Nanoseconds per 512-bit `vdpbf16ps` and per 512-bit `vfmadd231ps` on this core (`None`
/// without AVX512-BF16), each timed over 20 independent sums so that the issue rate, not the
/// latency, bounds them: the measurement behind [`half_rate`].
pub(super) fn issue_times() -> Option<(f64, f64)> {
    if !available() {
        return None;
    }
    const ROUNDS: usize = 2_000_000;
    let best = |f: &dyn Fn()| {
        (0..3)
            .map(|_| {
                let t = std::time::Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e9 / (20 * ROUNDS) as f64
            })
            .fold(f64::MAX, f64::min)
    };
    // SAFETY: the CPU has AVX512-BF16 and AVX512-F (checked above).
    let dot = best(&|| unsafe { chains::<true>(ROUNDS) });
    // SAFETY: as above.
    let fma = best(&|| unsafe { chains::<false>(ROUNDS) });
    Some((dot, fma))
}

/// `rounds` rounds of 20 independent `vdpbf16ps` (`DOT`) or `vfmadd231ps` on 512 bits.
///
/// # Safety
/// The CPU has AVX512-F and AVX512-BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn chains<const DOT: bool>(rounds: usize) {
    let x = std::hint::black_box(_mm512_set1_ps(1e-3));
    let y = std::hint::black_box(_mm512_set1_ps(1e-3));
    let mut acc = [_mm512_setzero_ps(); 20];
    for _ in 0..rounds {
        for acc in acc.iter_mut() {
            *acc = if DOT {
                _mm512_dpbf16_ps(
                    *acc,
                    as_bh(_mm512_castps_si512(x)),
                    as_bh(_mm512_castps_si512(y)),
                )
            } else {
                _mm512_fmadd_ps(x, y, *acc)
            };
        }
    }
    std::hint::black_box(acc);
}

/// The bf16 dot-product kernel: words are pairs of bf16 along the depth, summed by
/// `vdpbf16ps` into a `MR×NR` tile.
pub(super) struct DotBf16;

impl Kernel for DotBf16 {
    type H = bf16;
    const MR: usize = MR;
    const NR: usize = NR;
    const PER_WORD: usize = 2;
    const READS_A_IN_PLACE: bool = true;

    unsafe fn pack_a(l: &Lanes<bf16>, dst: *mut u32) {
        // SAFETY: forwarded from the caller; the CPU has AVX512-BF16 and so AVX512-F and -BW.
        unsafe { pack(l, MR, dst) }
    }

    unsafe fn pack_b(l: &Lanes<bf16>, dst: *mut u32) {
        // SAFETY: as above.
        unsafe { pack(l, NR, dst) }
    }

    unsafe fn tile_packed(t: &Tile, a: *const u32) {
        // SAFETY: forwarded from the caller.
        unsafe { tile_kernel(t, &Packed(a)) }
    }

    unsafe fn tile_in_place(t: &Tile, first: *const bf16, rs: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { tile_kernel(t, &Direct::new(first, rs, t.rows)) }
    }
}

/// The bits of `x`.
#[inline(always)]
fn bits(x: bf16) -> u32 {
    u32::from(x.to_bits())
}

/// Packs `l` into `w`-word groups, one per pair along the depth: word `q·w + lane` holds the
/// lane's elements `2q` (low half) and `2q + 1` (high half), zero past the lanes and the depth.
///
/// # Safety
/// Every element of `l` is readable; `dst` is writable for `w·depth.div_ceil(2)` words; the
/// CPU has AVX512-F and AVX512-BW (the loops are vectorised for them).
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack(l: &Lanes<bf16>, w: usize, dst: *mut u32) {
    let pairs = l.depth.div_ceil(2);
    let whole = l.depth / 2;
    // SAFETY: every word written lies in the `w·pairs` of `dst`; every element read lies
    // inside `l` (caller's contract).
    unsafe {
        let out = std::slice::from_raw_parts_mut(dst, w * pairs);
        if l.lane_stride == 1 && l.lanes == w {
            // Lanes side by side: two lines across the lanes interleave into one group.
            for (q, group) in out.chunks_exact_mut(w).enumerate() {
                let even = std::slice::from_raw_parts(l.base.add(2 * q * l.depth_stride), w);
                if q < whole {
                    let odd =
                        std::slice::from_raw_parts(l.base.add((2 * q + 1) * l.depth_stride), w);
                    for ((w, e), o) in group.iter_mut().zip(even).zip(odd) {
                        *w = bits(*e) | bits(*o) << 16;
                    }
                } else {
                    for (w, e) in group.iter_mut().zip(even) {
                        *w = bits(*e);
                    }
                }
            }
            return;
        }
        for lane in 0..w {
            if lane >= l.lanes {
                for q in 0..pairs {
                    out[q * w + lane] = 0;
                }
                continue;
            }
            let line = l.base.add(lane * l.lane_stride);
            if l.depth_stride == 1 {
                // Along the depth: a pair is one unaligned 32-bit word.
                for q in 0..whole {
                    out[q * w + lane] = line.add(2 * q).cast::<u32>().read_unaligned();
                }
            } else {
                let at = |e: usize| bits(*line.add(e * l.depth_stride));
                for q in 0..whole {
                    out[q * w + lane] = at(2 * q) | at(2 * q + 1) << 16;
                }
            }
            if whole < pairs {
                out[whole * w + lane] = bits(*line.add((l.depth - 1) * l.depth_stride));
            }
        }
    }
}

/// Where a register tile reads its pairs of `a`.
trait Pairs {
    /// The pair of row `r` at pair `q` (low half first along the depth).
    ///
    /// # Safety
    /// `r < MR` and `q` is below the tile's pairs.
    unsafe fn pair(&self, q: usize, r: usize) -> u32;

    /// The low half of that pair alone (the high half zero): an odd depth's last pair,
    /// whose high half lies past the block.
    ///
    /// # Safety
    /// As [`Pairs::pair`].
    unsafe fn low(&self, q: usize, r: usize) -> u32;
}

/// A packed panel of `a` ([`pack_a_panel`]).
struct Packed(*const u32);

impl Pairs for Packed {
    #[inline(always)]
    unsafe fn pair(&self, q: usize, r: usize) -> u32 {
        // SAFETY: the panel holds `MR` words per pair (caller's contract).
        unsafe { *self.0.add(q * MR + r) }
    }

    #[inline(always)]
    unsafe fn low(&self, q: usize, r: usize) -> u32 {
        // SAFETY: as above; packing already zeroed the high half.
        unsafe { self.pair(q, r) }
    }
}

/// Rows of `a` read where they lie, the depth their unit stride: a pair is two adjacent
/// elements. Rows past the block repeat its last row (their sums are never stored).
struct Direct {
    rows: [*const bf16; MR],
}

impl Direct {
    /// The `rows` (1..=MR) rows from `first`, `rs` elements apart.
    fn new(first: *const bf16, rs: usize, rows: usize) -> Direct {
        Direct {
            rows: std::array::from_fn(|r| first.wrapping_add(r.min(rows - 1) * rs)),
        }
    }
}

impl Pairs for Direct {
    #[inline(always)]
    unsafe fn pair(&self, q: usize, r: usize) -> u32 {
        // SAFETY: the pair lies inside row `r` of the block (caller's contract); a pair is
        // two bf16, read unaligned.
        unsafe { self.rows[r].add(2 * q).cast::<u32>().read_unaligned() }
    }

    #[inline(always)]
    unsafe fn low(&self, q: usize, r: usize) -> u32 {
        // SAFETY: the pair's first element lies inside row `r` of the block (caller's
        // contract); the second is not read.
        bits(unsafe { *self.rows[r].add(2 * q) })
    }
}

/// Runs tile `t` ([`Tile`]) with `a`'s pairs from `a`.
///
/// # Safety
/// `a` holds the tile's pairs for rows `0..MR`; `t.b` holds `NR·t.words` words; the sums are
/// readable and writable for `t.rows` rows of `t.cols` (≤ [`NR`]) elements, `t.ld` apart; the
/// CPU has AVX512-F and AVX512-BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile_kernel<A: Pairs>(t: &Tile, a: &A) {
    let masks = masks::<NV>(t.cols);
    // SAFETY: forwarded from the caller.
    let mut acc = unsafe { load_sums::<MR, NV>(t, &masks) };
    // Every pair but an odd depth's last, whose high half lies past the block.
    let whole = t.depth / 2;
    for q in 0..whole {
        // SAFETY: pair `q` lies inside both operands (caller's contract).
        unsafe { step::<A, false>(&mut acc, a, t.b, q) };
    }
    if whole < t.words {
        // SAFETY: as above; only the pair's low half is read.
        unsafe { step::<A, true>(&mut acc, a, t.b, whole) };
    }
    // SAFETY: forwarded from the caller.
    unsafe { store_sums::<MR, NV>(t, &masks, &acc) };
}

/// Adds pair `q` of every row of `a` (its low half alone when `LOW`) times pair `q` of `b`
/// into the sums.
///
/// # Safety
/// As [`tile_kernel`], with `q` below the tile's pairs.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn step<A: Pairs, const LOW: bool>(
    acc: &mut [[__m512; NV]; MR],
    a: &A,
    b: *const u32,
    q: usize,
) {
    let mut bv = [as_bh(_mm512_setzero_si512()); NV];
    for (v, bv) in bv.iter_mut().enumerate() {
        // SAFETY: pair `q` of the `b` panel lies inside it (caller's contract).
        *bv = as_bh(unsafe { _mm512_loadu_si512(b.add(q * NR + 16 * v).cast()) });
    }
    for (r, acc) in acc.iter_mut().enumerate() {
        // SAFETY: forwarded from the caller.
        let pair = unsafe {
            if LOW {
                a.low(q, r)
            } else {
                a.pair(q, r)
            }
        };
        let av = as_bh(_mm512_set1_epi32(pair as i32));
        for (acc, &bv) in acc.iter_mut().zip(bv.iter()) {
            *acc = _mm512_dpbf16_ps(*acc, av, bv);
        }
    }
}

/// The same 512 bits read as 32 bf16 values.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16")]
fn as_bh(x: __m512i) -> __m512bh {
    // SAFETY: both are 512-bit plain vectors; every bit pattern is valid for either.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(x) }
}
