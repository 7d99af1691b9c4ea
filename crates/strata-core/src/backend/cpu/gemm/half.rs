//! f16 and bf16 products, summed in f32 and rounded once into the output, as PyTorch's CPU
//! kernels do (an f16 accumulator overflows on sums whose result fits).
//!
//! f16 products run on the `gemm` crate's own f16 kernel, which widens inside its packing,
//! where it rounds once ([`f16_native`]); every other product widens in bounded f32 blocks
//! (`blocks`). A bf16 kernel on AVX512-BF16's dot products would be one more arm of
//! [`Path`], chosen at run time with `is_x86_feature_detected!("avx512bf16")`.

use ::gemm::Parallelism;

use super::blocks::{self, Half};
use super::One;
use crate::backend::kernel::{f16_native, widens_in_blocks};
use crate::dtype::cast;

/// How a half-precision product runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Nothing to multiply (`k` = 0 or `alpha` = 0): the output is `beta·c`, or zeros.
    Scale,
    /// The `gemm` crate's f16 kernel, straight on the operands.
    F16Native,
    /// f32 blocks of bounded size, multiplied by `gemm::<f32>`.
    Blocks,
}

/// The path of an `m×k · k×n` product in `H`, with `alpha` and whether an input is added.
fn path<H: Half>(m: usize, n: usize, k: usize, alpha: f32, adds_c: bool) -> Path {
    if widens_in_blocks(H::DTYPE, m, n, k, alpha, adds_c) {
        Path::Blocks
    } else if k > 0 && alpha != 0.0 && f16_native(m, n, k, alpha, adds_c) {
        Path::F16Native
    } else {
        Path::Scale
    }
}

/// `dst = beta·c + alpha·(a @ b)` for one f16 or bf16 product.
///
/// # Safety
/// As [`One::run`]; `H` is the product's dtype.
pub(super) unsafe fn run<H: Half>(one: &One<H>, par: Parallelism) {
    let alpha: f32 = one.alpha.to();
    let beta: f32 = one.beta.to();
    let adds_c = one.c.is_some() && beta != 0.0;
    match path::<H>(one.m, one.n, one.k, alpha, adds_c) {
        // SAFETY: forwarded from the caller.
        Path::Blocks => unsafe { blocks::run(one, par) },
        // SAFETY: forwarded from the caller; the native path is taken for f16 only.
        Path::F16Native => unsafe { run_f16(&one.cast::<::half::f16>(), alpha, par) },
        // SAFETY: forwarded from the caller.
        Path::Scale => unsafe { scale(one, beta) },
    }
}

/// The `gemm` crate's f16 kernel: `dst = alpha·(a @ b)`, summed in f32, rounded once (the
/// conditions of [`f16_native`] hold).
///
/// # Safety
/// As [`One::run`].
unsafe fn run_f16(one: &One<::half::f16>, alpha: f32, par: Parallelism) {
    let (d, a, b) = (one.dst, one.a, one.b);
    // SAFETY: the matrices are valid for their sizes and strides (caller's contract); with
    // `read_dst` false the output is only written. `gemm` computes dst := beta·a@b, strides
    // column first.
    unsafe {
        ::gemm::gemm::<::gemm::f16>(
            one.m,
            one.n,
            one.k,
            d.ptr,
            d.cs as isize,
            d.rs as isize,
            false,
            a.ptr,
            a.cs as isize,
            a.rs as isize,
            b.ptr,
            b.cs as isize,
            b.rs as isize,
            ::half::f16::ZERO,
            ::half::f16::from_f32(alpha),
            false,
            false,
            false,
            par,
        );
    }
}

/// Nothing to multiply: `dst = 0 + beta·c` (or zeros), in f32, rounded once.
///
/// # Safety
/// As [`One::run`].
unsafe fn scale<H: Half>(one: &One<H>, beta: f32) {
    let c = one.c.filter(|_| beta != 0.0);
    // SAFETY: indices stay inside the matrices (caller's contract).
    unsafe {
        for i in 0..one.m {
            for j in 0..one.n {
                let mut v = 0.0f32;
                if let Some(c) = c {
                    v += beta * cast::<H, f32>(*c.at(i, j));
                }
                *one.dst.at(i, j) = cast::<f32, H>(v);
            }
        }
    }
}
