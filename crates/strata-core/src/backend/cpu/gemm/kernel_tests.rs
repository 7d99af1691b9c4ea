//! Every half-precision kernel this CPU runs, on the same products as the widening path
//! (`blocks`): bit for bit where every sum is exact in f32 (whatever order it is added in),
//! within the rounding of a different order of f32 additions where it is not.

use ::gemm::Parallelism;
use half::{bf16, f16};

use super::blocks::{Half, Room};
use super::half::{fits, run_kernel, HalfKernel};
use super::{MatPtr, One};
use crate::backend::kernel::{GemmScratch, HalfBlock};
use crate::dtype::cast;
use crate::Scalar;

/// The kernels this CPU runs for `H`: the widening path first.
fn kernels<H: Half>() -> Vec<HalfKernel> {
    let mut all = vec![HalfKernel::Blocks];
    #[cfg(target_arch = "x86_64")]
    {
        if super::widened::available() {
            all.push(HalfKernel::WidenedTiles);
        }
        if H::DTYPE == crate::DType::BF16 && super::dot_bf16::available() {
            all.push(HalfKernel::Bf16Dot);
        }
    }
    all
}

/// Multiples of 1/8 in [-2, 2] when `exact` (their products' sums are exact in f32 in any
/// order), else values in [-1, 1] with full mantissas.
fn values(n: usize, seed: u64, exact: bool) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            if exact {
                ((i * 7919 + seed * 104_729) % 33) as f32 / 8.0 - 2.0
            } else {
                ((i as f64 * 0.618_034 + seed as f64).sin()) as f32
            }
        })
        .collect()
}

/// One product's operands, in `H`, and how they lie.
struct Case<H> {
    m: usize,
    n: usize,
    k: usize,
    a: Vec<H>,
    b: Vec<H>,
    c: Vec<H>,
    /// `a` stored column-major (a transposed operand).
    a_t: bool,
    /// `b` stored column-major (a linear layer's `wᵀ`).
    b_t: bool,
    alpha: f32,
    beta: f32,
}

impl<H: Half> Case<H> {
    fn new(m: usize, n: usize, k: usize, (a_t, b_t): (bool, bool), exact: bool) -> Case<H> {
        let to = |v: Vec<f32>| v.into_iter().map(cast::<f32, H>).collect::<Vec<H>>();
        Case {
            m,
            n,
            k,
            a: to(values(m * k, 1, exact)),
            b: to(values(k * n, 2, exact)),
            c: to(values(m * n, 3, exact)),
            a_t,
            b_t,
            alpha: if exact { 0.5 } else { 0.7 },
            beta: if exact { 2.0 } else { -1.3 },
        }
    }

    /// `beta·c + alpha·(a @ b)` on `kernel`, in one slot of room.
    fn run(&mut self, kernel: HalfKernel) -> Vec<H> {
        let (m, n, k) = (self.m, self.n, self.k);
        let block = HalfBlock::for_product(m, n, k);
        let mut slot = vec![0f32; block.len()];
        let scratch = GemmScratch {
            buffer: std::ptr::null_mut(),
            widened: slot.as_mut_ptr().cast(),
            block,
            slots: 1,
        };
        let mut dst = vec![H::ZERO; m * n];
        let mat = |ptr: *mut H, rows: usize, cols: usize, t: bool| MatPtr {
            ptr,
            rs: if t { 1 } else { cols },
            cs: if t { rows } else { 1 },
        };
        let one = One {
            m,
            n,
            k,
            dst: mat(dst.as_mut_ptr(), m, n, false),
            a: mat(self.a.as_mut_ptr(), m, k, self.a_t),
            b: mat(self.b.as_mut_ptr(), k, n, self.b_t),
            c: Some(mat(self.c.as_mut_ptr(), m, n, false)),
            alpha: Scalar::from(self.alpha),
            beta: Scalar::from(self.beta),
            room: Room::new(&scratch).slot(0),
        };
        assert!(
            fits(kernel, H::DTYPE, block),
            "{kernel:?} does not fit {block:?}"
        );
        // SAFETY: every matrix lies in its vector, the output in its own; the slot is this
        // product's; the kernel is one this CPU runs (`kernels`) and its blocks fit the room.
        unsafe { run_kernel(&one, kernel, Parallelism::Rayon(2)) };
        dst
    }

    /// The exact `alpha·(a @ b)`, in f64, element by element, and `Σ|a||b|` beside it.
    fn exact(&self) -> Vec<(f64, f64)> {
        let f = |x: H| cast::<H, f64>(x);
        let a = |i: usize, l: usize| {
            f(self.a[if self.a_t {
                l * self.m + i
            } else {
                i * self.k + l
            }])
        };
        let b = |l: usize, j: usize| {
            f(self.b[if self.b_t {
                j * self.k + l
            } else {
                l * self.n + j
            }])
        };
        let mut out = Vec::with_capacity(self.m * self.n);
        for i in 0..self.m {
            for j in 0..self.n {
                let s: f64 = (0..self.k).map(|l| a(i, l) * b(l, j)).sum();
                let mag: f64 = (0..self.k).map(|l| (a(i, l) * b(l, j)).abs()).sum();
                let v = self.alpha as f64 * s + self.beta as f64 * f(self.c[i * self.n + j]);
                out.push((v, self.alpha.abs() as f64 * mag));
            }
        }
        out
    }
}

/// Sizes: full blocks, a partial block in every dimension, an odd depth, a short one.
const SIZES: [(usize, usize, usize); 4] =
    [(256, 256, 256), (264, 288, 301), (64, 96, 33), (8, 32, 3)];

/// Operand layouts: both row-major, `a` transposed, `b` transposed, both.
const LAYOUTS: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

fn exact_sums_are_equal_bit_for_bit<H: Half>() {
    for &(m, n, k) in &SIZES {
        for layout in LAYOUTS {
            let mut case = Case::<H>::new(m, n, k, layout, true);
            let want = case.run(HalfKernel::Blocks);
            for kernel in kernels::<H>() {
                let got = case.run(kernel);
                let bits = |x: &H| cast::<H, f64>(*x).to_bits();
                let same = got.iter().zip(&want).all(|(g, w)| bits(g) == bits(w));
                assert!(same, "{kernel:?} {m}x{k} @ {k}x{n} {layout:?} differs");
            }
        }
    }
}

#[test]
fn bf16_kernels_agree_bit_for_bit_on_exact_sums() {
    eprintln!("bf16 kernels on this CPU: {:?}", kernels::<bf16>());
    exact_sums_are_equal_bit_for_bit::<bf16>();
}

#[test]
fn f16_kernels_agree_bit_for_bit_on_exact_sums() {
    eprintln!("f16 kernels on this CPU: {:?}", kernels::<f16>());
    exact_sums_are_equal_bit_for_bit::<f16>();
}

/// Each kernel's result is the exact one rounded once into `H`, but for the f32 rounding of
/// its sums: `|got − exact| ≤ ulp_H(exact) + k·2⁻²³·Σ|a||b|`.
fn rounded_sums_are_within_f32_rounding<H: Half>(ulp: f64) {
    for &(m, n, k) in &SIZES {
        for layout in LAYOUTS {
            let mut case = Case::<H>::new(m, n, k, layout, false);
            let exact = case.exact();
            for kernel in kernels::<H>() {
                let got = case.run(kernel);
                for (e, (g, &(v, mag))) in got.iter().zip(&exact).enumerate() {
                    let bound = ulp * v.abs() + k as f64 * 2f64.powi(-23) * mag + 1e-30;
                    let err = (cast::<H, f64>(*g) - v).abs();
                    assert!(
                        err <= bound,
                        "{kernel:?} {m}x{k} @ {k}x{n} {layout:?}: element {e} is {} for {v} (bound {bound})",
                        cast::<H, f64>(*g)
                    );
                }
            }
        }
    }
}

#[test]
fn bf16_kernels_round_the_f32_sums_once() {
    rounded_sums_are_within_f32_rounding::<bf16>(2f64.powi(-8));
}

#[test]
fn f16_kernels_round_the_f32_sums_once() {
    rounded_sums_are_within_f32_rounding::<f16>(2f64.powi(-11));
}
