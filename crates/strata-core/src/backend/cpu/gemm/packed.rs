//! Half-precision products on register tiles of this crate's own kernels, in the same blocks
//! and the same room as the widening path (`blocks`), so the op allocates the same whatever
//! the CPU and whichever kernel runs: for each output block and each depth block, `a` and `b`
//! are packed into the room as panels of 32-bit words (`a` in panels of a kernel's
//! [`Kernel::MR`] rows, `b` in panels of [`Kernel::NR`] columns, zero-padded), a register tile
//! of `MR×NR` f32 sums runs over every word along the depth, and the block's sums stay in the
//! room's f32 sums between depth blocks. The sums are then scaled, `beta·c` added, and rounded
//! once into the output, as on the widening path.
//!
//! A [`Kernel`] says how a word holds the depth (a pair of bf16 for AVX512-BF16's dot
//! products, one widened f32 for the FMA tiles) and runs the tile; this module drives it.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::{
    __m512, _mm512_loadu_ps, _mm512_mask_loadu_ps, _mm512_mask_storeu_ps, _mm512_setzero_ps,
    _mm512_storeu_ps,
};

use ::gemm::Parallelism;
use rayon::prelude::*;

use super::blocks::{round_out, round_row, Half};
use super::{MatPtr, One};
use crate::backend::cpu::gather::SharedPtr;
use crate::backend::kernel::HalfBlock;

/// A register-tile kernel for products in `H`.
pub(super) trait Kernel {
    /// The element type of the operands.
    type H: Half;
    /// Rows of `a` in one register tile (and one packed panel).
    const MR: usize;
    /// Columns of `b` in one register tile (and one packed panel).
    const NR: usize;
    /// Elements along the depth that one packed word holds.
    const PER_WORD: usize;
    /// Whether a tile reads `a`'s rows where they lie when the depth is `a`'s unit stride.
    const READS_A_IN_PLACE: bool;

    /// Packs a panel of `a` ([`Kernel::MR`] lanes, rows of `a`) into `dst` in groups of `MR`
    /// words, one per word along the depth, zero past the lanes and the depth.
    ///
    /// # Safety
    /// Every element of `l` is readable; `dst` is writable for `MR` words per word along
    /// `l.depth`; the CPU runs the kernel ([`Kernel`]'s implementor says which features).
    unsafe fn pack_a(l: &Lanes<Self::H>, dst: *mut u32);

    /// Packs a panel of `b` ([`Kernel::NR`] lanes, columns of `b`) into `dst` in groups of
    /// `NR` words, one per word along the depth, zero past the lanes and the depth.
    ///
    /// # Safety
    /// As [`Kernel::pack_a`], `dst` writable for `NR` words per word along the depth.
    unsafe fn pack_b(l: &Lanes<Self::H>, dst: *mut u32);

    /// Runs `t` with `a` from its packed panel ([`Kernel::pack_a`]).
    ///
    /// # Safety
    /// As [`Tile`]'s fields say; the panel holds the tile's words; the CPU runs the kernel.
    unsafe fn tile_packed(t: &Tile, a: *const u32);

    /// Runs `t` with `a`'s `rows` (the tile's) rows read where they lie from `first`, `rs`
    /// elements apart, the depth their unit stride. Called only when
    /// [`Kernel::READS_A_IN_PLACE`]; the others keep this body, which says so.
    ///
    /// # Safety
    /// As [`Kernel::tile_packed`]; the rows' `t.depth` elements are readable.
    unsafe fn tile_in_place(_t: &Tile, _first: *const Self::H, _rs: usize) {
        unreachable!("this kernel reads `a` from packed panels only")
    }
}

/// How one `rows×depth · depth×cols` block packs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Packing {
    /// Words along the depth.
    words: usize,
    /// Panels of `MR` rows of `a`.
    a_panels: usize,
    /// Panels of `NR` columns of `b`.
    b_panels: usize,
}

impl Packing {
    fn new<K: Kernel>(rows: usize, cols: usize, depth: usize) -> Packing {
        Packing {
            words: depth.div_ceil(K::PER_WORD),
            a_panels: rows.div_ceil(K::MR),
            b_panels: cols.div_ceil(K::NR),
        }
    }
}

/// Whether the packed blocks of `block` fit the room the widening path would use: packed `a`
/// in the room of its f32 block, packed `b` in that of `b`.
pub(super) fn fits<K: Kernel>(block: HalfBlock) -> bool {
    let p = Packing::new::<K>(block.m, block.n, block.k);
    block.k > 0
        && p.a_panels * K::MR * p.words <= block.m * block.k
        && p.b_panels * K::NR * p.words <= block.k * block.n
}

/// `dst = beta·c + alpha·(a @ b)` for one product with `k` > 0 on kernel `K`, in the product's
/// slot of room (whose blocks [`fits`]).
///
/// When the kernel reads `a` where it lies and the depth is `a`'s unit stride, each task of
/// the pool takes one panel of `b`'s columns through every depth block of an output block and
/// rounds those columns: one parallel region per output block. Otherwise `a`'s panels are
/// packed first for each depth block, then the columns run.
///
/// # Safety
/// As [`One::run`]; the CPU runs `K`; the product has one slot of room of its own.
pub(super) unsafe fn run<K: Kernel>(one: &One<K::H>, par: Parallelism) {
    let (m, n, k) = (one.m, one.n, one.k);
    let block = one.room.block();
    debug_assert!(one.room.slots() == 1 && fits::<K>(block));
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
    let in_place = K::READS_A_IN_PLACE && one.a.cs == 1;
    for i0 in (0..m).step_by(block.m) {
        for j0 in (0..n).step_by(block.n) {
            let o = Out {
                i0,
                j0,
                rows: block.m.min(m - i0),
                cols: block.n.min(n - j0),
            };
            let b_panels = o.cols.div_ceil(K::NR);
            if in_place {
                // SAFETY: each task packs and computes its own panel and columns (`Job`).
                each(b_panels, &|panel| unsafe {
                    job.in_place_column::<K>(o, panel)
                });
                continue;
            }
            for l0 in (0..k).step_by(block.k) {
                // SAFETY: as above; the panels of `a` are all packed before any column runs.
                each(o.rows.div_ceil(K::MR), &|panel| unsafe {
                    job.pack_a::<K>(o, l0, panel)
                });
                // SAFETY: as above.
                each(b_panels, &|panel| unsafe {
                    job.column::<K>(o, l0, panel, false)
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
struct Job<'a, H> {
    one: &'a One<H>,
    pa: SharedPtr,
    pb: SharedPtr,
    sums: SharedPtr,
    block: HalfBlock,
    alpha: f32,
    c: Option<(MatPtr<H>, f32)>,
}

impl<H: Half> Job<'_, H> {
    /// The depth of the depth block at `l0`.
    fn depth(&self, l0: usize) -> usize {
        self.block.k.min(self.one.k - l0)
    }

    /// Words between two panels of packed `a` or `b` per row or column: the words of a full
    /// depth block, so that panels of depth blocks of different depths never overlap.
    fn stride<K: Kernel>(&self) -> usize {
        self.block.k.div_ceil(K::PER_WORD)
    }

    /// Packs panel `panel` of `a`'s rows of `o`, depth block `l0`.
    ///
    /// # Safety
    /// The panel is packed by this task alone, and no task reads it meanwhile.
    unsafe fn pack_a<K: Kernel<H = H>>(&self, o: Out, l0: usize, panel: usize) {
        let r0 = panel * K::MR;
        let a = self.one.a;
        let lanes = Lanes {
            // SAFETY: `(i0 + r0, l0)` lies inside `a` (the block lies inside it).
            base: unsafe { a.at(o.i0 + r0, l0) },
            lane_stride: a.rs,
            depth_stride: a.cs,
            lanes: (o.rows - r0).min(K::MR),
            depth: self.depth(l0),
        };
        // SAFETY: the panel lies in the room's `a` part (`fits`); the block lies inside `a`.
        unsafe {
            let dst = self.pa.get().cast::<u32>().add(r0 * self.stride::<K>());
            K::pack_a(&lanes, dst)
        }
    }

    /// Packs panel `panel` of `b`'s columns of `o` for depth block `l0` and runs its column
    /// of tiles over that block, reading `a` where it lies when `in_place`, else from its
    /// packed panels.
    ///
    /// # Safety
    /// The panel and its columns of the sums are this task's alone; `a`'s panels are packed
    /// unless `in_place`.
    unsafe fn column<K: Kernel<H = H>>(&self, o: Out, l0: usize, panel: usize, in_place: bool) {
        let depth = self.depth(l0);
        let p = Packing::new::<K>(o.rows, o.cols, depth);
        let c0 = panel * K::NR;
        let b_panel = self
            .pb
            .get()
            .cast::<u32>()
            .wrapping_add(c0 * self.stride::<K>());
        let b = self.one.b;
        let lanes = Lanes {
            // SAFETY: `(l0, j0 + c0)` lies inside `b` (the block lies inside it).
            base: unsafe { b.at(l0, o.j0 + c0) },
            lane_stride: b.cs,
            depth_stride: b.rs,
            lanes: (o.cols - c0).min(K::NR),
            depth,
        };
        // SAFETY: the panel lies in the room's `b` part (`fits`); the block lies inside `b`.
        unsafe { K::pack_b(&lanes, b_panel) };
        for ip in 0..p.a_panels {
            let r0 = ip * K::MR;
            let tile = Tile {
                b: b_panel,
                words: p.words,
                depth,
                sums: self.sums.get().cast::<f32>().wrapping_add(r0 * o.cols + c0),
                ld: o.cols,
                rows: (o.rows - r0).min(K::MR),
                cols: (o.cols - c0).min(K::NR),
                first: l0 == 0,
            };
            // SAFETY: the panel of `b` was written above, `a`'s panel before the call (or its
            // rows lie inside it); this tile of the sums lies inside the block and is this
            // task's alone.
            unsafe {
                if in_place {
                    K::tile_in_place(&tile, self.one.a.at(o.i0 + r0, l0), self.one.a.rs)
                } else {
                    let a = self.pa.get().cast::<u32>().add(r0 * self.stride::<K>());
                    K::tile_packed(&tile, a)
                }
            }
        }
    }

    /// Panel `panel` of `b`'s columns of `o` through every depth block, `a` read where it
    /// lies, then those columns scaled, `beta·c` added and rounded once into the output.
    ///
    /// # Safety
    /// As [`Job::column`]; the depth is `a`'s unit stride and `K` reads `a` in place.
    unsafe fn in_place_column<K: Kernel<H = H>>(&self, o: Out, panel: usize) {
        for l0 in (0..self.one.k).step_by(self.block.k) {
            // SAFETY: forwarded from the caller.
            unsafe { self.column::<K>(o, l0, panel, true) };
        }
        let c0 = panel * K::NR;
        let width = K::NR.min(o.cols - c0);
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

/// Up to a panel's width of lanes (rows of `a` or columns of `b`) of `depth` elements each,
/// strides in elements.
pub(super) struct Lanes<H> {
    /// The first element of the first lane.
    pub(super) base: *const H,
    /// Elements between two lanes.
    pub(super) lane_stride: usize,
    /// Elements between two steps along the depth.
    pub(super) depth_stride: usize,
    /// Lanes that hold data (the rest of the panel is zero).
    pub(super) lanes: usize,
    /// Elements along the depth.
    pub(super) depth: usize,
}

/// One register tile: `MR×NR` f32 sums over `words` words of `a` and of a packed panel of
/// `b`, of which the first `rows` rows and `cols` columns are stored (`ld` apart) into `sums`;
/// they start at zero when `first`, else at what `sums` holds.
pub(super) struct Tile {
    /// The packed panel of `b`: `NR` words per word along the depth.
    pub(super) b: *const u32,
    /// Words along the depth.
    pub(super) words: usize,
    /// Elements along the depth (for pairs, `2·words`, less one when it is odd).
    pub(super) depth: usize,
    /// The tile's first sum.
    pub(super) sums: *mut f32,
    /// Elements between two rows of the sums.
    pub(super) ld: usize,
    /// Rows of the tile that are stored (1..=MR).
    pub(super) rows: usize,
    /// Columns of the tile that are stored (1..=NR).
    pub(super) cols: usize,
    /// Whether the sums start at zero.
    pub(super) first: bool,
}

/// The lanes of vector `v` (16 columns) that fall inside `cols` columns.
#[inline(always)]
pub(super) fn lane_mask(cols: usize, v: usize) -> u16 {
    let valid = cols.saturating_sub(16 * v).min(16);
    ((1u32 << valid) - 1) as u16
}

/// Loads a tile's `MR` rows of `NV` vectors of sums (zeros when it is the first depth block).
///
/// # Safety
/// As [`Tile`]'s fields say; `NV` vectors cover `NR`; the CPU has AVX512-F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn load_sums<const MR: usize, const NV: usize>(
    t: &Tile,
    masks: &[u16; NV],
) -> [[__m512; NV]; MR] {
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    if !t.first {
        for (r, row) in acc.iter_mut().enumerate().take(t.rows) {
            for (v, acc) in row.iter_mut().enumerate() {
                // SAFETY: the masked lanes lie inside row `r` of the tile (caller's contract).
                *acc = unsafe { load(t.sums.add(r * t.ld + 16 * v), masks[v]) };
            }
        }
    }
    acc
}

/// Stores a tile's stored rows and columns of sums.
///
/// # Safety
/// As [`load_sums`].
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn store_sums<const MR: usize, const NV: usize>(
    t: &Tile,
    masks: &[u16; NV],
    acc: &[[__m512; NV]; MR],
) {
    for (r, row) in acc.iter().enumerate().take(t.rows) {
        for (v, &acc) in row.iter().enumerate() {
            // SAFETY: the masked lanes lie inside row `r` of the tile (caller's contract).
            unsafe { store(t.sums.add(r * t.ld + 16 * v), acc, masks[v]) };
        }
    }
}

/// The masks of a tile's `NV` vectors of columns.
#[inline(always)]
pub(super) fn masks<const NV: usize>(cols: usize) -> [u16; NV] {
    std::array::from_fn(|v| lane_mask(cols, v))
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
