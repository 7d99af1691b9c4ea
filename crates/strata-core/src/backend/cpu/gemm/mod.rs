//! Matrix products over strided memory: the `gemm` crate for f32 and f64, f16 and bf16 summed
//! in f32 and rounded once (`half`), a plain loop with wrapping arithmetic for integers.
//!
//! A product is a batch of `m×k · k×n` products whose operands are described by their element
//! offsets and strides ([`Mat`], [`Product`]), so transposed, sliced and broadcast operands are
//! read where they are. [`gemm`] runs one over raw storage pointers; the op layer validates the
//! operands and locks the storages first.

mod blocks;
#[cfg(target_arch = "x86_64")]
mod dot_bf16;
mod fold;
mod half;
#[cfg(test)]
mod kernel_tests;
#[cfg(target_arch = "x86_64")]
mod packed;
#[cfg(target_arch = "x86_64")]
mod widened;

use ::gemm::Parallelism;
use rayon::prelude::*;

use super::threads::{num_threads, pool, spread};
use crate::backend::args::GemmArgs;
use crate::backend::kernel::{GemmScratch, Mat, Product};
use crate::dtype::{cast, dispatch, DType, DTypeFn, Element};
use crate::layout::{checked_numel, contiguous_strides};
use crate::Scalar;
use blocks::Room;
use fold::fold;
pub(crate) use fold::unravel;
pub use half::{bf16_dot_issue_times, half_kernel, HalfKernel};

/// Multiply-adds (`m·n·k`) from which a product is spread over strata's pool.
const PARALLEL_WORK: usize = 1 << 17;

/// Multiply-adds below which an f32 or f64 product on the pool is cut into one slab of rows
/// or columns per thread, each run on one thread, rather than threaded inside `gemm`: at
/// these sizes `gemm` keeps a product with few rows (an LSTM step's 128 × 128 · 128 × 512)
/// on one thread.
const SPLIT_WORK: usize = 1 << 25;

/// The fewest rows or columns a slab of a split product gets.
const SPLIT_MIN: usize = 32;

/// Computes `out = beta·c + alpha·(a @ b)` for every product of the batch `p`, in `dtype`:
/// `a`, `b` and `c` are the base pointers of the storages that [`Mat`] offsets count from
/// (`p.a`, `p.b` and the `Mat` given with `c`), `out` that of the output, written through
/// `out_mat`. `c` is ignored when absent or when `beta` is zero (even where it holds NaN), the
/// product when `alpha` is zero. With a result buffer in `scratch` the products are computed
/// there first and then copied into the output; f16 and bf16 products that widen in blocks
/// do so in its f32 room.
///
/// # Safety
/// Every element that `p`, `c`'s `Mat` and `out_mat` address, counted in elements of `dtype`
/// from its base pointer, must lie in memory that stays valid for the call: the inputs'
/// readable, the output's writable and touched by nothing else meanwhile (the op holds the
/// storages locked). Without a result buffer, the output must not overlap itself or any
/// input. Each non-null `scratch` pointer addresses the elements [`GemmScratch`] says, used
/// by nothing else.
pub(crate) unsafe fn gemm(args: &GemmArgs<'_>) {
    let job = Job {
        product: args.product,
        out: args.out_mat,
        c: args.c.map(|(_, m)| m),
        a_ptr: args.a,
        b_ptr: args.b,
        c_ptr: args.c.map_or(std::ptr::null(), |(ptr, _)| ptr),
        out_ptr: args.out,
        alpha: args.alpha,
        beta: args.beta,
        scratch: args.scratch,
    };
    dispatch(args.dtype, &job);
}

/// A raw pointer to a matrix inside a locked storage, with its strides in elements.
struct MatPtr<T> {
    ptr: *mut T,
    rs: usize,
    cs: usize,
}

impl<T> MatPtr<T> {
    /// The same matrix read as elements of `U` (of the same size: the dtype's own type).
    fn cast<U>(self) -> MatPtr<U> {
        debug_assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<U>());
        MatPtr {
            ptr: self.ptr.cast(),
            rs: self.rs,
            cs: self.cs,
        }
    }
}

impl<T> Clone for MatPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for MatPtr<T> {}

// SAFETY: a MatPtr points into a storage locked for the whole product (or into a buffer the
// product owns); threads only write disjoint rows of the output through it.
unsafe impl<T> Send for MatPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for MatPtr<T> {}

impl<T: Copy> MatPtr<T> {
    /// Address of element `(i, j)`.
    ///
    /// # Safety
    /// `(i, j)` must be inside the matrix.
    #[inline(always)]
    unsafe fn at(&self, i: usize, j: usize) -> *mut T {
        // SAFETY: forwarded from the caller.
        unsafe { self.ptr.add(i * self.rs + j * self.cs) }
    }

    /// The matrix whose `(0, 0)` element is at `offset` from this pointer.
    ///
    /// # Safety
    /// The offset must stay inside the allocation.
    unsafe fn shifted(&self, offset: usize, rs: usize, cs: usize) -> MatPtr<T> {
        MatPtr {
            // SAFETY: forwarded from the caller.
            ptr: unsafe { self.ptr.add(offset) },
            rs,
            cs,
        }
    }
}

/// One `m×k · k×n` product: `dst = beta·c + alpha·(a @ b)`; `c` is ignored when absent or
/// when `beta` is zero (even where it holds NaN), the product when `alpha` is zero.
struct One<T> {
    m: usize,
    n: usize,
    k: usize,
    dst: MatPtr<T>,
    a: MatPtr<T>,
    b: MatPtr<T>,
    c: Option<MatPtr<T>>,
    alpha: Scalar,
    beta: Scalar,
    /// f32 room for f16/bf16 products that widen in blocks: one slot (or none), used by
    /// this product alone while it runs.
    room: Room,
}

impl<T> One<T> {
    /// The same product read as elements of `U` (the dtype's own type).
    fn cast<U>(&self) -> One<U> {
        One {
            m: self.m,
            n: self.n,
            k: self.k,
            dst: self.dst.cast(),
            a: self.a.cast(),
            b: self.b.cast(),
            c: self.c.map(MatPtr::cast),
            alpha: self.alpha,
            beta: self.beta,
            room: self.room,
        }
    }
}

impl<T: Element> One<T> {
    /// # Safety
    /// Every pointer must be valid for its matrix; `dst` must not overlap itself or the inputs.
    unsafe fn run(&self, par: Parallelism) {
        match T::DTYPE {
            // SAFETY: forwarded from the caller.
            DType::F32 | DType::F64 => unsafe { self.run_gemm(par) },
            // Half precision accumulates in f32 and rounds once, as PyTorch's CPU kernels do
            // (an f16 accumulator overflows on sums whose result fits).
            // SAFETY: forwarded from the caller; f16 and bf16 are these types' dtypes.
            DType::F16 => unsafe { half::run(&self.cast::<::half::f16>(), par) },
            // SAFETY: as above.
            DType::BF16 => unsafe { half::run(&self.cast::<::half::bf16>(), par) },
            // SAFETY: forwarded from the caller.
            _ => unsafe { self.run_loop(par) },
        }
    }

    /// f32 and f64: `gemm` on the operands as they lie; a medium product on the pool in
    /// slabs (see [`SPLIT_WORK`]).
    unsafe fn run_gemm(&self, par: Parallelism) {
        let (m, n, k) = (self.m, self.n, self.k);
        if let Parallelism::Rayon(threads) = par {
            let slabs = threads.min(m.max(n) / SPLIT_MIN);
            if slabs > 1 && m.saturating_mul(n).saturating_mul(k) < SPLIT_WORK {
                // SAFETY: forwarded from the caller.
                return unsafe { self.run_slabs(slabs) };
            }
        }
        let alpha: T = self.alpha.to();
        let beta: T = self.beta.to();
        let c = self.c.filter(|_| beta != T::ZERO);
        let product = k > 0 && alpha != T::ZERO;
        let d = self.dst;
        // SAFETY: indices stay inside the matrices (caller's contract).
        unsafe {
            if let Some(c) = c {
                let bf = beta.to_f64();
                for i in 0..m {
                    for j in 0..n {
                        *d.at(i, j) = cast::<f64, T>(bf * (*c.at(i, j)).to_f64());
                    }
                }
            } else if !product {
                for i in 0..m {
                    for j in 0..n {
                        *d.at(i, j) = T::ZERO;
                    }
                }
            }
            if product {
                let (a, b) = (self.a, self.b);
                // gemm computes dst := alpha·dst + beta·lhs·rhs, strides column first.
                ::gemm::gemm::<T>(
                    m,
                    n,
                    k,
                    d.ptr,
                    d.cs as isize,
                    d.rs as isize,
                    c.is_some(),
                    a.ptr,
                    a.cs as isize,
                    a.rs as isize,
                    b.ptr,
                    b.cs as isize,
                    b.rs as isize,
                    T::ONE,
                    alpha,
                    false,
                    false,
                    false,
                    par,
                );
            }
        }
    }

    /// Runs the product as `slabs` products over consecutive columns of `b` and the output
    /// (or rows of `a` and the output, when there are more rows), side by side on the pool,
    /// each on one thread. Every output element is computed as the whole product computes it.
    ///
    /// # Safety
    /// As [`One::run`].
    unsafe fn run_slabs(&self, slabs: usize) {
        let by_columns = self.n >= self.m;
        let len = if by_columns { self.n } else { self.m };
        (0..slabs).into_par_iter().for_each(|s| {
            let (lo, hi) = (s * len / slabs, (s + 1) * len / slabs);
            // SAFETY: each slab's rows or columns lie inside the matrices (caller's
            // contract), and the slabs write disjoint parts of the output.
            unsafe {
                let part = if by_columns {
                    One {
                        n: hi - lo,
                        dst: self.dst.shifted(lo * self.dst.cs, self.dst.rs, self.dst.cs),
                        b: self.b.shifted(lo * self.b.cs, self.b.rs, self.b.cs),
                        c: self.c.map(|c| c.shifted(lo * c.cs, c.rs, c.cs)),
                        ..*self
                    }
                } else {
                    One {
                        m: hi - lo,
                        dst: self.dst.shifted(lo * self.dst.rs, self.dst.rs, self.dst.cs),
                        a: self.a.shifted(lo * self.a.rs, self.a.rs, self.a.cs),
                        c: self.c.map(|c| c.shifted(lo * c.rs, c.rs, c.cs)),
                        ..*self
                    }
                };
                part.run_gemm(Parallelism::None);
            }
        });
    }

    /// Integers: a row-at-a-time loop with wrapping arithmetic, in the element type.
    unsafe fn run_loop(&self, par: Parallelism) {
        let (n, k) = (self.n, self.k);
        let alpha: T = self.alpha.to();
        let beta: T = self.beta.to();
        let c = self.c.filter(|_| beta != T::ZERO);
        let (a, b, d) = (self.a, self.b, self.dst);
        let row = |i: usize| {
            let mut acc = vec![T::ZERO; n];
            // SAFETY: indices stay inside the matrices (caller's contract); each row of `dst`
            // is written by one call only.
            unsafe {
                for l in 0..k {
                    let x = *a.at(i, l);
                    if x == T::ZERO {
                        continue;
                    }
                    for (j, s) in acc.iter_mut().enumerate() {
                        *s = s.add(x.mul(*b.at(l, j)));
                    }
                }
                for (j, s) in acc.into_iter().enumerate() {
                    let mut v = alpha.mul(s);
                    if let Some(c) = c {
                        v = v.add(beta.mul(*c.at(i, j)));
                    }
                    *d.at(i, j) = v;
                }
            }
        };
        match par {
            Parallelism::None => (0..self.m).for_each(row),
            _ => (0..self.m).into_par_iter().for_each(row),
        }
    }
}

/// A whole product, ready to run; made only by [`gemm`], under its contract (the storages are
/// locked and the pointers are their bases).
struct Job<'a> {
    product: &'a Product,
    out: &'a Mat,
    c: Option<&'a Mat>,
    a_ptr: *const u8,
    b_ptr: *const u8,
    c_ptr: *const u8,
    out_ptr: *mut u8,
    alpha: Scalar,
    beta: Scalar,
    /// The op's buffers: with a result buffer, compute there first, then copy into the
    /// output (which shares memory with an input, or is not dense).
    scratch: GemmScratch,
}

impl DTypeFn for &Job<'_> {
    type Output = ();
    fn call<T: Element>(self) {
        let p = self.product;
        let batches = checked_numel(&p.batch).unwrap_or(0);
        let total = batches.saturating_mul(p.m).saturating_mul(p.n);
        if total == 0 {
            return;
        }
        let base = |ptr: *const u8| MatPtr {
            ptr: ptr as *mut T,
            rs: 0,
            cs: 0,
        };
        let (a, b, c) = (base(self.a_ptr), base(self.b_ptr), base(self.c_ptr));
        let c = self.c.map(|m| (c, m));
        let room = Room::new(&self.scratch);
        if self.scratch.buffer.is_null() {
            // SAFETY: `gemm`'s caller locked the storages and validated every layout against
            // them; unbuffered, the output does not overlap itself or the inputs.
            unsafe {
                compute(
                    p,
                    base(self.out_ptr),
                    self.out,
                    a,
                    b,
                    c,
                    self.alpha,
                    self.beta,
                    room,
                )
            };
            return;
        }
        // SAFETY: the caller gave a result buffer of `total` elements of T, used by nothing
        // else during the call.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.scratch.buffer as *mut T, total) };
        let mut strides = contiguous_strides(&p.batch);
        strides.iter_mut().for_each(|s| *s *= p.m * p.n);
        let buf_mat = Mat {
            offset: 0,
            batch: strides,
            rs: p.n,
            cs: 1,
        };
        let buf_ptr = MatPtr {
            ptr: buf.as_mut_ptr(),
            rs: 0,
            cs: 0,
        };
        // SAFETY: as above, writing into `buf`, which holds `total` elements laid out as
        // `buf_mat` and overlaps nothing.
        unsafe { compute(p, buf_ptr, &buf_mat, a, b, c, self.alpha, self.beta, room) };
        let out = self.out_ptr as *mut T;
        let mut index = vec![0; p.batch.len()];
        let mut src = buf.iter();
        for e in 0..batches {
            unravel(e, &p.batch, &mut index);
            let o = self.out.at(&index);
            for i in 0..p.m {
                for j in 0..p.n {
                    if let Some(&v) = src.next() {
                        // SAFETY: the output storage is write-locked and its layout covers
                        // this element.
                        unsafe { *out.add(o + i * self.out.rs + j * self.out.cs) = v };
                    }
                }
            }
        }
    }
}

/// Runs every product of the batch, spreading large work over strata's pool.
///
/// # Safety
/// The base pointers and layouts must describe locked, valid memory; `dst` must not overlap
/// itself or the inputs.
#[allow(clippy::too_many_arguments)]
unsafe fn compute<T: Element>(
    p: &Product,
    dst: MatPtr<T>,
    dst_mat: &Mat,
    a: MatPtr<T>,
    b: MatPtr<T>,
    c: Option<(MatPtr<T>, &Mat)>,
    alpha: Scalar,
    beta: Scalar,
    room: Room,
) {
    let folded = if c.is_none() { fold(p, dst_mat) } else { None };
    let (p, dst_mat) = match &folded {
        Some((p, o)) => (p, o),
        None => (p, dst_mat),
    };
    let batches = checked_numel(&p.batch).unwrap_or(0);
    let work = p.m.saturating_mul(p.n).saturating_mul(p.k.max(1));
    // Products that run one after the other share the room; products that run side by side
    // each get a slot of their own. Folding the batch into rows adds row blocks, never room.
    let one = |e: usize, par: Parallelism, room: Room| {
        let mut index = vec![0; p.batch.len()];
        unravel(e, &p.batch, &mut index);
        // SAFETY: the offsets are those of validated layouts (caller's contract).
        unsafe {
            let job = One {
                m: p.m,
                n: p.n,
                k: p.k,
                dst: dst.shifted(dst_mat.at(&index), dst_mat.rs, dst_mat.cs),
                a: a.shifted(p.a.at(&index), p.a.rs, p.a.cs),
                b: b.shifted(p.b.at(&index), p.b.rs, p.b.cs),
                c: c.map(|(c, cm)| c.shifted(cm.at(&index), cm.rs, cm.cs)),
                alpha,
                beta,
                room,
            };
            job.run(par);
        }
    };
    let threads = num_threads();
    let widens = matches!(T::DTYPE, DType::F16 | DType::BF16);
    if work >= PARALLEL_WORK && threads > 1 && batches.is_multiple_of(threads) && !widens {
        // Large products that divide evenly over the threads: side by side, each on one
        // thread, with no hand-off inside them. A long-depth product whose result is small
        // (a convolution's weight gradient, split along its depth) threads poorly inside
        // `gemm`.
        spread(threads, &|r| {
            let range = r * batches / threads..(r + 1) * batches / threads;
            range.for_each(|e| one(e, Parallelism::None, room.slot(0)));
        });
    } else if work >= PARALLEL_WORK {
        let room = room.slot(0);
        pool().install(|| (0..batches).for_each(|e| one(e, Parallelism::Rayon(threads), room)));
    } else if batches > 1 && work.saturating_mul(batches) >= PARALLEL_WORK {
        if room.slots() > 0 {
            // Products that widen: as many runs as slots, each over a range of the batch.
            let runs = room.slots();
            pool().install(|| {
                (0..runs).into_par_iter().for_each(|r| {
                    let range = r * batches / runs..(r + 1) * batches / runs;
                    range.for_each(|e| one(e, Parallelism::None, room.slot(r)));
                })
            });
        } else {
            pool().install(|| {
                (0..batches)
                    .into_par_iter()
                    .for_each(|e| one(e, Parallelism::None, room.slot(0)))
            });
        }
    } else {
        (0..batches).for_each(|e| one(e, Parallelism::None, room.slot(0)));
    }
}
