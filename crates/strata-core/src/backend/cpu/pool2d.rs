//! 2-d max pooling over contiguous planes, with the position of each maximum, and its
//! backward: each plane on its own, planes split across strata's pool.

use super::gather::SharedPtr;
use super::threads::spread;
use crate::backend::args::{MaxPoolArgs, MaxPoolBackwardArgs};
use crate::backend::kernel::PoolWindows;
use crate::dtype::{dispatch, DTypeFn, Element};
use crate::DType;

/// For each of `planes` planes of `src` (`h×w` elements each, contiguous), writes each
/// window's maximum to `dst` and its flat position in the plane to `idx` (`oh×ow` per plane,
/// contiguous). The first maximum in row-major window order wins; a NaN wins over numbers.
///
/// # Safety
/// `src` holds `planes·h·w` readable elements of `dtype`; `dst` and `idx` hold `planes·oh·ow`
/// writable elements of `dtype` and i64, sharing no memory with `src` or each other. Every
/// window must hold at least one position inside its plane.
pub(crate) unsafe fn max_pool2d(args: &MaxPoolArgs<'_>) {
    dispatch(
        args.dtype,
        MaxPool {
            src: SharedPtr(args.src as *mut u8),
            dst: SharedPtr(args.dst),
            idx: SharedPtr(args.idx as *mut u8),
            planes: args.planes,
            win: *args.windows,
        },
    );
}

struct MaxPool {
    src: SharedPtr,
    dst: SharedPtr,
    idx: SharedPtr,
    planes: usize,
    win: PoolWindows,
}

impl DTypeFn for MaxPool {
    type Output = ();
    fn call<T: Element>(self) {
        let w = self.win;
        let (plane_in, plane_out) = (w.h * w.w, w.oh * w.ow);
        #[cfg(target_arch = "x86_64")]
        let vector_pairs = T::DTYPE == DType::F32 && super::pool2d_pairs::takes(&w);
        let one = |p: usize| {
            // SAFETY: plane `p` of each operand lies inside it (the caller's contract), and
            // each plane is written by this call only.
            let (src, dst, idx) = unsafe {
                (
                    std::slice::from_raw_parts(
                        (self.src.get() as *const T).add(p * plane_in),
                        plane_in,
                    ),
                    std::slice::from_raw_parts_mut(
                        (self.dst.get() as *mut T).add(p * plane_out),
                        plane_out,
                    ),
                    std::slice::from_raw_parts_mut(
                        (self.idx.get() as *mut i64).add(p * plane_out),
                        plane_out,
                    ),
                )
            };
            #[cfg(target_arch = "x86_64")]
            if vector_pairs {
                // SAFETY: `T` is f32 (its dtype), the CPU has AVX-512F and the windows suit
                // the kernel (`takes`); the slices are the plane's operands.
                unsafe {
                    super::pool2d_pairs::plane(
                        src.as_ptr().cast(),
                        dst.as_mut_ptr().cast(),
                        idx.as_mut_ptr(),
                        &w,
                    )
                };
                return;
            }
            if w.is_pairs() {
                pairs(src, dst, idx, &w);
            } else if w.inside() {
                inside(src, dst, idx, &w);
            } else {
                clipped(src, dst, idx, &w);
            }
        };
        let work = self.planes * plane_out * w.kh * w.kw;
        if work < 1 << 16 || self.planes < 2 {
            (0..self.planes).for_each(one);
        } else {
            spread(self.planes, &one);
        }
    }
}

/// Whether `v` replaces `best` as a window's maximum: larger, or the first NaN.
#[inline(always)]
fn beats<T: Element>(v: T, best: T) -> bool {
    #[allow(clippy::eq_op)]
    let nan = v != v && best == best;
    v > best || nan
}

/// One plane's windows, any geometry: each window clipped to the plane.
fn clipped<T: Element>(src: &[T], dst: &mut [T], idx: &mut [i64], w: &PoolWindows) {
    let plane_in = w.h * w.w;
    for oy in 0..w.oh {
        let rows = PoolWindows::span(oy, w.sh, w.ph, w.kh, w.h);
        for ox in 0..w.ow {
            let cols = PoolWindows::span(ox, w.sw, w.pw, w.kw, w.w);
            let first = rows.start * w.w + cols.start;
            let (mut best, mut at) = (src[first.min(plane_in - 1)], first);
            for y in rows.clone() {
                for (x, &v) in src[y * w.w + cols.start..y * w.w + cols.end]
                    .iter()
                    .enumerate()
                {
                    if beats(v, best) {
                        (best, at) = (v, y * w.w + cols.start + x);
                    }
                }
            }
            dst[oy * w.ow + ox] = best;
            idx[oy * w.ow + ox] = at as i64;
        }
    }
}

/// One plane's windows when every window lies inside the plane (no padding read): no
/// clipping, each window's rows read as slices.
fn inside<T: Element>(src: &[T], dst: &mut [T], idx: &mut [i64], w: &PoolWindows) {
    for oy in 0..w.oh {
        let y0 = oy * w.sh;
        let (out, at_out) = (
            &mut dst[oy * w.ow..(oy + 1) * w.ow],
            &mut idx[oy * w.ow..(oy + 1) * w.ow],
        );
        for (ox, (d, i)) in out.iter_mut().zip(at_out.iter_mut()).enumerate() {
            let x0 = ox * w.sw;
            let (mut best, mut at) = (src[y0 * w.w + x0], y0 * w.w + x0);
            for y in y0..y0 + w.kh {
                let row = &src[y * w.w + x0..y * w.w + x0 + w.kw];
                for (x, &v) in row.iter().enumerate() {
                    if beats(v, best) {
                        (best, at) = (v, y * w.w + x0 + x);
                    }
                }
            }
            *d = best;
            *i = at as i64;
        }
    }
}

/// One plane's 2×2 windows at stride 2 inside the plane (the usual `MaxPool2d(2)`), built
/// with AVX2 where the CPU has it (the compiler vectorises the pairwise selects).
fn pairs<T: Element>(src: &[T], dst: &mut [T], idx: &mut [i64], w: &PoolWindows) {
    #[cfg(target_arch = "x86_64")]
    if super::chunk::avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        unsafe { pairs_avx2(src, dst, idx, w) };
        return;
    }
    pairs_body(src, dst, idx, w);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pairs_avx2<T: Element>(src: &[T], dst: &mut [T], idx: &mut [i64], w: &PoolWindows) {
    pairs_body(src, dst, idx, w);
}

/// Two input rows per output row. Each window's maximum is the better of its two rows'
/// maxima, each row's the better of its two elements, where the later one wins only when it
/// [`beats`] the earlier: the first maximum in row-major order, or the first NaN, as
/// [`clipped`] finds it.
#[inline(always)]
fn pairs_body<T: Element>(src: &[T], dst: &mut [T], idx: &mut [i64], w: &PoolWindows) {
    let ow = w.ow;
    for oy in 0..w.oh {
        let top = 2 * oy * w.w;
        let r0 = &src[top..top + 2 * ow];
        let r1 = &src[top + w.w..top + w.w + 2 * ow];
        let out = &mut dst[oy * ow..(oy + 1) * ow];
        let at_out = &mut idx[oy * ow..(oy + 1) * ow];
        let below = w.w as i64;
        for ox in 0..ow {
            let (a, b, c, d) = (r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]);
            let upper = beats(b, a);
            let (m0, i0) = if upper { (b, 1) } else { (a, 0) };
            let lower = beats(d, c);
            let (m1, i1) = if lower { (d, below + 1) } else { (c, below) };
            let second = beats(m1, m0);
            out[ox] = if second { m1 } else { m0 };
            at_out[ox] = (top + 2 * ox) as i64 + if second { i1 } else { i0 };
        }
    }
}

/// For each of `planes` planes, writes zeros to `gx` (`plane_in` elements per plane) and adds
/// each element of `grad` (`plane_out` per plane) at the position `idx` names in its plane;
/// positions outside the plane are skipped.
///
/// # Safety
/// `grad` and `idx` hold `planes·plane_out` readable elements of `dtype` and i64; `gx` holds
/// `planes·plane_in` writable elements of `dtype` sharing no memory with them.
pub(crate) unsafe fn max_pool2d_backward(args: &MaxPoolBackwardArgs) {
    dispatch(
        args.dtype,
        MaxPoolBackward {
            grad: SharedPtr(args.grad as *mut u8),
            idx: SharedPtr(args.idx as *mut u8),
            gx: SharedPtr(args.gx),
            planes: args.planes,
            plane_in: args.plane_in,
            plane_out: args.plane_out,
        },
    );
}

struct MaxPoolBackward {
    grad: SharedPtr,
    idx: SharedPtr,
    gx: SharedPtr,
    planes: usize,
    plane_in: usize,
    plane_out: usize,
}

impl DTypeFn for MaxPoolBackward {
    type Output = ();
    fn call<T: Element>(self) {
        let (pi, po) = (self.plane_in, self.plane_out);
        let one = |p: usize| {
            // SAFETY: plane `p` of each operand lies inside it (the caller's contract), and
            // each plane of `gx` is written by this call only.
            let (grad, idx, gx) = unsafe {
                (
                    std::slice::from_raw_parts((self.grad.get() as *const T).add(p * po), po),
                    std::slice::from_raw_parts((self.idx.get() as *const i64).add(p * po), po),
                    std::slice::from_raw_parts_mut((self.gx.get() as *mut T).add(p * pi), pi),
                )
            };
            gx.fill(T::ZERO);
            for (&g, &i) in grad.iter().zip(idx) {
                if let Some(slot) = usize::try_from(i).ok().and_then(|i| gx.get_mut(i)) {
                    *slot = slot.add(g);
                }
            }
        };
        if self.planes * (pi + po) < 1 << 16 || self.planes < 2 {
            (0..self.planes).for_each(one);
        } else {
            spread(self.planes, &one);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{clipped, inside, pairs};
    use crate::backend::kernel::PoolWindows;

    /// A plane with ties (few distinct values) and NaNs, the same each run.
    fn plane(h: usize, w: usize) -> Vec<f32> {
        (0..h * w)
            .map(|k| match (k * 7919) % 23 {
                0 => f32::NAN,
                r => (r % 4) as f32 - 1.5,
            })
            .collect()
    }

    fn windows(h: usize, w: usize, k: usize, s: usize, ceil: bool) -> PoolWindows {
        let out = |size: usize| {
            if ceil {
                (size - k).div_ceil(s) + 1
            } else {
                (size - k) / s + 1
            }
        };
        PoolWindows {
            h,
            w,
            oh: out(h),
            ow: out(w),
            kh: k,
            kw: k,
            sh: s,
            sw: s,
            ph: 0,
            pw: 0,
        }
    }

    fn run(
        f: fn(&[f32], &mut [f32], &mut [i64], &PoolWindows),
        src: &[f32],
        w: &PoolWindows,
    ) -> (Vec<u32>, Vec<i64>) {
        let mut dst = vec![0.0; w.oh * w.ow];
        let mut idx = vec![0; w.oh * w.ow];
        f(src, &mut dst, &mut idx, w);
        (dst.iter().map(|v| v.to_bits()).collect(), idx)
    }

    /// The AVX-512 pairs kernel over one plane's slices.
    #[cfg(target_arch = "x86_64")]
    fn avx512_pairs(src: &[f32], dst: &mut [f32], idx: &mut [i64], w: &PoolWindows) {
        assert!(super::super::pool2d_pairs::takes(w));
        assert!(src.len() == w.h * w.w && dst.len() == w.oh * w.ow && idx.len() == dst.len());
        // SAFETY: the CPU has AVX-512F and the windows suit the kernel (asserted); the slices
        // have the plane's sizes.
        unsafe {
            super::super::pool2d_pairs::plane(src.as_ptr(), dst.as_mut_ptr(), idx.as_mut_ptr(), w)
        };
    }

    /// The unclipped paths pick the same maximum at the same position as the general one,
    /// ties and NaNs included.
    #[test]
    fn the_fast_paths_agree_with_the_clipped_windows() {
        let shapes = [
            (28, 28, 2, 2),
            (7, 9, 2, 2),
            (14, 14, 3, 2),
            (9, 6, 3, 3),
            // Output rows of 16 windows, of more than 16 (one full vector and a masked
            // one), and of one window.
            (4, 32, 2, 2),
            (6, 71, 2, 2),
            (5, 3, 2, 2),
        ];
        for (h, w, k, s) in shapes {
            let win = windows(h, w, k, s, false);
            assert!(win.inside());
            let src = plane(h, w);
            let general = run(clipped, &src, &win);
            assert_eq!(run(inside, &src, &win), general, "{h}x{w} k{k} s{s}");
            if (k, s) == (2, 2) {
                assert!(win.is_pairs());
                assert_eq!(run(pairs, &src, &win), general, "{h}x{w} pairs");
                #[cfg(target_arch = "x86_64")]
                if super::super::pool2d_pairs::takes(&win) {
                    assert_eq!(run(avx512_pairs, &src, &win), general, "{h}x{w} AVX-512");
                }
            }
        }
        // ceil_mode's last window hangs over the edge: not inside.
        assert!(!windows(7, 7, 2, 2, true).inside());
    }
}
