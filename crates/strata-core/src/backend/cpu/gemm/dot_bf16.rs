//! bf16 products on AVX512-BF16's dot-product instruction (`vdpbf16ps`), which multiplies
//! pairs of bf16 values and adds both products into one f32 lane: twice the multiply-adds of
//! an f32 FMA per instruction, with no widening of the operands.
//!
//! The product runs in the same blocks and the same room as the widening path (`blocks`), so
//! the op allocates the same whatever the CPU: for each output block and each depth block, `a`
//! and `b` are packed into the room as pairs along the depth (`a` in panels of [`MR`] rows,
//! `b` in panels of [`NR`] columns, zero-padded), a register tile of `MR×NR` f32 sums runs
//! over every pair, and the block's sums stay in the room's f32 sums between depth blocks.
//! The sums are then scaled, `beta·c` added, and rounded once into the output, as on the
//! widening path. The instruction treats subnormal inputs as zero and flushes subnormal
//! results, as PyTorch's own bf16 kernels on such CPUs do.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::{
    __m512, __m512bh, __m512i, _mm512_dpbf16_ps, _mm512_loadu_ps, _mm512_loadu_si512,
    _mm512_mask_loadu_ps, _mm512_mask_storeu_ps, _mm512_set1_epi32, _mm512_setzero_ps,
    _mm512_setzero_si512, _mm512_storeu_ps,
};

use ::gemm::Parallelism;
use half::bf16;
use rayon::prelude::*;

use super::blocks::round_out;
use super::{MatPtr, One};
use crate::backend::kernel::HalfBlock;

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

/// How one `rows×depth · depth×cols` block packs: panels of pairs along the depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Packing {
    /// Pairs along the depth (the last one padded with a zero when the depth is odd).
    pairs: usize,
    /// Panels of [`MR`] rows of `a`.
    a_panels: usize,
    /// Panels of [`NR`] columns of `b`.
    b_panels: usize,
}

impl Packing {
    fn new(rows: usize, cols: usize, depth: usize) -> Packing {
        Packing {
            pairs: depth.div_ceil(2),
            a_panels: rows.div_ceil(MR),
            b_panels: cols.div_ceil(NR),
        }
    }

    /// 32-bit words of packed `a`.
    fn a_words(self) -> usize {
        self.a_panels * MR * self.pairs
    }

    /// 32-bit words of packed `b`.
    fn b_words(self) -> usize {
        self.b_panels * NR * self.pairs
    }
}

/// Whether the packed blocks of `block` fit the room the widening path would use: packed `a`
/// in the room of its f32 block, packed `b` in that of `b` (true for all but small blocks).
pub(super) fn fits(block: HalfBlock) -> bool {
    let p = Packing::new(block.m, block.n, block.k);
    block.k > 0 && p.a_words() <= block.m * block.k && p.b_words() <= block.k * block.n
}

/// A raw pointer shared by the tasks of one block, each touching only its own part.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);

// SAFETY: the tasks of a block write disjoint panels (packing) or tiles (sums) through it and
// only read what no task writes meanwhile.
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The pointer (a method, so that closures capture the whole `Shared`).
    fn get(self) -> *mut T {
        self.0
    }
}

/// `dst = beta·c + alpha·(a @ b)` for one bf16 product with `k` > 0, in the product's slot of
/// room (whose blocks [`fits`]).
///
/// # Safety
/// As [`One::run`]; the CPU has AVX512-BF16 ([`available`]); the product has one slot of room
/// of its own.
pub(super) unsafe fn run(one: &One<bf16>, par: Parallelism) {
    let (m, n, k) = (one.m, one.n, one.k);
    let block = one.room.block();
    debug_assert!(one.room.slots() == 1 && fits(block));
    // SAFETY: the slot holds `block.len()` f32 of this product alone (caller's contract).
    let slot = unsafe { std::slice::from_raw_parts_mut(one.room.ptr(), block.len()) };
    let (a_room, rest) = slot.split_at_mut(block.m * block.k);
    let (b_room, sums) = rest.split_at_mut(block.k * block.n);
    let pa = Shared(a_room.as_mut_ptr().cast::<u32>());
    let pb = Shared(b_room.as_mut_ptr().cast::<u32>());
    let alpha: f32 = one.alpha.to();
    let beta: f32 = one.beta.to();
    let c = one.c.filter(|_| beta != 0.0).map(|c| (c, beta));
    let parallel = matches!(par, Parallelism::Rayon(_));
    for i0 in (0..m).step_by(block.m) {
        let rows = block.m.min(m - i0);
        for j0 in (0..n).step_by(block.n) {
            let cols = block.n.min(n - j0);
            let sums = Shared(sums[..rows * cols].as_mut_ptr());
            for l0 in (0..k).step_by(block.k) {
                let depth = block.k.min(k - l0);
                let p = Packing::new(rows, cols, depth);
                // `a` is read where it lies when the depth is its unit stride; packed
                // first otherwise.
                let direct = one.a.cs == 1;
                let pack_a = |panel: usize| {
                    let r0 = panel * MR;
                    // SAFETY: panel `panel` of packed `a` lies in the room's `a` part
                    // (`fits`), written by this task alone; the block lies inside `a`.
                    unsafe {
                        let dst = pa.get().add(r0 * p.pairs);
                        pack_a_panel(one.a, i0 + r0, l0, rows - r0, depth, dst)
                    }
                };
                let column = |panel: usize| {
                    let c0 = panel * NR;
                    let b_panel = pb.get().wrapping_add(c0 * p.pairs);
                    // SAFETY: panel `panel` of packed `b` lies in the room's `b` part
                    // (`fits`), written by this task alone; the block lies inside `b`.
                    unsafe { pack_b_panel(one.b, l0, j0 + c0, depth, cols - c0, b_panel) };
                    for ip in 0..p.a_panels {
                        let r0 = ip * MR;
                        let tile = Tile {
                            b: b_panel,
                            pairs: p.pairs,
                            depth,
                            sums: sums.get().wrapping_add(r0 * cols + c0),
                            ld: cols,
                            rows: (rows - r0).min(MR),
                            cols: (cols - c0).min(NR),
                            first: l0 == 0,
                        };
                        // SAFETY: the panels of `a` and `b` were written above, or `a`'s rows
                        // lie inside it; this tile of the sums is written by this task alone,
                        // inside the `rows×cols` block.
                        unsafe {
                            if direct {
                                let a = one.a.at(i0 + r0, l0);
                                tile.run(&Direct::new(a, one.a.rs, tile.rows))
                            } else {
                                tile.run(&Packed(pa.get().add(r0 * p.pairs)))
                            }
                        }
                    }
                };
                if parallel {
                    if !direct {
                        (0..p.a_panels).into_par_iter().for_each(pack_a);
                    }
                    (0..p.b_panels).into_par_iter().for_each(column);
                } else {
                    if !direct {
                        (0..p.a_panels).for_each(pack_a);
                    }
                    (0..p.b_panels).for_each(column);
                }
            }
            // SAFETY: the block's sums were written above; the output block lies inside
            // `dst`, as the block of `c` inside `c`.
            unsafe {
                let sums = std::slice::from_raw_parts_mut(sums.get(), rows * cols);
                round_out(one.dst, c, i0, j0, cols, sums, alpha, par)
            }
        }
    }
}

/// The bits of `x`.
#[inline(always)]
fn bits(x: bf16) -> u32 {
    u32::from(x.to_bits())
}

/// Packs rows `i0 .. i0 + rows.min(MR)` of `a`, columns `l0 .. l0 + depth`, into one panel:
/// word `q·MR + r` holds `a[i0 + r, l0 + 2q]` in its low half and `a[i0 + r, l0 + 2q + 1]` in
/// its high half, zero past the block.
///
/// # Safety
/// The block must lie inside `a`; `dst` is writable for `MR·depth.div_ceil(2)` words; the CPU
/// has AVX512-F and AVX512-BW.
unsafe fn pack_a_panel(
    a: MatPtr<bf16>,
    i0: usize,
    l0: usize,
    rows: usize,
    depth: usize,
    dst: *mut u32,
) {
    let lanes = Lanes {
        // SAFETY: `(i0, l0)` lies inside `a` (caller's contract).
        base: unsafe { a.at(i0, l0) },
        lane_stride: a.rs,
        depth_stride: a.cs,
        lanes: rows.min(MR),
        depth,
    };
    // SAFETY: forwarded from the caller.
    unsafe { pack::<MR>(&lanes, dst) }
}

/// Packs columns `j0 .. j0 + cols.min(NR)` of `b`, rows `l0 .. l0 + depth`, into one panel:
/// word `q·NR + c` holds `b[l0 + 2q, j0 + c]` in its low half and `b[l0 + 2q + 1, j0 + c]` in
/// its high half, zero past the block.
///
/// # Safety
/// As [`pack_a_panel`], for `NR` columns of `b`.
unsafe fn pack_b_panel(
    b: MatPtr<bf16>,
    l0: usize,
    j0: usize,
    depth: usize,
    cols: usize,
    dst: *mut u32,
) {
    let lanes = Lanes {
        // SAFETY: `(l0, j0)` lies inside `b` (caller's contract).
        base: unsafe { b.at(l0, j0) },
        lane_stride: b.cs,
        depth_stride: b.rs,
        lanes: cols.min(NR),
        depth,
    };
    // SAFETY: forwarded from the caller.
    unsafe { pack::<NR>(&lanes, dst) }
}

/// Up to `W` lanes (rows of `a` or columns of `b`) of `depth` elements, strides in elements.
struct Lanes {
    base: *const bf16,
    lane_stride: usize,
    depth_stride: usize,
    lanes: usize,
    depth: usize,
}

/// Packs `l` into `W`-word groups, one per pair along the depth: word `q·W + lane` holds the
/// lane's elements `2q` (low half) and `2q + 1` (high half), zero past the lanes and the depth.
///
/// # Safety
/// Every element of `l` is readable; `dst` is writable for `W·depth.div_ceil(2)` words; the
/// CPU has AVX512-F and AVX512-BW (the loops are vectorised for them).
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack<const W: usize>(l: &Lanes, dst: *mut u32) {
    let pairs = l.depth.div_ceil(2);
    let whole = l.depth / 2;
    // SAFETY: every word written lies in the `W·pairs` of `dst`; every element read lies
    // inside `l` (caller's contract).
    unsafe {
        let out = std::slice::from_raw_parts_mut(dst, W * pairs);
        if l.lane_stride == 1 && l.lanes == W {
            // Lanes side by side: two lines across the lanes interleave into one group.
            for (q, group) in out.chunks_exact_mut(W).enumerate() {
                let even = std::slice::from_raw_parts(l.base.add(2 * q * l.depth_stride), W);
                if q < whole {
                    let odd =
                        std::slice::from_raw_parts(l.base.add((2 * q + 1) * l.depth_stride), W);
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
        for lane in 0..W {
            if lane >= l.lanes {
                for q in 0..pairs {
                    out[q * W + lane] = 0;
                }
                continue;
            }
            let line = l.base.add(lane * l.lane_stride);
            if l.depth_stride == 1 {
                // Along the depth: a pair is one unaligned 32-bit word.
                for q in 0..whole {
                    out[q * W + lane] = line.add(2 * q).cast::<u32>().read_unaligned();
                }
            } else {
                let at = |e: usize| bits(*line.add(e * l.depth_stride));
                for q in 0..whole {
                    out[q * W + lane] = at(2 * q) | at(2 * q + 1) << 16;
                }
            }
            if whole < pairs {
                out[whole * W + lane] = bits(*line.add((l.depth - 1) * l.depth_stride));
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

/// One register tile: `MR×NR` f32 sums over `pairs` pairs of `a` and of a packed panel of
/// `b` ([`pack_b_panel`]), of which the first `rows` rows and `cols` columns are stored
/// (`ld` apart) into `sums`; they start at zero when `first`, else at what `sums` holds.
struct Tile {
    b: *const u32,
    pairs: usize,
    /// The depth (`2·pairs`, less one when it is odd: the last pair's high half is zero).
    depth: usize,
    sums: *mut f32,
    ld: usize,
    rows: usize,
    cols: usize,
    first: bool,
}

impl Tile {
    /// Runs the tile on this CPU ([`available`]).
    ///
    /// # Safety
    /// `a` holds the tile's pairs for rows `0..MR`; `b` holds `NR·pairs` words; `sums` is
    /// readable and writable for `rows` rows of `cols` (≤ [`NR`]) elements, `ld` apart; the
    /// CPU has AVX512-F and AVX512-BF16.
    #[inline(always)]
    unsafe fn run<A: Pairs>(&self, a: &A) {
        // SAFETY: forwarded from the caller.
        unsafe { tile_kernel(self, a) }
    }
}

/// The body of [`Tile::run`].
///
/// # Safety
/// As [`Tile::run`].
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile_kernel<A: Pairs>(t: &Tile, a: &A) {
    let mut masks = [0u16; NV];
    for (v, mask) in masks.iter_mut().enumerate() {
        *mask = lane_mask(t.cols, v);
    }
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    if !t.first {
        for r in 0..t.rows {
            for v in 0..NV {
                // SAFETY: the masked lanes lie inside row `r` of the tile (caller's contract).
                acc[r][v] = unsafe { load(t.sums.add(r * t.ld + 16 * v), masks[v]) };
            }
        }
    }
    // Every pair but an odd depth's last, whose high half lies past the block.
    let whole = t.depth / 2;
    for q in 0..whole {
        // SAFETY: pair `q` lies inside both operands (caller's contract).
        unsafe { step::<A, false>(&mut acc, a, t.b, q) };
    }
    if whole < t.pairs {
        // SAFETY: as above; only the pair's low half is read.
        unsafe { step::<A, true>(&mut acc, a, t.b, whole) };
    }
    for r in 0..t.rows {
        for v in 0..NV {
            // SAFETY: as for the loads.
            unsafe { store(t.sums.add(r * t.ld + 16 * v), acc[r][v], masks[v]) };
        }
    }
}

/// Adds pair `q` of every row of `a` (its low half alone when `LOW`) times pair `q` of `b`
/// into the sums.
///
/// # Safety
/// As [`Tile::run`], with `q` below the tile's pairs.
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

/// The lanes of vector `v` (16 columns) that fall inside `cols` columns.
#[inline(always)]
fn lane_mask(cols: usize, v: usize) -> u16 {
    let valid = cols.saturating_sub(16 * v).min(16);
    ((1u32 << valid) - 1) as u16
}

/// The same 512 bits read as 32 bf16 values.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16")]
fn as_bh(x: __m512i) -> __m512bh {
    // SAFETY: both are 512-bit plain vectors; every bit pattern is valid for either.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(x) }
}

/// Loads the lanes of `mask` from `p` (zero elsewhere).
///
/// # Safety
/// The CPU has AVX512-F; the masked lanes are readable.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load(p: *const f32, mask: u16) -> __m512 {
    // SAFETY: forwarded from the caller; masked-off lanes are not read.
    unsafe {
        if mask == u16::MAX {
            _mm512_loadu_ps(p)
        } else {
            _mm512_mask_loadu_ps(_mm512_setzero_ps(), mask, p)
        }
    }
}

/// Stores the lanes of `mask` of `x` to `p`.
///
/// # Safety
/// The CPU has AVX512-F; the masked lanes are writable.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn store(p: *mut f32, x: __m512, mask: u16) {
    // SAFETY: forwarded from the caller; masked-off lanes are not written.
    unsafe {
        if mask == u16::MAX {
            _mm512_storeu_ps(p, x)
        } else {
            _mm512_mask_storeu_ps(p, mask, x)
        }
    }
}
