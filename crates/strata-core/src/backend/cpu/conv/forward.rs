//! The direct convolution's forward kernels: one panel of output positions, packed from
//! the image and multiplied by the packed weight on a register tile, written once for
//! AVX-512F (8 channels × 48 positions) and AVX2 with FMA (4 channels × 24 positions) over
//! the [`Isa`] operations.

use std::sync::OnceLock;

use smallvec::SmallVec;

use super::isa::{Avx2, Avx512, Isa};
use super::{runs, Kernel, Problem, Run};

/// The best vector kernel this CPU runs, if any (found once per process).
pub(super) fn best() -> Option<Kernel> {
    static BEST: OnceLock<Option<Kernel>> = OnceLock::new();
    *BEST.get_or_init(|| available().first().map(|&(_, k)| k))
}

/// Every vector kernel this CPU runs, best first.
pub(super) fn available() -> Vec<(&'static str, Kernel)> {
    let mut all = Vec::new();
    if std::arch::is_x86_feature_detected!("avx512f") {
        all.push(("AVX-512F", AVX512));
    }
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        all.push(("AVX2", AVX2));
    }
    all
}

const AVX512: Kernel = Kernel {
    mr: 8,
    nr: 48,
    panel: panel_avx512,
};

const AVX2: Kernel = Kernel {
    mr: 4,
    nr: 24,
    panel: panel_avx2,
};

/// The AVX-512F panel.
///
/// # Safety
/// As [`Kernel::panel`]; the CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn panel_avx512(p: &Problem, a: &[f32], panel: usize, buf: &mut [f32]) {
    // SAFETY: forwarded from the caller.
    unsafe { panel_on::<Avx512, 8, 3>(p, a, panel, buf) }
}

/// The AVX2 panel.
///
/// # Safety
/// As [`Kernel::panel`]; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn panel_avx2(p: &Problem, a: &[f32], panel: usize, buf: &mut [f32]) {
    // SAFETY: forwarded from the caller.
    unsafe { panel_on::<Avx2, 4, 3>(p, a, panel, buf) }
}

/// The most runs a panel spans: one per lane.
const MAX_RUNS: usize = 48;

/// Panel `panel` of `NV·LANES` output positions on `MR×NV` tiles: its columns packed into
/// `buf` (`depth` steps of `NV·LANES` f32), then each group of `MR` output channels.
///
/// # Safety
/// As [`Kernel::panel`], for the kernel of `I`, `MR` and `NV`.
#[inline(always)]
unsafe fn panel_on<I: Isa, const MR: usize, const NV: usize>(
    p: &Problem,
    a: &[f32],
    panel: usize,
    buf: &mut [f32],
) {
    let nr = NV * I::LANES;
    let depth = p.depth();
    let mut rows = [Run::default(); MAX_RUNS];
    let count = runs(p, panel, nr, false, &mut rows);
    // SAFETY: forwarded from the caller.
    unsafe { pack_columns::<I>(p, &rows[..count], nr, buf) };
    let mut samples = [Run::default(); MAX_RUNS];
    let count = runs(p, panel, nr, true, &mut samples);
    let (buf, sums) = buf.split_at_mut(depth * nr);
    // The depth in blocks of at most `DEPTH_BLOCK` steps, every row panel's tile through
    // each block in turn, so that the block's columns stay in the L1 cache while the
    // weight's panels stream past; the sums wait in `sums` between blocks.
    let kc = depth.div_ceil(depth.div_ceil(DEPTH_BLOCK));
    for k0 in (0..depth).step_by(kc) {
        let steps = k0..(k0 + kc).min(depth);
        for o0 in (0..p.sizes.o).step_by(MR) {
            let weight = &a[o0 * depth..(o0 + MR) * depth];
            let sums = &mut sums[o0 * nr..(o0 + MR) * nr];
            // SAFETY: forwarded from the caller.
            unsafe {
                tile::<I, MR, NV>(p, weight, buf, sums, o0, steps.clone(), &samples[..count])
            };
        }
    }
}

/// The most steps along the depth one tile runs before its row panel's neighbours.
const DEPTH_BLOCK: usize = 128;

/// One vector's worth of a run's lanes at one kernel column `j`: loaded from `src` (elements
/// from the start of the image row, lanes outside the image masked off) and stored at lane
/// `lane` of the panel's step (only the run's lanes).
#[derive(Clone, Copy)]
struct Piece<M> {
    src: isize,
    lane: usize,
    load: M,
    store: M,
}

/// Packs the columns of a panel's `runs` (of any number of lanes) into `buf`: step `k = (c, i, j)` of lane `l` at
/// `k·nr + l` holds the image under that lane's position at offset `(i, j)` of channel `c`,
/// or zero in the padding and past the last position. Each run's pieces (where each kernel
/// column reads, and which lanes lie in the image) are worked out once per panel; each step
/// then costs one masked load and store per piece.
///
/// # Safety
/// As [`Kernel::panel`]; `buf` holds `depth·nr` f32.
#[inline(always)]
pub(super) unsafe fn pack_columns<I: Isa>(p: &Problem, runs: &[Run], nr: usize, buf: &mut [f32]) {
    let lanes: usize = runs.iter().map(|r| r.len).sum();
    if lanes < nr {
        buf.fill(0.0);
    }
    // SAFETY: the CPU runs `I` (caller's contract).
    let zero = unsafe { I::zero() };
    // Each run's pieces, kernel column by kernel column: `(j, piece)`, the run's between
    // `ends[run - 1]` and `ends[run]`.
    let mut pieces: SmallVec<[(usize, Piece<I::M>); 144]> = SmallVec::new();
    let mut ends: SmallVec<[usize; 48]> = SmallVec::new();
    for r in runs {
        for j in 0..p.sizes.kw {
            // Lane t of the run reads column x + t + j - pw, inside the image for t in lo..hi.
            let first = (r.x + j) as isize - p.sizes.pw as isize;
            let lo = (-first).max(0) as usize;
            let hi = (p.sizes.w as isize - first).clamp(0, r.len as isize) as usize;
            for t0 in (0..r.len).step_by(I::LANES) {
                let width = I::LANES.min(r.len - t0);
                let (l, h) = (lo.clamp(t0, t0 + width) - t0, hi.clamp(t0, t0 + width) - t0);
                // SAFETY: as above.
                let piece = unsafe {
                    Piece {
                        src: first + t0 as isize,
                        lane: r.lane + t0,
                        load: I::range(l, h.max(l)),
                        store: I::range(0, width),
                    }
                };
                pieces.push((j, piece));
            }
        }
        ends.push(pieces.len());
    }
    let dst = buf.as_mut_ptr();
    for c in 0..p.sizes.c {
        for i in 0..p.sizes.kh {
            // Step `(c, i, j)` is `first + j`.
            let first = (c * p.sizes.kh + i) * p.sizes.kw;
            let mut start = 0;
            for (r, &end) in runs.iter().zip(&ends) {
                let sy = (r.y + i).wrapping_sub(p.sizes.ph);
                let line = p.x.wrapping_add(
                    ((r.n * p.sizes.c + c) * p.sizes.h + sy.min(p.sizes.h)) * p.sizes.w,
                );
                // SAFETY: every write lies in its step's `nr` lanes, inside `buf`; every read
                // inside the run's image row (the masks keep the padding's lanes unread), and
                // none when the row lies in the padding.
                unsafe {
                    for &(j, piece) in &pieces[start..end] {
                        let v = if sy < p.sizes.h {
                            I::load_masked(line.wrapping_offset(piece.src), piece.load)
                        } else {
                            zero
                        };
                        I::store_masked(dst.add((first + j) * nr + piece.lane), v, piece.store);
                    }
                }
                start = end;
            }
        }
    }
}

/// One `MR×NV·LANES` tile over the depth's `steps`: output channels `o0..` (the packed
/// `weight` panel) at the panel's positions (`buf`), from the bias when the steps start the
/// depth (else from `sums`), stored into the output rows of the samples' runs when they end
/// it (else into `sums`).
///
/// # Safety
/// As [`Kernel::panel`]; `buf` holds the packed panel, `sums` `MR·NV·LANES` f32.
#[inline(always)]
unsafe fn tile<I: Isa, const MR: usize, const NV: usize>(
    p: &Problem,
    weight: &[f32],
    buf: &[f32],
    sums: &mut [f32],
    o0: usize,
    steps: std::ops::Range<usize>,
    samples: &[Run],
) {
    let rows = MR.min(p.sizes.o - o0);
    let nr = NV * I::LANES;
    let held = sums.as_mut_ptr();
    // SAFETY: the CPU runs `I` (caller's contract); the bias rows are below `o`; `sums`
    // holds `MR` rows of `nr`.
    let mut acc = unsafe {
        let mut acc = [[I::zero(); NV]; MR];
        for (r, acc) in acc.iter_mut().enumerate() {
            for (v, acc) in acc.iter_mut().enumerate() {
                *acc = if steps.start > 0 {
                    I::load(held.add(r * nr + v * I::LANES))
                } else if r < rows {
                    I::splat(p.bias_at(o0 + r))
                } else {
                    I::zero()
                };
            }
        }
        acc
    };
    let (a, b) = (weight.as_ptr(), buf.as_ptr());
    for q in steps.clone() {
        // SAFETY: every load lies inside `weight` (`MR` per step) or `buf` (`nr` per step).
        unsafe {
            let bq = b.add(q * nr);
            let bv: [I::V; NV] = std::array::from_fn(|v| I::load(bq.add(v * I::LANES)));
            let aq = a.add(q * MR);
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = I::splat(*aq.add(r));
                for (acc, &bv) in acc.iter_mut().zip(bv.iter()) {
                    *acc = I::fma(av, bv, *acc);
                }
            }
        }
    }
    if steps.end < p.depth() {
        for (r, acc) in acc.iter().enumerate() {
            for (v, &acc) in acc.iter().enumerate() {
                // SAFETY: as above.
                unsafe { I::store(held.add(r * nr + v * I::LANES), acc) };
            }
        }
        return;
    }
    let positions = p.positions();
    for s in samples {
        let pos = s.y * p.ow + s.x;
        for (r, acc) in acc.iter().enumerate().take(rows) {
            // Lane l of the tile goes to output position `pos + l - s.lane` of this row.
            let row = p
                .out
                .wrapping_add((s.n * p.sizes.o + o0 + r) * positions + pos);
            for (v, &acc) in acc.iter().enumerate() {
                let first = v * I::LANES;
                let lo = s.lane.clamp(first, first + I::LANES) - first;
                let hi = (s.lane + s.len).clamp(first, first + I::LANES) - first;
                if lo < hi {
                    // SAFETY: the stored lanes are this run's positions in this output row,
                    // inside the output and this task's alone.
                    unsafe {
                        let p = row.wrapping_add(first).wrapping_sub(s.lane);
                        I::store_masked(p, acc, I::range(lo, hi))
                    };
                }
            }
        }
    }
}
