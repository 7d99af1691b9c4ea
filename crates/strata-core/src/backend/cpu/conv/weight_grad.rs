//! The direct convolution's weight gradient (`Backend::conv2d_direct_weight_grad`): for every
//! output channel `o` and step `k = (c, i, j)` of the depth, the dot product of the output
//! gradient's row `o` with the columns' row `k` over every sample's positions — the columns
//! again never built in memory.
//!
//! The positions of all samples are cut into chunks (as many as keep a chunk's packed columns
//! within [`CHUNK_BYTES`]), and the chunks into a fixed number of parts that depends on the
//! sizes only. A part's task packs each of its chunks' columns from the image and its rows of
//! the gradient, then runs register tiles of dot products (lanes along the positions) for
//! every block of channels and steps, adding each tile's lane sums into the part's own
//! partial sums. The parts' sums are then added in order, so the result does not depend on
//! the number of threads.
//!
//! Vector tiles run on AVX-512F (4 channels × 6 steps) or AVX2 with FMA (3 × 3); other CPUs
//! run [`plain`], which sums in f64. The packed chunk, the gradient's rows and the partial
//! sums are host scratch of the kernel, as the forward's panels are.

use std::cell::RefCell;
use std::sync::OnceLock;

use super::super::threads::spread;
#[cfg(target_arch = "x86_64")]
use super::forward::pack_columns;
#[cfg(target_arch = "x86_64")]
use super::isa::{Avx2, Avx512, Isa};
use super::{runs, Problem, Run};
use crate::backend::args::DirectWeightGradArgs;
use crate::backend::cpu::gather::SharedPtr;

/// Bytes of packed columns one chunk of positions takes at most (it stays in L2).
const CHUNK_BYTES: usize = 1 << 20;

/// The most parts the chunks are cut into (one task each).
const PARTS: usize = 8;

/// Bytes the parts' partial sums take together at most.
const PARTIAL_BYTES: usize = 4 << 20;

/// Computes `args`' weight gradient in f32.
///
/// # Safety
/// As `Backend::conv2d_direct_weight_grad`; the dtype is f32.
pub(in crate::backend::cpu) unsafe fn weight_grad(args: &DirectWeightGradArgs) {
    let p = Problem::for_weight_grad(args);
    let grad: *const f32 = args.grad.cast();
    let out: *mut f32 = args.out.cast();
    let len = p.sizes.o * p.depth();
    if len == 0 {
        return;
    }
    if p.sizes.n * p.positions() == 0 {
        // SAFETY: the output holds `len` writable elements (caller's contract).
        unsafe { std::slice::from_raw_parts_mut(out, len).fill(0.0) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(dots) = best() {
        // SAFETY: forwarded from the caller; `best` checked the CPU's features.
        unsafe { run(&p, grad, out, dots) };
        return;
    }
    // SAFETY: forwarded from the caller.
    unsafe { plain(&p, grad, out) };
}

/// How the positions are cut: `chunks` chunks of `lanes` positions, in `parts` parts.
#[derive(Debug, Clone, Copy)]
struct Cuts {
    lanes: usize,
    chunks: usize,
    parts: usize,
}

impl Cuts {
    fn new(p: &Problem) -> Cuts {
        let lanes = (CHUNK_BYTES / (4 * p.depth())).clamp(64, 2048) / 64 * 64;
        let chunks = (p.sizes.n * p.positions()).div_ceil(lanes);
        let parts = (PARTIAL_BYTES / (4 * p.sizes.o * p.depth()))
            .clamp(1, PARTS)
            .min(chunks);
        Cuts {
            lanes,
            chunks,
            parts,
        }
    }

    /// The chunks of part `part`.
    fn of(&self, part: usize) -> std::ops::Range<usize> {
        part * self.chunks / self.parts..(part + 1) * self.chunks / self.parts
    }
}

/// A vector kernel of the weight gradient.
#[derive(Clone, Copy)]
struct Dots {
    /// Output channels per tile.
    mr: usize,
    /// Steps of the depth per tile.
    nk: usize,
    /// Adds chunk `chunk`'s dot products into `sums` (`o·depth`), packing into `scratch`.
    ///
    /// # Safety
    /// The problem's contract, `grad` its output gradient; `scratch` sized by
    /// [`Scratch::fit`] for this kernel; the CPU has the kernel's features.
    chunk: unsafe fn(&Problem, *const f32, usize, &Cuts, &mut Scratch, &mut [f32]),
}

/// The best vector kernel this CPU runs, if any (found once per process).
#[cfg(target_arch = "x86_64")]
fn best() -> Option<Dots> {
    static BEST: OnceLock<Option<Dots>> = OnceLock::new();
    *BEST.get_or_init(|| available().first().map(|&(_, d)| d))
}

/// Every vector kernel this CPU runs, best first.
#[cfg(target_arch = "x86_64")]
fn available() -> Vec<(&'static str, Dots)> {
    let mut all = Vec::new();
    if std::arch::is_x86_feature_detected!("avx512f") {
        all.push((
            "AVX-512F",
            Dots {
                mr: 4,
                nk: 6,
                chunk: chunk_avx512,
            },
        ));
    }
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        all.push((
            "AVX2",
            Dots {
                mr: 3,
                nk: 3,
                chunk: chunk_avx2,
            },
        ));
    }
    all
}

/// A thread's buffers: a chunk's packed columns (`depth` rows, padded to whole tiles with
/// zero rows), its gradient rows (likewise), and the runs of its positions.
#[derive(Default)]
struct Scratch {
    cols: Vec<f32>,
    grads: Vec<f32>,
    runs: Vec<Run>,
}

impl Scratch {
    /// Sizes the buffers for `p` cut by `cuts` on tiles of `mr × nk`, the padding rows zero.
    fn fit(&mut self, p: &Problem, cuts: &Cuts, mr: usize, nk: usize) {
        let lanes = cuts.lanes;
        let (depth, o) = (p.depth(), p.sizes.o);
        let (rows_k, rows_o) = (depth.div_ceil(nk) * nk, o.div_ceil(mr) * mr);
        self.cols.resize(rows_k * lanes, 0.0);
        self.cols[depth * lanes..rows_k * lanes].fill(0.0);
        self.grads.resize(rows_o * lanes, 0.0);
        self.grads[o * lanes..rows_o * lanes].fill(0.0);
        self.runs.resize(lanes, Run::default());
    }
}

thread_local! {
    /// Each thread's buffers, kept between calls.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs the problem on `dots`: each part on the pool into its partial sums, then the parts'
/// sums added in order into the output.
///
/// # Safety
/// As [`weight_grad`]; the CPU has the kernel's features.
unsafe fn run(p: &Problem, grad: *const f32, out: *mut f32, dots: Dots) {
    let cuts = Cuts::new(p);
    let len = p.sizes.o * p.depth();
    let mut partial = vec![0.0f32; cuts.parts * len];
    let shared = SharedPtr(partial.as_mut_ptr().cast());
    let grad = SharedPtr(grad.cast_mut().cast());
    spread(cuts.parts, &|part| {
        let grad = grad.get().cast::<f32>().cast_const();
        // SAFETY: each part writes its own `len` partial sums.
        let sums = unsafe {
            std::slice::from_raw_parts_mut(shared.get().cast::<f32>().add(part * len), len)
        };
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.fit(p, &cuts, dots.mr, dots.nk);
            for chunk in cuts.of(part) {
                // SAFETY: forwarded from the caller; the scratch fits.
                unsafe { (dots.chunk)(p, grad, chunk, &cuts, &mut scratch, sums) };
            }
        })
    });
    // SAFETY: the output holds `len` writable elements that nothing else touches.
    let out = unsafe { std::slice::from_raw_parts_mut(out, len) };
    out.copy_from_slice(&partial[..len]);
    for part in partial.chunks_exact(len).skip(1) {
        for (o, s) in out.iter_mut().zip(part) {
            *o += s;
        }
    }
}

/// The AVX-512F chunk.
///
/// # Safety
/// As [`Dots::chunk`]; the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn chunk_avx512(
    p: &Problem,
    grad: *const f32,
    chunk: usize,
    cuts: &Cuts,
    scratch: &mut Scratch,
    sums: &mut [f32],
) {
    // SAFETY: forwarded from the caller.
    unsafe { chunk_on::<Avx512, 4, 6>(p, grad, chunk, cuts, scratch, sums) }
}

/// The AVX2 chunk.
///
/// # Safety
/// As [`Dots::chunk`]; the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn chunk_avx2(
    p: &Problem,
    grad: *const f32,
    chunk: usize,
    cuts: &Cuts,
    scratch: &mut Scratch,
    sums: &mut [f32],
) {
    // SAFETY: forwarded from the caller.
    unsafe { chunk_on::<Avx2, 3, 3>(p, grad, chunk, cuts, scratch, sums) }
}

/// Chunk `chunk` on `MR×NK` tiles of `I`: its columns packed from the image, its gradient
/// rows copied, then each tile's dot products added into `sums`.
///
/// # Safety
/// As [`Dots::chunk`], for the kernel of `I`, `MR` and `NK`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn chunk_on<I: Isa, const MR: usize, const NK: usize>(
    p: &Problem,
    grad: *const f32,
    chunk: usize,
    cuts: &Cuts,
    scratch: &mut Scratch,
    sums: &mut [f32],
) {
    let (lanes, depth, positions) = (cuts.lanes, p.depth(), p.positions());
    let Scratch {
        cols,
        grads,
        runs: spans,
    } = scratch;
    let count = runs(p, chunk, lanes, false, spans);
    // SAFETY: forwarded from the caller; `cols` holds `depth` rows of `lanes`.
    unsafe { pack_columns::<I>(p, &spans[..count], lanes, &mut cols[..depth * lanes]) };
    let count = runs(p, chunk, lanes, true, spans);
    let filled: usize = spans[..count].iter().map(|r| r.len).sum();
    if filled < lanes {
        grads[..p.sizes.o * lanes].fill(0.0);
    }
    for o in 0..p.sizes.o {
        let row = &mut grads[o * lanes..(o + 1) * lanes];
        for r in &spans[..count] {
            let from = (r.n * p.sizes.o + o) * positions + r.y * p.ow + r.x;
            // SAFETY: the run's positions lie inside sample `r.n`'s row `o` of the gradient.
            let src = unsafe { std::slice::from_raw_parts(grad.add(from), r.len) };
            row[r.lane..r.lane + r.len].copy_from_slice(src);
        }
    }
    for k0 in (0..depth).step_by(NK) {
        for o0 in (0..p.sizes.o).step_by(MR) {
            // SAFETY: the tile's rows lie inside the padded buffers (`Scratch::fit`).
            let acc = unsafe {
                dots::<I, MR, NK>(
                    grads.as_ptr().add(o0 * lanes),
                    cols.as_ptr().add(k0 * lanes),
                    lanes,
                )
            };
            for (r, acc) in acc.iter().enumerate().take(p.sizes.o - o0) {
                let row = &mut sums[(o0 + r) * depth..(o0 + r + 1) * depth];
                for (c, &acc) in acc.iter().enumerate().take(depth - k0) {
                    // SAFETY: the CPU runs `I`.
                    row[k0 + c] += unsafe { I::sum(acc) };
                }
            }
        }
    }
}

/// The `MR×NK` dot products of `MR` rows from `a` with `NK` rows from `b` (rows `lanes`
/// apart, `lanes` a multiple of the vector's), as vectors of lane sums.
///
/// # Safety
/// The rows are readable; the CPU runs `I`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dots<I: Isa, const MR: usize, const NK: usize>(
    a: *const f32,
    b: *const f32,
    lanes: usize,
) -> [[I::V; NK]; MR] {
    // SAFETY: forwarded from the caller.
    unsafe {
        let mut acc = [[I::zero(); NK]; MR];
        for v in (0..lanes).step_by(I::LANES) {
            let av: [I::V; MR] = std::array::from_fn(|r| I::load(a.add(r * lanes + v)));
            for c in 0..NK {
                let bv = I::load(b.add(c * lanes + v));
                for (acc, &av) in acc.iter_mut().zip(av.iter()) {
                    acc[c] = I::fma(av, bv, acc[c]);
                }
            }
        }
        acc
    }
}

/// The plain weight gradient: each element summed in f64 over the samples and positions in
/// order, rounded once.
///
/// # Safety
/// As [`weight_grad`].
unsafe fn plain(p: &Problem, grad: *const f32, out: *mut f32) {
    let positions = p.positions();
    let mut k = 0;
    for o in 0..p.sizes.o {
        for c in 0..p.sizes.c {
            for i in 0..p.sizes.kh {
                for j in 0..p.sizes.kw {
                    let mut acc = 0.0f64;
                    for n in 0..p.sizes.n {
                        for y in 0..p.oh {
                            for x in 0..p.ow {
                                let (sy, sx) = (
                                    (y + i).wrapping_sub(p.sizes.ph),
                                    (x + j).wrapping_sub(p.sizes.pw),
                                );
                                if sy >= p.sizes.h || sx >= p.sizes.w {
                                    continue;
                                }
                                // SAFETY: both positions lie inside their tensors.
                                let (g, v) = unsafe {
                                    (
                                        *grad.add((n * p.sizes.o + o) * positions + y * p.ow + x),
                                        *p.x.add(
                                            ((n * p.sizes.c + c) * p.sizes.h + sy) * p.sizes.w + sx,
                                        ),
                                    )
                                };
                                acc += g as f64 * v as f64;
                            }
                        }
                    }
                    // SAFETY: the output holds `o·depth` writable elements.
                    unsafe { *out.add(k) = acc as f32 };
                    k += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{values, Shape};
    use super::*;
    use crate::backend::args::ConvSizes;

    fn problem(s: Shape, x: &[f32]) -> Problem {
        let (n, c, h, w, o, kh, kw, ph, pw) = s;
        Problem::for_weight_grad(&DirectWeightGradArgs {
            dtype: crate::DType::F32,
            sizes: ConvSizes {
                n,
                c,
                h,
                w,
                o,
                kh,
                kw,
                ph,
                pw,
            },
            x: x.as_ptr().cast(),
            grad: std::ptr::null(),
            out: std::ptr::null_mut(),
        })
    }

    /// Every kernel this CPU runs (the vector ones and the plain loop) against sums in f64,
    /// within f32's rounding of the terms' magnitudes.
    #[test]
    fn every_kernel_sums_the_weight_gradient() {
        let shapes: [Shape; 6] = [
            (3, 1, 28, 28, 32, 3, 3, 1, 1),
            (2, 32, 14, 14, 64, 3, 3, 1, 1),
            (3, 5, 7, 9, 13, 3, 2, 2, 1),
            (4, 2, 3, 3, 3, 3, 3, 0, 0),
            (2, 6, 1, 37, 9, 1, 3, 0, 2),
            (70, 3, 9, 8, 5, 2, 2, 1, 0),
        ];
        let kernels: Vec<(&str, Option<Dots>)> = {
            #[cfg(target_arch = "x86_64")]
            let mut all: Vec<_> = available().into_iter().map(|(n, d)| (n, Some(d))).collect();
            #[cfg(not(target_arch = "x86_64"))]
            let mut all = Vec::new();
            all.push(("plain", None));
            all
        };
        for (index, &s) in shapes.iter().enumerate() {
            let (n, c, h, w, o, kh, kw, ph, pw) = s;
            let (oh, ow) = (h + 2 * ph + 1 - kh, w + 2 * pw + 1 - kw);
            let x = values(n * c * h * w, 1 + index as u64);
            let g = values(n * o * oh * ow, 50 + index as u64);
            // Exact sums and the sums of the terms' magnitudes, in f64.
            let mut want = vec![(0.0f64, 0.0f64); o * c * kh * kw];
            for (e, want) in want.iter_mut().enumerate() {
                let (oc, ij) = (e / (kh * kw), e % (kh * kw));
                let (oo, cc, i, j) = (oc / c, oc % c, ij / kw, ij % kw);
                for nn in 0..n {
                    for y in 0..oh {
                        for xx in 0..ow {
                            let (sy, sx) = ((y + i).wrapping_sub(ph), (xx + j).wrapping_sub(pw));
                            if sy < h && sx < w {
                                let t = g[((nn * o + oo) * oh + y) * ow + xx] as f64
                                    * x[((nn * c + cc) * h + sy) * w + sx] as f64;
                                want.0 += t;
                                want.1 += t.abs();
                            }
                        }
                    }
                }
            }
            for (name, dots) in &kernels {
                let mut got = vec![f32::NAN; o * c * kh * kw];
                let p = problem(s, &x);
                let out = got.as_mut_ptr();
                // SAFETY: the buffers hold what the problem addresses; `got` is written by
                // this call alone.
                unsafe {
                    match dots {
                        #[cfg(target_arch = "x86_64")]
                        Some(d) => run(&p, g.as_ptr(), out, *d),
                        _ => plain(&p, g.as_ptr(), out),
                    }
                }
                for (e, (got, (exact, size))) in got.iter().zip(&want).enumerate() {
                    let tol = 1e-5 * size;
                    assert!(
                        (*got as f64 - exact).abs() <= tol,
                        "{name}, shape {s:?}: element {e} is {got}, the exact sum {exact}"
                    );
                }
            }
        }
    }
}
