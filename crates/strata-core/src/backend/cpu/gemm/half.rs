//! f16 and bf16 products, summed in f32 and rounded once into the output, as PyTorch's CPU
//! kernels do (an f16 accumulator overflows on sums whose result fits).
//!
//! f16 products run on the `gemm` crate's own f16 kernel, which widens inside its packing,
//! where it rounds once ([`f16_native`]); bf16 products run on AVX512-BF16's dot products
//! where the CPU has them (`dot_bf16`, chosen at run time), in the room and blocks the
//! widening path would use; every other product widens in bounded f32 blocks (`blocks`).

use ::gemm::Parallelism;

use super::blocks::{self, Half, Room};
#[cfg(target_arch = "x86_64")]
use super::dot_bf16;
use super::One;
use crate::backend::kernel::{f16_native, widens_in_blocks};
use crate::dtype::{cast, DType};

/// How a half-precision product runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Nothing to multiply (`k` = 0 or `alpha` = 0): the output is `beta·c`, or zeros.
    Scale,
    /// The `gemm` crate's f16 kernel, straight on the operands.
    F16Native,
    /// f32 blocks of bounded size, multiplied by `gemm::<f32>`.
    Blocks,
    /// bf16 pairs packed into the same room, multiplied by AVX512-BF16's dot products.
    Bf16Dot,
}

/// The path of an `m×k · k×n` product in `H`, with `alpha` and whether an input is added,
/// given its room.
fn path<H: Half>(m: usize, n: usize, k: usize, alpha: f32, adds_c: bool, room: Room) -> Path {
    if widens_in_blocks(H::DTYPE, m, n, k, alpha, adds_c) {
        if H::DTYPE == DType::BF16 && bf16_dot(room) {
            Path::Bf16Dot
        } else {
            Path::Blocks
        }
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
    match path::<H>(one.m, one.n, one.k, alpha, adds_c, one.room) {
        // SAFETY: forwarded from the caller.
        Path::Blocks => unsafe { blocks::run(one, par) },
        // SAFETY: forwarded from the caller; the path is taken for bf16 only, on a CPU with
        // AVX512-BF16, with a slot of room whose blocks fit (`bf16_dot`).
        Path::Bf16Dot => unsafe { run_bf16_dot(&one.cast::<::half::bf16>(), par) },
        // SAFETY: forwarded from the caller; the native path is taken for f16 only.
        Path::F16Native => unsafe { run_f16(&one.cast::<::half::f16>(), alpha, par) },
        // SAFETY: forwarded from the caller.
        Path::Scale => unsafe { scale(one, beta) },
    }
}

/// Whether a bf16 product with `room` runs on the CPU's bf16 dot products: the CPU has them,
/// and the product has one slot of room whose packed blocks fit it.
fn bf16_dot(room: Room) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        room.slots() == 1 && dot_bf16::fits(room.block()) && super::bf16_dot_products()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = room;
        false
    }
}

/// The bf16 dot-product kernel ([`bf16_dot`] holds).
///
/// # Safety
/// As [`One::run`].
unsafe fn run_bf16_dot(one: &One<::half::bf16>, par: Parallelism) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded from the caller.
    unsafe {
        dot_bf16::run(one, par)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (one, par);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::kernel::{GemmScratch, HalfBlock};

    /// One slot of room for an `m×k · k×n` product (its address is never read here).
    fn room(m: usize, n: usize, k: usize) -> Room {
        let mut slot = vec![0f32; HalfBlock::for_product(m, n, k).len()];
        let scratch = GemmScratch {
            buffer: std::ptr::null_mut(),
            widened: slot.as_mut_ptr().cast(),
            block: HalfBlock::for_product(m, n, k),
            slots: 1,
        };
        Room::new(&scratch).slot(0)
    }

    #[test]
    fn bf16_products_take_the_dot_products_where_the_cpu_has_them() {
        let want = if super::super::bf16_dot_products() {
            Path::Bf16Dot
        } else {
            Path::Blocks
        };
        for (m, n, k) in [
            (256, 1024, 784),
            (1024, 1024, 256),
            (33, 40, 100),
            (300, 260, 257),
        ] {
            let got = path::<::half::bf16>(m, n, k, 1.0, false, room(m, n, k));
            assert_eq!(got, want, "{m}x{k} @ {k}x{n}");
        }
        // Too narrow to pack into the room: the f32 blocks, on any CPU.
        let got = path::<::half::bf16>(256, 10, 1024, 1.0, false, room(256, 10, 1024));
        assert_eq!(got, Path::Blocks);
        // f16 never takes them.
        let got = path::<::half::f16>(256, 1024, 784, 1.0, true, room(256, 1024, 784));
        assert_eq!(got, Path::Blocks);
    }
}
