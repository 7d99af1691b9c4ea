//! The scalar math kernels compute with: the [`Float`] compute types and their functions,
//! and the vectorisable approximations of `exp` and `erf` for f32.
//!
//! `erf_f32` is the rational approximation of Abramowitz and Stegun (7.1.26), the same one
//! PyTorch's vectorised CPU kernels evaluate: with `t = 1 / (1 + p·|x|)`,
//! `erf(x) = sign(x)·(1 − t·(a1 + t·(a2 + t·(a3 + t·(a4 + t·a5))))·e^(−x²))`, absolute error
//! at most 1.5e-7 in exact arithmetic and 7e-7 as evaluated in f32 (the polynomial's terms
//! nearly cancel for small `|x|`). It is straight-line code over [`exp_f32`], so a loop over
//! a slice of it compiles to SIMD where a library `erff` is one call per element.

use crate::dtype::{DType, Element};

/// Floating-point element types that kernels compute in (f16 and bf16 compute in f32).
pub(crate) trait Float: Element {
    /// From `f64`, rounding.
    fn from_f64(v: f64) -> Self;
    /// `e^x`.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// The error function.
    fn erf(self) -> Self;
    /// The error function as the GELU kernels evaluate it: for f32 a vectorisable
    /// approximation within 7e-7 absolute error (the one PyTorch's vectorised CPU kernels
    /// use), for f64 the same as [`Float::erf`].
    fn erf_vectorisable(self) -> Self {
        self.erf()
    }
    /// `e^x` as the activation kernels (sigmoid, SiLU, GELU's derivative) evaluate it: for
    /// f32 a vectorisable form within 2 ulp, for f64 the same as [`Float::exp`].
    fn exp_vectorisable(self) -> Self {
        self.exp()
    }
    /// `tanh(x)` as the tanh kernel evaluates it: for f32 a vectorisable rational
    /// approximation within a few ulp, for f64 the same as [`Float::tanh`].
    fn tanh_vectorisable(self) -> Self {
        self.tanh()
    }
}

impl Float for f32 {
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn exp(self) -> Self {
        f32::exp(self)
    }
    fn ln(self) -> Self {
        f32::ln(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    fn sin(self) -> Self {
        f32::sin(self)
    }
    fn cos(self) -> Self {
        f32::cos(self)
    }
    fn tanh(self) -> Self {
        f32::tanh(self)
    }
    fn erf(self) -> Self {
        libm::erff(self)
    }
    #[inline(always)]
    fn erf_vectorisable(self) -> Self {
        erf_f32(self)
    }
    #[inline(always)]
    fn exp_vectorisable(self) -> Self {
        exp_f32(self)
    }
    #[inline(always)]
    fn tanh_vectorisable(self) -> Self {
        tanh_f32(self)
    }
}

impl Float for f64 {
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn ln(self) -> Self {
        f64::ln(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    fn sin(self) -> Self {
        f64::sin(self)
    }
    fn cos(self) -> Self {
        f64::cos(self)
    }
    fn tanh(self) -> Self {
        f64::tanh(self)
    }
    fn erf(self) -> Self {
        libm::erf(self)
    }
}

/// A computation generic over a floating compute type, run by [`dispatch_float`].
pub(crate) trait FloatFn {
    /// What the computation returns.
    type Output;
    /// Runs the computation for compute type `T`.
    fn call<T: Float>(self) -> Self::Output;
}

/// Runs `f` in the compute type of a floating `dtype` (f32 for f16, bf16 and f32; f64 for
/// f64), or returns `None` for a non-floating dtype.
pub(crate) fn dispatch_float<F: FloatFn>(dtype: DType, f: F) -> Option<F::Output> {
    match dtype {
        DType::F16 | DType::BF16 | DType::F32 => Some(f.call::<f32>()),
        DType::F64 => Some(f.call::<f64>()),
        _ => None,
    }
}

/// `e^x` for f32 in straight-line code the compiler vectorises: `x = n·ln2 + r` with
/// `|r| ≤ ln2/2`, a degree-6 polynomial for `e^r` (relative error about 2e-7, within 2 ulp),
/// and `2^n` built in the exponent bits. Overflows to `inf` above 88.72, flushes to 0 below
/// -87.3 (no subnormal results), and keeps NaN.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    exp_f32_with::<false>(x)
}

/// [`exp_f32`] with fused multiply-adds (for code compiled with FMA enabled).
#[inline(always)]
pub(crate) fn exp_f32_fused(x: f32) -> f32 {
    exp_f32_with::<true>(x)
}

/// [`exp_f32`], with fused multiply-adds when `FUSED` (for code compiled with FMA enabled,
/// where they are one instruction each; elsewhere they would be library calls).
#[inline(always)]
pub(crate) fn exp_f32_with<const FUSED: bool>(x: f32) -> f32 {
    let madd = |a: f32, b: f32, c: f32| if FUSED { a.mul_add(b, c) } else { a * b + c };
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let xc = x.clamp(-87.3, 88.72);
    // Round to nearest by adding and subtracting 1.5·2^23 (|xc·log2e| < 2^7), which
    // vectorises where `round` would be a library call.
    const MAGIC: f32 = 12_582_912.0;
    let t = madd(xc, LOG2E, MAGIC);
    let n = t - MAGIC;
    // The same integer, read from the low mantissa bits (an integer subtraction, which
    // vectorises where a float-to-int cast would not).
    let ni = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = madd(-n, LN2_LO, madd(-n, LN2_HI, xc));
    let p = madd(r, 0.001_393_98, 0.008_333_49);
    let p = madd(r, p, 0.041_666_52);
    let p = madd(r, p, 0.166_666_67);
    let p = madd(r, p, 0.5);
    let p = madd(r, p, 1.0);
    let p = madd(r, p, 1.0);
    // 2^n as two factors, so that n = 128 (just below the overflow threshold) stays finite.
    let half = ni >> 1;
    let s1 = f32::from_bits(((half + 127) as u32) << 23);
    let s2 = f32::from_bits(((ni - half + 127) as u32) << 23);
    let y = p * s1 * s2;
    let y = if x > 88.72 { f32::INFINITY } else { y };
    let y = if x < -87.3 { 0.0 } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `tanh(x)` for f32 as a rational function of odd degree 13 over even degree 6 on
/// [-7.9, 7.9] (where f32's tanh reaches ±1), within a few ulp; tiny inputs return
/// themselves (tanh(x) = x to f32 precision below 4e-4). Branch-free, so the map over a
/// slice vectorises; NaN stays NaN.
#[inline(always)]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    const CLAMP: f32 = 7.905_311;
    let xc = x.clamp(-CLAMP, CLAMP);
    let x2 = xc * xc;
    let p = x2 * -2.760_768_5e-16 + 2.000_188e-13;
    let p = x2 * p + -8.604_672e-11;
    let p = x2 * p + 5.122_297e-8;
    let p = x2 * p + 1.485_722_4e-5;
    let p = x2 * p + 6.372_619_3e-4;
    let p = x2 * p + 4.893_524_6e-3;
    let p = xc * p;
    let q = x2 * 1.198_258_4e-6 + 1.185_347_1e-4;
    let q = x2 * q + 2.268_434_6e-3;
    let q = x2 * q + 4.893_525e-3;
    let y = p / q;
    if x.abs() < 4e-4 {
        x
    } else {
        y
    }
}

/// `erf(x)` for f32 within 7e-7 absolute error (see the module docs); NaN stays NaN.
#[inline(always)]
pub(crate) fn erf_f32(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A1: f32 = 0.254_829_6;
    const A2: f32 = -0.284_496_74;
    const A3: f32 = 1.421_413_7;
    const A4: f32 = -1.453_152_1;
    const A5: f32 = 1.061_405_4;
    let a = x.abs();
    let t = 1.0 / (P * a + 1.0);
    let r = A5 * t + A4;
    let r = r * t + A3;
    let r = r * t + A2;
    let r = r * t + A1;
    let y = 1.0 - r * t * exp_f32(-(x * x));
    // Copy the sign bit of x onto y (a bit operation, which vectorises where a branch
    // would not); for NaN the bits of y are NaN already.
    f32::from_bits(y.to_bits() | (x.to_bits() & 0x8000_0000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_f32_is_accurate_over_its_range() {
        // Both the plain and the fused (FMA) form; the latter through `mul_add`, which is
        // exact wherever it runs.
        for exp in [exp_f32 as fn(f32) -> f32, exp_f32_with::<true>] {
            let mut worst = 0f64;
            let mut x = -87.0f32;
            while x < 88.5 {
                let want = (x as f64).exp();
                let got = exp(x) as f64;
                worst = worst.max(((got - want) / want).abs());
                x += 0.0137;
            }
            assert!(worst < 3e-7, "worst relative error {worst}");
            assert_eq!(exp(0.0), 1.0);
            assert_eq!(exp(f32::NEG_INFINITY), 0.0);
            assert_eq!(exp(100.0), f32::INFINITY);
            assert!(exp(f32::NAN).is_nan());
        }
    }

    #[test]
    fn tanh_f32_is_within_a_few_ulp() {
        let mut worst = 0f64;
        let mut x = -10.0f32;
        while x < 10.0 {
            let want = (x as f64).tanh();
            let got = tanh_f32(x) as f64;
            // Relative error, in units of f32's epsilon.
            worst = worst.max((got - want).abs() / want.abs().max(1e-30) / f32::EPSILON as f64);
            x += 0.000_917;
        }
        assert!(worst < 4.0, "worst error {worst} ulp");
        assert_eq!(tanh_f32(0.0), 0.0);
        assert_eq!(tanh_f32(1e-6), 1e-6);
        assert_eq!(tanh_f32(20.0), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
        assert_eq!(tanh_f32(-0.5), -tanh_f32(0.5));
    }

    #[test]
    fn erf_f32_is_within_its_bound_everywhere() {
        let mut worst = 0f64;
        let mut x = -9.0f32;
        while x < 9.0 {
            let want = libm::erf(x as f64);
            worst = worst.max((erf_f32(x) as f64 - want).abs());
            x += 0.000_731;
        }
        assert!(worst < 1e-6, "worst absolute error {worst}");
        assert!(erf_f32(0.0).abs() < 1e-6);
        assert_eq!(erf_f32(f32::INFINITY), 1.0);
        assert_eq!(erf_f32(f32::NEG_INFINITY), -1.0);
        assert!(erf_f32(f32::NAN).is_nan());
        assert_eq!(erf_f32(-2.0), -erf_f32(2.0));
    }
}
