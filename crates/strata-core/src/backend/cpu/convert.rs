//! Vectorised conversions between the half-precision dtypes and f32, the element-wise engine's
//! most frequent conversion (every f16 and bf16 op computes in f32).
//!
//! bf16 widens by a shift (quieting a signalling NaN) and rounds to nearest even with integer
//! arithmetic that has no branch (a NaN stays a quiet NaN with its sign and top payload
//! bits), so the loops vectorise; they are also compiled with AVX-512 and with AVX2 and
//! chosen at run time. f16 uses the `half` crate's slice conversions, which use the CPU's
//! F16C instructions where it has them. The results are exactly those of the
//! element-by-element casts (`dtype::cast`).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::chunk::avx2;
use crate::dtype::DType;

/// Converts `n` elements of `from` at `src`, `ss` bytes apart, into `n` elements of `to` at
/// `dst`, `ds` bytes apart, when the pair is one this module converts (bf16 and f32 either
/// way at any strides; f16 and f32 either way when both sides are contiguous); says whether it
/// did.
///
/// # Safety
/// The `n` source elements must be readable and the `n` destination elements writable, and
/// the two must not overlap; strides are multiples of their dtype's size.
pub(crate) unsafe fn convert(
    src: *const u8,
    ss: isize,
    from: DType,
    dst: *mut u8,
    ds: isize,
    to: DType,
    n: usize,
) -> bool {
    let contiguous = ss == from.size() as isize && ds == to.size() as isize;
    // SAFETY: forwarded from the caller; each arm reads and writes the dtypes it names, at
    // strides counted in elements of them.
    unsafe {
        match (from, to) {
            (DType::BF16, DType::F32) => widen_bf16(src.cast(), ss / 2, dst.cast(), ds / 4, n),
            (DType::F32, DType::BF16) => narrow_bf16(src.cast(), ss / 4, dst.cast(), ds / 2, n),
            (DType::F16, DType::F32) if contiguous => {
                let src = std::slice::from_raw_parts(src.cast::<f16>(), n);
                src.convert_to_f32_slice(std::slice::from_raw_parts_mut(dst.cast(), n));
            }
            (DType::F32, DType::F16) if contiguous => {
                let dst = std::slice::from_raw_parts_mut(dst.cast::<f16>(), n);
                dst.convert_from_f32_slice(std::slice::from_raw_parts(src.cast(), n));
            }
            _ => return false,
        }
    }
    true
}

/// Widens `src` into `dst` (of the same length).
pub(crate) fn bf16_to_f32_slice(src: &[bf16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    // SAFETY: both slices hold `n` elements and, one shared and one exclusive, cannot overlap.
    unsafe { widen_bf16(src.as_ptr(), 1, dst.as_mut_ptr(), 1, n) }
}

/// Rounds `src` into `dst` (of the same length), as [`bf16_bits`].
pub(crate) fn bf16_from_f32_slice(src: &[f32], dst: &mut [bf16]) {
    let n = src.len().min(dst.len());
    // SAFETY: as above.
    unsafe { narrow_bf16(src.as_ptr(), 1, dst.as_mut_ptr(), 1, n) }
}

/// The bits of `x` rounded to the nearest bf16, ties to even; a NaN stays a quiet NaN (as
/// `bf16::from_f32`).
#[inline(always)]
pub(crate) fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16;
    let quiet = ((b >> 16) | 0x40) as u16;
    if b & 0x7fff_ffff > 0x7f80_0000 {
        quiet
    } else {
        rounded
    }
}

/// Defines `$name(src, ss, dst, ds, n)` (strides in elements) over `$body`, with AVX-512 and
/// AVX2 builds chosen at run time.
macro_rules! converter {
    ($name:ident, $avx512:ident, $avx:ident, $body:ident, $from:ty, $to:ty, $f:expr) => {
        /// Converts `n` elements, `ss` and `ds` elements apart (see the module docs).
        ///
        /// # Safety
        /// As [`convert`], with strides in elements.
        unsafe fn $name(src: *const $from, ss: isize, dst: *mut $to, ds: isize, n: usize) {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx512bw") {
                // SAFETY: the CPU has AVX512-BW (and so AVX512-F); the rest is the caller's
                // contract.
                return unsafe { $avx512(src, ss, dst, ds, n) };
            }
            #[cfg(target_arch = "x86_64")]
            if avx2() {
                // SAFETY: the CPU has AVX2; the rest is the caller's contract.
                return unsafe { $avx(src, ss, dst, ds, n) };
            }
            // SAFETY: the caller's contract.
            unsafe { $body(src, ss, dst, ds, n) }
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512bw")]
        unsafe fn $avx512(src: *const $from, ss: isize, dst: *mut $to, ds: isize, n: usize) {
            // SAFETY: forwarded.
            unsafe { $body(src, ss, dst, ds, n) }
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx(src: *const $from, ss: isize, dst: *mut $to, ds: isize, n: usize) {
            // SAFETY: forwarded.
            unsafe { $body(src, ss, dst, ds, n) }
        }

        #[inline(always)]
        unsafe fn $body(src: *const $from, ss: isize, dst: *mut $to, ds: isize, n: usize) {
            let f = $f;
            // SAFETY: every index stays below `n` (caller's contract).
            unsafe {
                if ss == 1 && ds == 1 {
                    let (src, dst) = (
                        std::slice::from_raw_parts(src, n),
                        std::slice::from_raw_parts_mut(dst, n),
                    );
                    for (d, &s) in dst.iter_mut().zip(src) {
                        *d = f(s);
                    }
                } else {
                    for i in 0..n as isize {
                        *dst.offset(i * ds) = f(*src.offset(i * ss));
                    }
                }
            }
        }
    };
}

converter!(
    widen_bf16,
    widen_bf16_avx512,
    widen_bf16_avx2,
    widen_bf16_body,
    bf16,
    f32,
    |x: bf16| { f32::from_bits(u32::from(quieted(x.to_bits())) << 16) }
);

/// `x` with a signalling NaN made quiet, so that its shift is `x` widened as `bf16::to_f32`
/// widens it.
#[inline(always)]
fn quieted(x: u16) -> u16 {
    if x & 0x7fff > 0x7f80 {
        x | 0x40
    } else {
        x
    }
}
converter!(
    narrow_bf16,
    narrow_bf16_avx512,
    narrow_bf16_avx2,
    narrow_bf16_body,
    f32,
    bf16,
    |x: f32| { bf16::from_bits(bf16_bits(x)) }
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bf16 bit pattern and a spread of f32 values, including ties, subnormals,
    /// infinities and NaNs.
    fn f32_samples() -> Vec<f32> {
        let mut v: Vec<f32> = (0..=u16::MAX)
            .map(|b| f32::from_bits(u32::from(b) << 16))
            .collect();
        let mut x = 0x1234_5678u32;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.push(f32::from_bits(x));
            // Exact ties between two bf16 values, both parities.
            v.push(f32::from_bits((x & 0xffff_0000) | 0x8000));
        }
        v.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN_POSITIVE / 3.0,
        ]);
        v
    }

    #[test]
    fn narrowing_matches_the_element_cast_bit_for_bit() {
        let src = f32_samples();
        let mut dst = vec![bf16::ZERO; src.len()];
        // SAFETY: both buffers hold `src.len()` elements.
        let done = unsafe {
            convert(
                src.as_ptr().cast(),
                4,
                DType::F32,
                dst.as_mut_ptr().cast(),
                2,
                DType::BF16,
                src.len(),
            )
        };
        assert!(done);
        for (x, y) in src.iter().zip(&dst) {
            assert_eq!(
                y.to_bits(),
                bf16::from_f32(*x).to_bits(),
                "{x:e} ({:#x})",
                x.to_bits()
            );
        }
    }

    #[test]
    fn widening_is_exact_at_every_stride() {
        let src: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        for stride in [1isize, 3] {
            let n = src.len() / stride as usize;
            let mut dst = vec![0f32; n * 2];
            // SAFETY: `n` elements `stride` apart lie in `src`; `n` elements two apart in `dst`.
            unsafe {
                convert(
                    src.as_ptr().cast(),
                    2 * stride,
                    DType::BF16,
                    dst.as_mut_ptr().cast(),
                    8,
                    DType::F32,
                    n,
                )
            };
            for i in 0..n {
                let want = src[i * stride as usize].to_f32();
                assert_eq!(dst[2 * i].to_bits(), want.to_bits());
            }
        }
    }

    #[test]
    fn f16_converts_contiguous_runs_and_declines_strided_ones() {
        let src: Vec<f32> = f32_samples().into_iter().step_by(7).collect();
        let mut half = vec![f16::ZERO; src.len()];
        let mut back = vec![0f32; src.len()];
        // SAFETY: every buffer holds `src.len()` elements.
        unsafe {
            assert!(convert(
                src.as_ptr().cast(),
                4,
                DType::F32,
                half.as_mut_ptr().cast(),
                2,
                DType::F16,
                src.len()
            ));
            assert!(convert(
                half.as_ptr().cast(),
                2,
                DType::F16,
                back.as_mut_ptr().cast(),
                4,
                DType::F32,
                src.len()
            ));
            assert!(!convert(
                src.as_ptr().cast(),
                8,
                DType::F32,
                half.as_mut_ptr().cast(),
                2,
                DType::F16,
                2
            ));
        }
        for ((x, h), b) in src.iter().zip(&half).zip(&back) {
            assert_eq!(h.to_bits(), f16::from_f32(*x).to_bits());
            assert_eq!(b.to_bits(), h.to_f32().to_bits());
        }
    }
}
