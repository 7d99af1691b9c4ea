//! 2-d max pooling over contiguous planes, with the position of each maximum, and its
//! backward: each plane on its own, planes split across strata's pool.

use rayon::prelude::*;

use super::gather::SharedPtr;
use super::threads::pool;
use crate::backend::args::{MaxPoolArgs, MaxPoolBackwardArgs};
use crate::backend::kernel::PoolWindows;
use crate::dtype::{dispatch, DTypeFn, Element};

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
                            #[allow(clippy::eq_op)]
                            let nan = v != v && best == best;
                            if v > best || nan {
                                (best, at) = (v, y * w.w + cols.start + x);
                            }
                        }
                    }
                    dst[oy * w.ow + ox] = best;
                    idx[oy * w.ow + ox] = at as i64;
                }
            }
        };
        let work = self.planes * plane_out * w.kh * w.kw;
        if work < 1 << 16 || self.planes < 2 {
            (0..self.planes).for_each(one);
        } else {
            pool().install(|| (0..self.planes).into_par_iter().for_each(one));
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
            pool().install(|| (0..self.planes).into_par_iter().for_each(one));
        }
    }
}
