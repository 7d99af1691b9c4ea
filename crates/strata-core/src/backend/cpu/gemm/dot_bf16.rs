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

use super::blocks::{round_out, round_row};
use super::{MatPtr, One};
use crate::backend::cpu::gather::SharedPtr;
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

/// `dst = beta·c + alpha·(a @ b)` for one bf16 product with `k` > 0, in the product's slot of
/// room (whose blocks [`fits`]).
///
/// When the depth is `a`'s unit stride, its pairs are read where they lie and each task of
/// the pool takes one panel of `b`'s columns through every depth block of an output block
/// and rounds those columns: one parallel region per output block. Otherwise `a`'s panels
/// are packed first for each depth block, then the columns run.
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
    let beta: f32 = one.beta.to();
    let job = Job {
        one,
        pa: SharedPtr(a_room.as_mut_ptr().cast()),
        pb: SharedPtr(b_room.as_mut_ptr().cast()),
        sums: SharedPtr(sums.as_mut_ptr().cast()),
        block,
        alpha: one.alpha.to(),
        c: one.c.filter(|_| beta != 0.0).map(|c| (c, beta)),
    };
    let parallel = matches!(par, Parallelism::Rayon(_));
    let each = |count: usize, f: &(dyn Fn(usize) + Sync)| {
        if parallel {
            (0..count).into_par_iter().for_each(f);
        } else {
            (0..count).for_each(f);
        }
    };
    for i0 in (0..m).step_by(block.m) {
        for j0 in (0..n).step_by(block.n) {
            let o = Out {
                i0,
                j0,
                rows: block.m.min(m - i0),
                cols: block.n.min(n - j0),
            };
            let b_panels = o.cols.div_ceil(NR);
            if one.a.cs == 1 {
                // SAFETY: each task packs and computes its own panel and columns (`Job`).
                each(b_panels, &|panel| unsafe { job.direct_column(o, panel) });
                continue;
            }
            for l0 in (0..k).step_by(block.k) {
                // SAFETY: as above; the panels of `a` are all packed before any column runs.
                each(o.rows.div_ceil(MR), &|panel| unsafe {
                    job.pack_a(o, l0, panel)
                });
                // SAFETY: as above.
                each(b_panels, &|panel| unsafe {
                    job.column(o, l0, panel, false)
                });
            }
            // SAFETY: the block's sums were written above; the output block lies inside
            // `dst`, as the block of `c` inside `c`.
            unsafe {
                let sums =
                    std::slice::from_raw_parts_mut(job.sums.get().cast::<f32>(), o.rows * o.cols);
                round_out(one.dst, job.c, i0, j0, o.cols, sums, job.alpha, par)
            }
        }
    }
}

/// One output block: `rows×cols` from `(i0, j0)`.
#[derive(Debug, Clone, Copy)]
struct Out {
    i0: usize,
    j0: usize,
    rows: usize,
    cols: usize,
}

/// What the tasks of one product share: the product, its room's parts (packed `a`, packed
/// `b`, the block's f32 sums with rows `cols` apart) and the output's scaling.
struct Job<'a> {
    one: &'a One<bf16>,
    pa: SharedPtr,
    pb: SharedPtr,
    sums: SharedPtr,
    block: HalfBlock,
    alpha: f32,
    c: Option<(MatPtr<bf16>, f32)>,
}

impl Job<'_> {
    /// The depth of the depth block at `l0`.
    fn depth(&self, l0: usize) -> usize {
        self.block.k.min(self.one.k - l0)
    }

    /// Words between two panels of packed `a` or `b` per row or column: the pairs of a full
    /// depth block, so that panels of depth blocks of different depths never overlap.
    fn stride(&self) -> usize {
        self.block.k.div_ceil(2)
    }

    /// Packs panel `panel` of `a`'s rows of `o`, depth block `l0`.
    ///
    /// # Safety
    /// The panel is packed by this task alone, and no task reads it meanwhile.
    unsafe fn pack_a(&self, o: Out, l0: usize, panel: usize) {
        let r0 = panel * MR;
        // SAFETY: the panel lies in the room's `a` part (`fits`); the block lies inside `a`.
        unsafe {
            let dst = self.pa.get().cast::<u32>().add(r0 * self.stride());
            pack_a_panel(self.one.a, o.i0 + r0, l0, o.rows - r0, self.depth(l0), dst)
        }
    }

    /// Packs panel `panel` of `b`'s columns of `o` for depth block `l0` and runs its column
    /// of tiles over that block, reading `a` where it lies when `direct`, else from its
    /// packed panels.
    ///
    /// # Safety
    /// The panel and its columns of the sums are this task's alone; `a`'s panels are packed
    /// unless `direct`.
    unsafe fn column(&self, o: Out, l0: usize, panel: usize, direct: bool) {
        let depth = self.depth(l0);
        let p = Packing::new(o.rows, o.cols, depth);
        let c0 = panel * NR;
        let b_panel = self.pb.get().cast::<u32>().wrapping_add(c0 * self.stride());
        // SAFETY: the panel lies in the room's `b` part (`fits`); the block lies inside `b`.
        unsafe { pack_b_panel(self.one.b, l0, o.j0 + c0, depth, o.cols - c0, b_panel) };
        for ip in 0..p.a_panels {
            let r0 = ip * MR;
            let tile = Tile {
                b: b_panel,
                pairs: p.pairs,
                depth,
                sums: self.sums.get().cast::<f32>().wrapping_add(r0 * o.cols + c0),
                ld: o.cols,
                rows: (o.rows - r0).min(MR),
                cols: (o.cols - c0).min(NR),
                first: l0 == 0,
            };
            // SAFETY: the panel of `b` was written above, `a`'s panel before the call (or its
            // rows lie inside it); this tile of the sums lies inside the block and is this
            // task's alone.
            unsafe {
                if direct {
                    let a = self.one.a.at(o.i0 + r0, l0);
                    tile.run(&Direct::new(a, self.one.a.rs, tile.rows))
                } else {
                    tile.run(&Packed(self.pa.get().cast::<u32>().add(r0 * self.stride())))
                }
            }
        }
    }

    /// Panel `panel` of `b`'s columns of `o` through every depth block, `a` read where it
    /// lies, then those columns scaled, `beta·c` added and rounded once into the output.
    ///
    /// # Safety
    /// As [`Job::column`]; the depth is `a`'s unit stride.
    unsafe fn direct_column(&self, o: Out, panel: usize) {
        for l0 in (0..self.one.k).step_by(self.block.k) {
            // SAFETY: forwarded from the caller.
            unsafe { self.column(o, l0, panel, true) };
        }
        let c0 = panel * NR;
        let width = NR.min(o.cols - c0);
        for r in 0..o.rows {
            // SAFETY: these sums lie inside the block and are this task's alone; the output
            // row's columns lie inside `dst` (and `c`).
            unsafe {
                let s = self.sums.get().cast::<f32>().add(r * o.cols + c0);
                let s = std::slice::from_raw_parts_mut(s, width);
                round_row(self.one.dst, self.c, o.i0 + r, o.j0 + c0, s, self.alpha)
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
        for (r, row) in acc.iter_mut().enumerate().take(t.rows) {
            for (v, acc) in row.iter_mut().enumerate() {
                // SAFETY: the masked lanes lie inside row `r` of the tile (caller's contract).
                *acc = unsafe { load(t.sums.add(r * t.ld + 16 * v), masks[v]) };
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
    for (r, row) in acc.iter().enumerate().take(t.rows) {
        for (v, &acc) in row.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { store(t.sums.add(r * t.ld + 16 * v), acc, masks[v]) };
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
