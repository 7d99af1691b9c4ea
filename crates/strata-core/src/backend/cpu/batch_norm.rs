//! Batch norm's fused passes over `[n, c, s]` contiguous elements: the per-channel sums
//! (the mean and variance forward; `Σ grad` and `Σ grad·(x - mean)` backward), accumulated
//! in f64 with channels split across strata's pool, and the per-channel affine map
//! (`x·a + b`, plus `grad·d` backward) with `(sample, channel)` slabs split across it.

use rayon::prelude::*;

use super::gather::SharedPtr;
use super::threads::{pool, spread};
use crate::backend::args::{ChannelAffineArgs, ChannelSumsArgs};
use crate::DType;

/// Elements below which a call stays on the calling thread.
const PARALLEL_WORK: usize = 1 << 15;

/// Slabs per task of the affine map.
const SLABS_PER_TASK: usize = 16;

/// The float types the passes take.
trait Real: Copy + Send + Sync + 'static {
    fn wide(self) -> f64;
    fn narrow(v: f64) -> Self;
    fn mul_add(self, a: Self, b: Self) -> Self;
}

impl Real for f32 {
    #[inline(always)]
    fn wide(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn narrow(v: f64) -> f32 {
        v as f32
    }
    #[inline(always)]
    fn mul_add(self, a: f32, b: f32) -> f32 {
        self * a + b
    }
}

impl Real for f64 {
    #[inline(always)]
    fn wide(self) -> f64 {
        self
    }
    #[inline(always)]
    fn narrow(v: f64) -> f64 {
        v
    }
    #[inline(always)]
    fn mul_add(self, a: f64, b: f64) -> f64 {
        self * a + b
    }
}

/// The per-channel sums; false (nothing written) for a dtype other than f32 and f64.
///
/// # Safety
/// As for [`crate::backend::Backend::channel_sums`].
pub(crate) unsafe fn channel_sums(args: &ChannelSumsArgs) -> bool {
    match args.dtype {
        // SAFETY: forwarded from the caller.
        DType::F32 => unsafe { sums::<f32>(args) },
        // SAFETY: forwarded from the caller.
        DType::F64 => unsafe { sums::<f64>(args) },
        _ => return false,
    }
    true
}

/// The per-channel affine map; false (nothing written) for a dtype other than f32 and f64.
///
/// # Safety
/// As for [`crate::backend::Backend::channel_affine`].
pub(crate) unsafe fn channel_affine(args: &ChannelAffineArgs) -> bool {
    match args.dtype {
        // SAFETY: forwarded from the caller.
        DType::F32 => unsafe { affine::<f32>(args) },
        // SAFETY: forwarded from the caller.
        DType::F64 => unsafe { affine::<f64>(args) },
        _ => return false,
    }
    true
}

/// `Σ f(k)` over `0..len` in f64, eight partial sums at a time.
#[inline(always)]
fn sum8(len: usize, f: impl Fn(usize) -> f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let whole = len / 8 * 8;
    for k in (0..whole).step_by(8) {
        for (lane, a) in acc.iter_mut().enumerate() {
            *a += f(k + lane);
        }
    }
    let tail: f64 = (whole..len).map(f).sum();
    acc.iter().sum::<f64>() + tail
}

/// # Safety
/// As for [`channel_sums`], with `T` the operands' dtype.
unsafe fn sums<T: Real>(args: &ChannelSumsArgs) {
    let (n, c, s) = (args.n, args.c, args.s);
    let count = (n * s) as f64;
    let x = SharedPtr(args.x as *mut u8);
    let grad = SharedPtr(args.grad as *mut u8);
    let mean = SharedPtr(args.mean as *mut u8);
    let (first, second) = (SharedPtr(args.first), SharedPtr(args.second));
    let one = |ch: usize| {
        // The channel's run in sample `i`: `s` elements of `p` from `(i·c + ch)·s`.
        let run = |p: &SharedPtr, i: usize| {
            // SAFETY: the run lies inside the operand's n·c·s elements (the caller's
            // contract), which nothing writes during the call.
            unsafe { std::slice::from_raw_parts((p.get() as *const T).add((i * c + ch) * s), s) }
        };
        let (a, b) = if grad.get().is_null() {
            let total: f64 = (0..n)
                .map(|i| run(&x, i))
                .map(|r| sum8(s, |k| r[k].wide()))
                .sum();
            let m = total / count;
            let squares: f64 = (0..n)
                .map(|i| run(&x, i))
                .map(|r| {
                    sum8(s, |k| {
                        let d = r[k].wide() - m;
                        d * d
                    })
                })
                .sum();
            (m, squares / count)
        } else {
            // SAFETY: `mean` holds c readable elements with a gradient (the contract).
            let m = unsafe { *(mean.get() as *const T).add(ch) }.wide();
            let (mut sum_g, mut dot) = (0.0, 0.0);
            for i in 0..n {
                let (g, xs) = (run(&grad, i), run(&x, i));
                sum_g += sum8(s, |k| g[k].wide());
                dot += sum8(s, |k| g[k].wide() * (xs[k].wide() - m));
            }
            (sum_g, dot)
        };
        // SAFETY: channel `ch` of the two c-element outputs is written by this task only.
        unsafe {
            *(first.get() as *mut T).add(ch) = T::narrow(a);
            *(second.get() as *mut T).add(ch) = T::narrow(b);
        }
    };
    if n * c * s < PARALLEL_WORK || c < 2 {
        (0..c).for_each(one);
    } else {
        spread(c, &one);
    }
}

/// # Safety
/// As for [`channel_affine`], with `T` the operands' dtype.
unsafe fn affine<T: Real>(args: &ChannelAffineArgs) {
    let (n, c, s) = (args.n, args.c, args.s);
    let x = SharedPtr(args.x as *mut u8);
    let grad = SharedPtr(args.grad as *mut u8);
    let out = SharedPtr(args.out);
    // SAFETY: `a`, `b` (and `d` with a gradient) hold c readable elements (the contract).
    let (a, b, d) = unsafe {
        (
            std::slice::from_raw_parts(args.a as *const T, c),
            std::slice::from_raw_parts(args.b as *const T, c),
            (!args.grad.is_null()).then(|| std::slice::from_raw_parts(args.d as *const T, c)),
        )
    };
    let slab = |j: usize| {
        let ch = j % c;
        // SAFETY: slab j (sample j / c, channel j % c) lies inside each operand's n·c·s
        // elements; the output's slab is written by this task only and overlaps no input.
        let (xs, ys) = unsafe {
            (
                std::slice::from_raw_parts((x.get() as *const T).add(j * s), s),
                std::slice::from_raw_parts_mut((out.get() as *mut T).add(j * s), s),
            )
        };
        let (ac, bc) = (a[ch], b[ch]);
        match d {
            None => {
                for (y, &v) in ys.iter_mut().zip(xs) {
                    *y = v.mul_add(ac, bc);
                }
            }
            Some(d) => {
                // SAFETY: as for `xs`, for the gradient.
                let gs =
                    unsafe { std::slice::from_raw_parts((grad.get() as *const T).add(j * s), s) };
                let dc = d[ch];
                for ((y, &v), &g) in ys.iter_mut().zip(xs).zip(gs) {
                    *y = g.mul_add(dc, v.mul_add(ac, bc));
                }
            }
        }
    };
    let slabs = n * c;
    if slabs * s < PARALLEL_WORK || slabs < 2 {
        (0..slabs).for_each(slab);
    } else {
        pool().install(|| {
            (0..slabs)
                .into_par_iter()
                .with_min_len(SLABS_PER_TASK)
                .for_each(slab)
        });
    }
}
