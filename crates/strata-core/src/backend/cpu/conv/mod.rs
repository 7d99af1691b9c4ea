//! The direct convolution (`Backend::conv2d_direct`, `Backend::conv2d_direct_weight_grad`): a
//! stride-1 convolution as an implicit product `weight · columns` whose columns are never
//! built in memory.
//!
//! Forward (`forward.rs`; the input's gradient is a forward convolution of the output's
//! gradient by the flipped weight): the weight is packed once per call in panels of a
//! tile's rows (output channels), one group of rows per step along the depth `(c, i, j)`.
//! The output positions of all samples are cut into panels of a tile's columns; each task
//! packs one panel's columns straight from the image (one masked load and store per output
//! row it spans and kernel offset, zeros in the padding) into a buffer of its thread, then
//! runs every row panel's register tile from the bias through the depth, block by block,
//! and stores the tile into the output rows of the samples its positions belong to. So the
//! columns never leave the cache and the output is written once. The weight's gradient
//! (`weight_grad.rs`) packs chunks of positions the same way and takes dot products along
//! them.
//!
//! Vector tiles run on AVX-512F, or on AVX2 with FMA; other CPUs run [`plain`] (and the
//! weight gradient's plain loop), the forward's summing in the same order with the same
//! fused multiply-adds, so every path gives the same bits. The packed weight, the panels
//! and the chunks are host scratch of the kernel, as the `gemm` crate's packing is: the
//! op's allocations do not depend on the CPU.

#[cfg(target_arch = "x86_64")]
mod forward;
#[cfg(target_arch = "x86_64")]
mod isa;
#[cfg(test)]
mod tests;
mod weight_grad;

use std::cell::RefCell;

use super::threads::{num_threads, spread};
use crate::backend::args::{ConvSizes, DirectConvArgs, DirectWeightGradArgs};
pub(super) use weight_grad::weight_grad;

/// Computes `args`' convolution in f32.
///
/// # Safety
/// As `Backend::conv2d_direct`; the dtype is f32.
pub(super) unsafe fn direct(args: &DirectConvArgs) {
    let p = Problem::new(args);
    if p.out_len() == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = forward::best() {
        // SAFETY: forwarded from the caller; `best` checked the CPU's features.
        unsafe { run(&p, kernel) };
        return;
    }
    // SAFETY: forwarded from the caller.
    unsafe { plain(&p) };
}

/// One call's sizes and operands, in elements.
#[derive(Clone, Copy)]
struct Problem {
    sizes: ConvSizes,
    /// The output plane ([`ConvSizes::out_plane`]).
    oh: usize,
    ow: usize,
    x: *const f32,
    weight: *const f32,
    ws: [usize; 4],
    flip: bool,
    bias: *const f32,
    bias_stride: usize,
    out: *mut f32,
}

// SAFETY: the pointers address the caller's locked operands for the whole call; tasks read
// the inputs and write disjoint positions of the output.
unsafe impl Send for Problem {}
// SAFETY: as above.
unsafe impl Sync for Problem {}

impl Problem {
    /// The problem of a forward convolution (or an input gradient, through a flipped weight).
    fn new(a: &DirectConvArgs) -> Problem {
        Problem {
            weight: a.weight.cast(),
            ws: a.weight_strides,
            flip: a.flip,
            bias: a.bias.cast(),
            bias_stride: a.bias_stride,
            ..Problem::of(&a.sizes, a.x, a.out)
        }
    }

    /// The problem of a weight gradient: `args`' image and sizes (no weight, no bias; the
    /// output pointer is the weight gradient's).
    fn for_weight_grad(a: &DirectWeightGradArgs) -> Problem {
        Problem::of(&a.sizes, a.x, a.out)
    }

    /// `sizes` over the image `x` into `out`, with no weight and no bias.
    fn of(sizes: &ConvSizes, x: *const u8, out: *mut u8) -> Problem {
        let (oh, ow) = sizes.out_plane();
        Problem {
            sizes: *sizes,
            oh,
            ow,
            x: x.cast(),
            weight: std::ptr::null(),
            ws: [0; 4],
            flip: false,
            bias: std::ptr::null(),
            bias_stride: 0,
            out: out.cast(),
        }
    }

    /// Steps along the depth: `(c, i, j)`, `j` fastest.
    fn depth(&self) -> usize {
        self.sizes.depth()
    }

    /// Output positions per sample.
    fn positions(&self) -> usize {
        self.oh * self.ow
    }

    fn out_len(&self) -> usize {
        self.sizes.n * self.sizes.o * self.positions()
    }

    /// `weight(row, c, i, j)`.
    ///
    /// # Safety
    /// The indices lie inside the weight.
    unsafe fn weight_at(&self, row: usize, c: usize, i: usize, j: usize) -> f32 {
        let (i, j) = if self.flip {
            (self.sizes.kh - 1 - i, self.sizes.kw - 1 - j)
        } else {
            (i, j)
        };
        let at = row * self.ws[0] + c * self.ws[1] + i * self.ws[2] + j * self.ws[3];
        // SAFETY: forwarded from the caller.
        unsafe { *self.weight.add(at) }
    }

    /// The bias of output channel `row` (zero without one).
    ///
    /// # Safety
    /// `row` is below `o`.
    unsafe fn bias_at(&self, row: usize) -> f32 {
        if self.bias.is_null() {
            return 0.0;
        }
        // SAFETY: forwarded from the caller.
        unsafe { *self.bias.add(row * self.bias_stride) }
    }
}

/// A vector kernel: the widths of its register tile and the function that computes one
/// panel of output positions with it.
#[derive(Clone, Copy)]
struct Kernel {
    /// Output channels per tile.
    mr: usize,
    /// Output positions per tile.
    nr: usize,
    /// Computes panel `panel` with the packed weight `a` into the output, packing the
    /// panel's columns into `buf` (`depth·nr` f32, then `nr` per row of the packed weight
    /// for the sums).
    ///
    /// # Safety
    /// The problem's contract; `a` holds the packed weight ([`pack_weight`] for `mr`); the
    /// CPU has the kernel's features; the panel's output positions are this task's alone.
    panel: unsafe fn(&Problem, &[f32], usize, &mut [f32]),
}

thread_local! {
    /// Each thread's panel buffer, kept between calls.
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs the problem on `kernel`: the weight packed once, then the panels of output
/// positions side by side on the pool.
///
/// # Safety
/// As [`direct`]; the CPU has the kernel's features.
unsafe fn run(p: &Problem, kernel: Kernel) {
    // SAFETY: forwarded from the caller.
    let a = unsafe { pack_weight(p, kernel.mr) };
    let panels = (p.sizes.n * p.positions()).div_ceil(kernel.nr);
    let pieces = panels.min(num_threads() * 8);
    // The panel's packed columns, then its tiles' sums between blocks of the depth.
    let len = (p.depth() + p.sizes.o.div_ceil(kernel.mr) * kernel.mr) * kernel.nr;
    spread(pieces, &|piece| {
        PANEL.with(|buf| {
            let mut buf = buf.borrow_mut();
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
            for panel in piece * panels / pieces..(piece + 1) * panels / pieces {
                // SAFETY: forwarded from the caller; the pieces' panels are disjoint.
                unsafe { (kernel.panel)(p, &a, panel, &mut buf[..len]) };
            }
        })
    });
}

/// The weight in panels of `mr` rows: row `r` of panel `q`'s step `k` at
/// `(q·depth + k)·mr + r`, zero past the last row.
///
/// # Safety
/// As [`direct`].
unsafe fn pack_weight(p: &Problem, mr: usize) -> Vec<f32> {
    let depth = p.depth();
    let mut a = vec![0.0; p.sizes.o.div_ceil(mr) * mr * depth];
    for row in 0..p.sizes.o {
        let (q, r) = (row / mr, row % mr);
        let mut k = 0;
        for c in 0..p.sizes.c {
            for i in 0..p.sizes.kh {
                for j in 0..p.sizes.kw {
                    // SAFETY: the indices lie inside the weight (caller's contract).
                    a[(q * depth + k) * mr + r] = unsafe { p.weight_at(row, c, i, j) };
                    k += 1;
                }
            }
        }
    }
    a
}

/// A run of a panel's lanes over consecutive output positions of one output row of one
/// sample: lanes `lane..lane + len` are positions `(y, x..x + len)` of sample `n`.
#[derive(Clone, Copy, Default)]
struct Run {
    lane: usize,
    len: usize,
    n: usize,
    y: usize,
    x: usize,
}

/// The runs of output rows that panel `panel` of `nr` lanes covers, into `runs`; returns
/// how many. With `whole_samples`, a run goes on to the end of its sample (the output's
/// runs: a sample's positions are consecutive in the output).
fn runs(p: &Problem, panel: usize, nr: usize, whole_samples: bool, runs: &mut [Run]) -> usize {
    let total = p.sizes.n * p.positions();
    let first = panel * nr;
    let lanes = nr.min(total - first);
    let mut count = 0;
    let mut lane = 0;
    while lane < lanes {
        let g = first + lane;
        let (n, pos) = (g / p.positions(), g % p.positions());
        let (y, x) = (pos / p.ow, pos % p.ow);
        let left = if whole_samples {
            p.positions() - pos
        } else {
            p.ow - x
        };
        let len = left.min(lanes - lane);
        runs[count] = Run { lane, len, n, y, x };
        count += 1;
        lane += len;
    }
    count
}

/// The plain convolution: for each output, the bias plus every step's fused multiply-add in
/// the depth's order, zeros in the padding multiplied as the vector kernels multiply them.
///
/// # Safety
/// As [`direct`].
unsafe fn plain(p: &Problem) {
    let positions = p.positions();
    for n in 0..p.sizes.n {
        for row in 0..p.sizes.o {
            // SAFETY: `row` is below `o`.
            let bias = unsafe { p.bias_at(row) };
            for y in 0..p.oh {
                for x in 0..p.ow {
                    let mut acc = bias;
                    for c in 0..p.sizes.c {
                        for i in 0..p.sizes.kh {
                            for j in 0..p.sizes.kw {
                                let (sy, sx) = (
                                    (y + i).wrapping_sub(p.sizes.ph),
                                    (x + j).wrapping_sub(p.sizes.pw),
                                );
                                let v = if sy < p.sizes.h && sx < p.sizes.w {
                                    // SAFETY: the position lies inside the image.
                                    unsafe {
                                        *p.x.add(
                                            ((n * p.sizes.c + c) * p.sizes.h + sy) * p.sizes.w + sx,
                                        )
                                    }
                                } else {
                                    0.0
                                };
                                // SAFETY: the indices lie inside the weight.
                                let wv = unsafe { p.weight_at(row, c, i, j) };
                                acc = wv.mul_add(v, acc);
                            }
                        }
                    }
                    // SAFETY: the output position lies inside the output, which this call
                    // alone writes.
                    unsafe { *p.out.add((n * p.sizes.o + row) * positions + y * p.ow + x) = acc };
                }
            }
        }
    }
}
