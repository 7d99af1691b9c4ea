//! A vectorisable `erf` for f32, the one the GELU kernels use.
//!
//! It is the rational approximation of Abramowitz and Stegun (7.1.26), the same one
//! PyTorch's vectorised CPU kernels evaluate: with `t = 1 / (1 + p·|x|)`,
//! `erf(x) = sign(x)·(1 − t·(a1 + t·(a2 + t·(a3 + t·(a4 + t·a5))))·e^(−x²))`, absolute error
//! at most 1.5e-7 in exact arithmetic and 7e-7 as evaluated in f32 (the polynomial's terms
//! nearly cancel for small `|x|`). It is straight-line code over [`exp_f32`], so a loop over
//! a slice of it compiles to SIMD where a library `erff` is one call per element.

use super::softmax::exp_f32;

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
