//! f16 and bf16 products, summed in f32 and rounded once into the output, as PyTorch's CPU
//! kernels do (an f16 accumulator overflows on sums whose result fits).
//!
//! Short f16 products run on the `gemm` crate's own f16 kernel, which widens inside its
//! packing, where it rounds once ([`f16_native`]). Every other product runs on the kernel
//! [`half_kernel`] names for this CPU, chosen at run time, in the room and blocks of the
//! widening path (`blocks`), which also takes the products whose packed blocks would not fit
//! that room.

use ::gemm::Parallelism;

use super::blocks::{self, Half, Room};
use super::One;
#[cfg(target_arch = "x86_64")]
use super::{dot_bf16, packed, widened};
use crate::backend::kernel::{f16_native, widens_in_blocks, HalfBlock};
use crate::dtype::{cast, DType};

/// The kernel that f16 and bf16 matrix products (those that do not take the `gemm` crate's
/// f16 kernel) run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalfKernel {
    /// AVX512-BF16's dot products on pairs of bf16 (bf16 on CPUs where `vdpbf16ps` does more
    /// multiply-adds per cycle than f32 FMAs, as AMD's).
    Bf16Dot,
    /// f32 FMA tiles on AVX-512F, the operands widened to f32 as they are packed.
    WidenedTiles,
    /// Blocks widened to f32 and multiplied by the `gemm` crate's f32 kernel.
    Blocks,
}

impl HalfKernel {
    /// The kernel's name, as `strata bench` rows show it.
    pub fn name(self) -> &'static str {
        match self {
            HalfKernel::Bf16Dot => "AVX512_BF16 dot products",
            HalfKernel::WidenedTiles => "f32 tiles widened in packing",
            HalfKernel::Blocks => "f32 blocks",
        }
    }
}

/// The kernel this CPU runs large `dtype` (f16 or bf16) products on: bf16's dot products on a
/// CPU with AVX512-BF16 whose vendor is not Intel (whose cores do half the f32 FMAs'
/// multiply-adds per cycle with `vdpbf16ps`), else the widened tiles on a CPU with AVX-512F,
/// else f32 blocks.
pub fn half_kernel(dtype: DType) -> HalfKernel {
    #[cfg(target_arch = "x86_64")]
    {
        if dtype == DType::BF16 && dot_bf16::available() && !dot_bf16::half_rate() {
            return HalfKernel::Bf16Dot;
        }
        if matches!(dtype, DType::F16 | DType::BF16) && widened::available() {
            return HalfKernel::WidenedTiles;
        }
    }
    let _ = dtype;
    HalfKernel::Blocks
}

/// Nanoseconds per 512-bit `vdpbf16ps` and per 512-bit `vfmadd231ps` on this core, timed
/// over independent sums (their issue rates), where the CPU has AVX512-BF16: why bf16 products
/// take the widened tiles on Intel's cores (`vdpbf16ps` at a quarter of the FMA's issue rate
/// there, so half its multiply-adds) and the dot products on AMD's.
pub fn bf16_dot_issue_times() -> Option<(f64, f64)> {
    #[cfg(target_arch = "x86_64")]
    {
        dot_bf16::issue_times()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// How a half-precision product runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Nothing to multiply (`k` = 0 or `alpha` = 0): the output is `beta·c`, or zeros.
    Scale,
    /// The `gemm` crate's f16 kernel, straight on the operands.
    F16Native,
    /// A kernel in the room of the widening path.
    Kernel(HalfKernel),
}

/// The path of an `m×k · k×n` product in `H`, with `alpha` and whether an input is added,
/// given its room.
fn path<H: Half>(m: usize, n: usize, k: usize, alpha: f32, adds_c: bool, room: Room) -> Path {
    if widens_in_blocks(H::DTYPE, m, n, k, alpha, adds_c) {
        let kernel = half_kernel(H::DTYPE);
        if room.slots() == 1 && fits(kernel, H::DTYPE, room.block()) {
            Path::Kernel(kernel)
        } else {
            Path::Kernel(HalfKernel::Blocks)
        }
    } else if k > 0 && alpha != 0.0 && f16_native(m, n, k, alpha, adds_c) {
        Path::F16Native
    } else {
        Path::Scale
    }
}

/// Whether `kernel`'s packed blocks of `block` fit the room of the widening path.
pub(super) fn fits(kernel: HalfKernel, dtype: DType, block: HalfBlock) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use ::half::{bf16, f16};
        match (kernel, dtype) {
            (HalfKernel::Bf16Dot, _) => packed::fits::<dot_bf16::DotBf16>(block),
            (HalfKernel::WidenedTiles, DType::BF16) => {
                packed::fits::<widened::Widened<bf16>>(block)
            }
            (HalfKernel::WidenedTiles, _) => packed::fits::<widened::Widened<f16>>(block),
            (HalfKernel::Blocks, _) => true,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, block);
        kernel == HalfKernel::Blocks
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
        // SAFETY: forwarded from the caller; `path` takes a kernel only where this CPU runs
        // it, with one slot of room whose blocks fit it.
        Path::Kernel(kernel) => unsafe { run_kernel(one, kernel, par) },
        // SAFETY: forwarded from the caller; the native path is taken for f16 only.
        Path::F16Native => unsafe { run_f16(&one.cast::<::half::f16>(), alpha, par) },
        // SAFETY: forwarded from the caller.
        Path::Scale => unsafe { scale(one, beta) },
    }
}

/// Runs `one` on `kernel`.
///
/// # Safety
/// As [`One::run`]; the CPU runs `kernel`; unless it is [`HalfKernel::Blocks`], the product
/// has one slot of room whose blocks fit it.
pub(super) unsafe fn run_kernel<H: Half>(one: &One<H>, kernel: HalfKernel, par: Parallelism) {
    #[cfg(target_arch = "x86_64")]
    {
        use ::half::{bf16, f16};
        use dot_bf16::DotBf16;
        use widened::Widened;
        // SAFETY: forwarded from the caller; each cast is to the product's own dtype.
        unsafe {
            match (kernel, H::DTYPE) {
                (HalfKernel::Bf16Dot, _) => packed::run::<DotBf16>(&one.cast::<bf16>(), par),
                (HalfKernel::WidenedTiles, DType::BF16) => {
                    packed::run::<Widened<bf16>>(&one.cast::<bf16>(), par)
                }
                (HalfKernel::WidenedTiles, _) => {
                    packed::run::<Widened<f16>>(&one.cast::<f16>(), par)
                }
                (HalfKernel::Blocks, _) => blocks::run(one, par),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = kernel;
        // SAFETY: forwarded from the caller.
        unsafe { blocks::run(one, par) }
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
    fn half_products_take_the_kernel_this_cpu_runs_where_it_fits() {
        for dtype in [DType::BF16, DType::F16] {
            let want = Path::Kernel(half_kernel(dtype));
            for (m, n, k) in [(256, 1024, 784), (1024, 1024, 256), (300, 260, 257)] {
                let got = match dtype {
                    DType::BF16 => path::<::half::bf16>(m, n, k, 1.0, true, room(m, n, k)),
                    _ => path::<::half::f16>(m, n, k, 1.0, true, room(m, n, k)),
                };
                assert_eq!(got, want, "{dtype} {m}x{k} @ {k}x{n}");
            }
        }
        // Too narrow to pack into the room: the f32 blocks, on any CPU.
        let got = path::<::half::bf16>(256, 10, 1024, 1.0, false, room(256, 10, 1024));
        assert_eq!(got, Path::Kernel(HalfKernel::Blocks));
    }

    #[test]
    fn the_kernel_follows_the_cpu() {
        let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let flags: Vec<&str> = cpu
            .lines()
            .find(|l| l.starts_with("flags"))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        // Valgrind runs the process on a CPU of its own, without AVX-512.
        let valgrind = strata_alloc::running_on_valgrind();
        let has = |f: &str| flags.contains(&f) && !(valgrind && f.starts_with("avx512"));
        let intel = cpu.contains("GenuineIntel");
        let bf16 = if has("avx512_bf16") && has("avx512bw") && !intel {
            HalfKernel::Bf16Dot
        } else if has("avx512f") {
            HalfKernel::WidenedTiles
        } else {
            HalfKernel::Blocks
        };
        assert_eq!(half_kernel(DType::BF16), bf16, "flags {flags:?}");
        let f16 = if has("avx512f") {
            HalfKernel::WidenedTiles
        } else {
            HalfKernel::Blocks
        };
        assert_eq!(half_kernel(DType::F16), f16);
    }
}
