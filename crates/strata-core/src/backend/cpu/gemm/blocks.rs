//! f16/bf16 products widened in bounded f32 blocks: for each output block, the blocks of `a`
//! and `b` along the depth are widened to f32 in turn and multiplied by `gemm::<f32>`, which
//! adds them into an f32 block of sums; the sums are scaled, `beta·c` added, and rounded once
//! into the output. The room is one slot of [`HalfBlock`] (at most `HALF_SLOT_BYTES`), whatever
//! the product's sizes.

use ::gemm::Parallelism;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

use super::{MatPtr, One};
use crate::backend::cpu::convert::{bf16_from_f32_slice, bf16_to_f32_slice};
use crate::backend::cpu::threads::GRAIN_SIZE;
use crate::backend::kernel::{GemmScratch, HalfBlock, HALF_BLOCK};
use crate::dtype::{cast, Element};

/// A half-precision element type, converted to and from f32 a slice at a time.
pub(super) trait Half: Element {
    /// Widens `src` into `dst` (of the same length).
    fn widen(src: &[Self], dst: &mut [f32]);
    /// Rounds `src` into `dst` (of the same length).
    fn narrow(src: &[f32], dst: &mut [Self]);
}

impl Half for f16 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn narrow(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
}

impl Half for bf16 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        bf16_to_f32_slice(src, dst);
    }
    fn narrow(src: &[f32], dst: &mut [Self]) {
        bf16_from_f32_slice(src, dst);
    }
}

/// f32 room that products widen in: `slots` slots of `block.len()` elements each, or none.
#[derive(Clone, Copy)]
pub(super) struct Room {
    ptr: *mut f32,
    slots: usize,
    block: HalfBlock,
}

// SAFETY: a Room addresses the op's own scratch storage; every product (or run of products)
// that uses it at the same time as another has a slot of its own (`slot`).
unsafe impl Send for Room {}
// SAFETY: as above.
unsafe impl Sync for Room {}

impl Room {
    /// The room `scratch` gives (none when it gives none).
    pub(super) fn new(scratch: &GemmScratch) -> Room {
        if scratch.widened.is_null() {
            return Room::none();
        }
        Room {
            ptr: scratch.widened.cast(),
            slots: scratch.slots,
            block: scratch.block,
        }
    }

    fn none() -> Room {
        Room {
            ptr: std::ptr::null_mut(),
            slots: 0,
            block: HalfBlock::default(),
        }
    }

    /// How many slots the room holds.
    pub(super) fn slots(&self) -> usize {
        self.slots
    }

    /// The blocks each slot holds.
    pub(super) fn block(&self) -> HalfBlock {
        self.block
    }

    /// The first f32 of the room (null when there is none).
    pub(super) fn ptr(&self) -> *mut f32 {
        self.ptr
    }

    /// Slot `i` alone (no room when there is no such slot).
    pub(super) fn slot(self, i: usize) -> Room {
        if i >= self.slots {
            return Room::none();
        }
        Room {
            ptr: self.ptr.wrapping_add(i * self.block.len()),
            slots: 1,
            block: self.block,
        }
    }
}

/// Strides, in elements, of a widened block.
#[derive(Clone, Copy)]
struct Strides {
    rs: usize,
    cs: usize,
}

/// `dst = beta·c + alpha·(a @ b)` for one product with `k` > 0, widened in blocks in the
/// product's slot of room (a heap block of the same bound when it was given none).
///
/// # Safety
/// As [`One::run`]: every pointer valid for its matrix, `dst` overlapping neither itself nor
/// the inputs; the product's room, if any, is one slot of `room.block` used by it alone.
pub(super) unsafe fn run<H: Half>(one: &One<H>, par: Parallelism) {
    let (m, n, k) = (one.m, one.n, one.k);
    let mut own = Vec::new();
    let (block, slot) = if one.room.slots == 0 {
        // The op always gives room to products that widen; this keeps a direct call sound.
        let block = HalfBlock::for_product(m, n, k);
        own.resize(block.len(), 0.0f32);
        (block, own.as_mut_slice())
    } else {
        let block = one.room.block;
        // SAFETY: the slot holds `block.len()` f32 of this product alone (caller's contract);
        // it is zeroed before the slice is formed.
        unsafe {
            std::ptr::write_bytes(one.room.ptr, 0, block.len());
            (
                block,
                std::slice::from_raw_parts_mut(one.room.ptr, block.len()),
            )
        }
    };
    let (a32, rest) = slot.split_at_mut(block.m * block.k);
    let (b32, sums) = rest.split_at_mut(block.k * block.n);
    let alpha: f32 = one.alpha.to();
    let beta: f32 = one.beta.to();
    let c = one.c.filter(|_| beta != 0.0).map(|c| (c, beta));
    for i0 in (0..m).step_by(block.m) {
        let rows = block.m.min(m - i0);
        for j0 in (0..n).step_by(block.n) {
            let cols = block.n.min(n - j0);
            let sums = &mut sums[..rows * cols];
            for l0 in (0..k).step_by(block.k) {
                let depth = block.k.min(k - l0);
                let a32 = &mut a32[..rows * depth];
                let b32 = &mut b32[..depth * cols];
                // SAFETY: the blocks lie inside `a` and `b` (caller's contract).
                let (sa, sb) = unsafe {
                    (
                        widen(one.a, i0, l0, rows, depth, a32, par),
                        widen(one.b, l0, j0, depth, cols, b32, par),
                    )
                };
                // SAFETY: the widened blocks and the sums are slices of the sizes and
                // strides given; `gemm` computes sums := [sums +] a32 @ b32, strides
                // column first.
                unsafe {
                    ::gemm::gemm::<f32>(
                        rows,
                        cols,
                        depth,
                        sums.as_mut_ptr(),
                        1,
                        cols as isize,
                        l0 > 0,
                        a32.as_ptr(),
                        sa.cs as isize,
                        sa.rs as isize,
                        b32.as_ptr(),
                        sb.cs as isize,
                        sb.rs as isize,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        par,
                    );
                }
            }
            // SAFETY: the output block lies inside `dst`, as the block of `c` inside `c`.
            unsafe { round_out(one.dst, c, i0, j0, cols, sums, alpha, par) };
        }
    }
}

/// Widens the `rows×cols` block of `src` at `(i0, j0)` into `dst`, line by line along the
/// source's unit stride (rows, or columns of a transposed operand), and says how it lies.
///
/// # Safety
/// The block must lie inside the matrix `src` points to; `dst` holds `rows·cols` elements.
unsafe fn widen<H: Half>(
    src: MatPtr<H>,
    i0: usize,
    j0: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    par: Parallelism,
) -> Strides {
    let by_columns = src.cs != 1 && src.rs == 1;
    let (len, step) = if by_columns {
        (rows, src.rs)
    } else {
        (cols, src.cs)
    };
    let line = |t: usize, d: &mut [f32]| {
        let (i, j) = if by_columns {
            (i0, j0 + t)
        } else {
            (i0 + t, j0)
        };
        // SAFETY: line `t` of the block lies inside the matrix (caller's contract).
        unsafe {
            let p = src.at(i, j);
            if step == 1 {
                H::widen(std::slice::from_raw_parts(p, len), d);
            } else {
                for (x, d) in d.iter_mut().enumerate() {
                    *d = cast::<H, f32>(*p.add(x * step));
                }
            }
        }
    };
    for_lines(dst, len, par, line);
    if by_columns {
        Strides { rs: 1, cs: rows }
    } else {
        Strides { rs: cols, cs: 1 }
    }
}

/// Scales the `rows×cols` sums of the output block at `(i0, j0)` by `alpha`, adds `beta·c`
/// and rounds them once into `dst`.
///
/// # Safety
/// The block must lie inside `dst` (and inside `c`, when given); no other thread writes it.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn round_out<H: Half>(
    dst: MatPtr<H>,
    c: Option<(MatPtr<H>, f32)>,
    i0: usize,
    j0: usize,
    cols: usize,
    sums: &mut [f32],
    alpha: f32,
    par: Parallelism,
) {
    // SAFETY: row `t` of the block lies inside `dst` and `c` (caller's contract).
    let row = |t: usize, s: &mut [f32]| unsafe { round_row(dst, c, i0 + t, j0, s, alpha) };
    for_lines(sums, cols, par, row);
}

/// Scales the sums `s` of row `i`, columns `j0 ..`, by `alpha`, adds `beta·c` and rounds them
/// once into `dst`.
///
/// # Safety
/// The row's `s.len()` (at most [`HALF_BLOCK`]) elements lie inside `dst` (and inside `c`,
/// when given); no other thread writes them.
pub(super) unsafe fn round_row<H: Half>(
    dst: MatPtr<H>,
    c: Option<(MatPtr<H>, f32)>,
    i: usize,
    j0: usize,
    s: &mut [f32],
    alpha: f32,
) {
    let cols = s.len();
    if alpha != 1.0 {
        s.iter_mut().for_each(|v| *v *= alpha);
    }
    // SAFETY: the row lies inside `dst` and `c` (caller's contract); the rounded row is
    // staged on the stack, so the output is only written, never read.
    unsafe {
        if let Some((c, beta)) = c {
            if c.cs == 1 {
                let mut wide = [0f32; HALF_BLOCK];
                let wide = &mut wide[..cols];
                H::widen(std::slice::from_raw_parts(c.at(i, j0), cols), wide);
                for (v, w) in s.iter_mut().zip(wide.iter()) {
                    *v += beta * w;
                }
            } else {
                for (j, v) in s.iter_mut().enumerate() {
                    *v += beta * cast::<H, f32>(*c.at(i, j0 + j));
                }
            }
        }
        if dst.cs == 1 {
            let mut staged = [H::ZERO; HALF_BLOCK];
            let staged = &mut staged[..cols];
            H::narrow(s, staged);
            std::ptr::copy_nonoverlapping(staged.as_ptr(), dst.at(i, j0), cols);
        } else {
            for (j, &v) in s.iter().enumerate() {
                *dst.at(i, j0 + j) = cast::<f32, H>(v);
            }
        }
    }
}

/// Calls `f(t, line)` for every line of `len` elements of `data`, on strata's pool when the
/// product runs there and the block is large.
fn for_lines(data: &mut [f32], len: usize, par: Parallelism, f: impl Fn(usize, &mut [f32]) + Sync) {
    if len == 0 {
        return;
    }
    match par {
        Parallelism::Rayon(_) if data.len() >= GRAIN_SIZE => data
            .par_chunks_mut(len)
            .enumerate()
            .for_each(|(t, d)| f(t, d)),
        _ => data.chunks_mut(len).enumerate().for_each(|(t, d)| f(t, d)),
    }
}
