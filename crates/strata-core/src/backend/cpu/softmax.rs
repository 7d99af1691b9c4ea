//! The softmax kernel: `softmax`/`log_softmax` over contiguous slabs `[len, inner]`, each
//! processed in three streaming passes over memory that stays in cache (the maximum, the sum
//! of `exp(x - max)`, and the write). With `inner > 1` the passes run across the `inner`
//! neighbours at once, so the inner loop is always over contiguous memory. f16 and bf16 are
//! computed in f32 (converted slice-wise); f32 uses the vectorisable `exp` of
//! [`super::math`], and f32 rows go to the SIMD row kernels of [`super::softmax_row`].
//! Blocks of slabs run in parallel on strata's pool.

use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use super::math::{exp_f32_with, Float};
use super::threads::{pool, GRAIN_SIZE};
use crate::backend::args::SoftmaxArgs;
use crate::dtype::DType;

/// What the softmax kernels need of their compute type (f32, also for f16/bf16, or f64)
/// beyond [`Float`]'s arithmetic: a NaN-winning maximum written so that it vectorises, the
/// fused-multiply-add `exp`, and the widest slab kernel this CPU runs.
trait SoftmaxFloat: Float {
    /// Negative infinity, the maximum of nothing.
    const NEG_INF: Self;
    /// The larger of two values, NaN winning (as in PyTorch), without branches on data.
    fn max_nan(self, other: Self) -> Self;
    /// `exp` in code compiled with FMA enabled (see [`exp_f32_with`]).
    #[inline(always)]
    fn exp_fused(self) -> Self {
        self.exp_vectorisable()
    }
    /// [`slab`] with the widest vector instructions this CPU has. `stream` allows
    /// non-temporal stores for the output (the caller fences after the last slab).
    fn slab_best(
        x: &[Self],
        out: &mut [Self],
        inner: usize,
        log: bool,
        scratch: &mut Vec<Self>,
        stream: bool,
    ) {
        let _ = stream;
        slab::<Self, false>(x, out, inner, log, scratch);
    }
}

macro_rules! softmax_float {
    ($t:ty, avx2) => {
        softmax_float!($t, {
            #[inline]
            fn slab_best(
                x: &[Self],
                out: &mut [Self],
                inner: usize,
                log: bool,
                scratch: &mut Vec<Self>,
                stream: bool,
            ) {
                #[cfg(target_arch = "x86_64")]
                if crate::backend::cpu::chunk::avx2() {
                    // SAFETY: the CPU supports AVX2 and FMA (checked just above).
                    unsafe { slab_avx2(x, out, inner, log, scratch, stream) };
                    return;
                }
                let _ = stream;
                slab::<Self, false>(x, out, inner, log, scratch);
            }
            #[inline(always)]
            fn exp_fused(self) -> Self {
                exp_f32_with::<true>(self)
            }
        });
    };
    ($t:ty) => {
        softmax_float!($t, {});
    };
    ($t:ty, { $($extra:item)* }) => {
        impl SoftmaxFloat for $t {
            const NEG_INF: Self = <$t>::NEG_INFINITY;
            #[inline(always)]
            fn max_nan(self, other: Self) -> Self {
                if self.is_nan() || self > other {
                    self
                } else {
                    other
                }
            }
            $($extra)*
        }
    };
}

/// [`slab`] for f32 compiled for AVX2 (8 lanes instead of SSE2's 4) and FMA; rows go to
/// the AVX-512 row kernel where the CPU has it.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn slab_avx2(
    x: &[f32],
    out: &mut [f32],
    inner: usize,
    log: bool,
    scratch: &mut Vec<f32>,
    stream: bool,
) {
    if inner == 1 {
        use crate::backend::cpu::softmax_row::{row_avx2, row_avx512};
        // SAFETY: forwarded (AVX2 and FMA); AVX-512 is checked.
        unsafe {
            if std::arch::is_x86_feature_detected!("avx512f") {
                row_avx512(x, out, log, scratch, stream)
            } else {
                row_avx2(x, out, log, scratch, stream)
            }
        };
    } else {
        slab::<f32, true>(x, out, inner, log, scratch);
    }
}

softmax_float!(f32, avx2);
softmax_float!(f64);

/// Lanes of independent partial results in the row reductions (lets the compiler keep
/// several vector accumulators).
const LANES: usize = 16;

#[inline(always)]
fn row_max<T: SoftmaxFloat>(x: &[T]) -> T {
    let mut acc = [T::NEG_INF; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = a.max_nan(v);
        }
    }
    let mut m = chunks
        .remainder()
        .iter()
        .fold(T::NEG_INF, |a, &v| a.max_nan(v));
    for a in acc {
        m = m.max_nan(a);
    }
    m
}

/// Softmax (or log-softmax) of one contiguous row `x` into `out`.
#[inline(always)]
fn row<T: SoftmaxFloat, const FUSED: bool>(x: &[T], out: &mut [T], log: bool) {
    let exp = |v: T| {
        if FUSED {
            v.exp_fused()
        } else {
            v.exp_vectorisable()
        }
    };
    let m = row_max(x);
    // An all -inf row gives NaN in PyTorch (exp(-inf - -inf)); keep that.
    let mut acc = [T::ZERO; LANES];
    if log {
        let mut chunks = x.chunks_exact(LANES);
        for c in &mut chunks {
            for (a, &v) in acc.iter_mut().zip(c) {
                *a = a.add(exp(v.sub(m)));
            }
        }
        let mut s = chunks
            .remainder()
            .iter()
            .fold(T::ZERO, |a, &v| a.add(exp(v.sub(m))));
        for a in acc {
            s = s.add(a);
        }
        // x - max - log(sum), in PyTorch's order: adding the log to a large max first
        // would absorb it.
        let ls = s.ln();
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v.sub(m).sub(ls);
        }
    } else {
        let mut xs = x.chunks_exact(LANES);
        let mut os = out.chunks_exact_mut(LANES);
        for (c, o) in (&mut xs).zip(&mut os) {
            for ((a, &v), o) in acc.iter_mut().zip(c).zip(o) {
                let e = exp(v.sub(m));
                *o = e;
                *a = a.add(e);
            }
        }
        let mut s = T::ZERO;
        for (&v, o) in xs.remainder().iter().zip(os.into_remainder()) {
            let e = exp(v.sub(m));
            *o = e;
            s = s.add(e);
        }
        for a in acc {
            s = s.add(a);
        }
        let r = T::ONE.div(s);
        for o in out.iter_mut() {
            *o = o.mul(r);
        }
    }
}

/// Softmax along the middle dimension of one `[len, inner]` block, `inner > 1`; `scratch`
/// holds `2·inner` values.
#[inline(always)]
fn block<T: SoftmaxFloat, const FUSED: bool>(
    x: &[T],
    out: &mut [T],
    inner: usize,
    log: bool,
    scratch: &mut [T],
) {
    let exp = |v: T| {
        if FUSED {
            v.exp_fused()
        } else {
            v.exp_vectorisable()
        }
    };
    let (m, s) = scratch.split_at_mut(inner);
    m.fill(T::NEG_INF);
    s.fill(T::ZERO);
    for r in x.chunks_exact(inner) {
        for (a, &v) in m.iter_mut().zip(r) {
            *a = a.max_nan(v);
        }
    }
    for r in x.chunks_exact(inner) {
        for ((a, &v), &mx) in s.iter_mut().zip(r).zip(m.iter()) {
            *a = a.add(exp(v.sub(mx)));
        }
    }
    if log {
        for a in s.iter_mut() {
            *a = a.ln();
        }
    } else {
        for a in s.iter_mut() {
            *a = T::ONE.div(*a);
        }
    }
    for (r, o) in x.chunks_exact(inner).zip(out.chunks_exact_mut(inner)) {
        for (((o, &v), &mx), &k) in o.iter_mut().zip(r).zip(m.iter()).zip(s.iter()) {
            *o = if log {
                v.sub(mx).sub(k)
            } else {
                exp(v.sub(mx)).mul(k)
            };
        }
    }
}

/// One `[len, inner]` slab of the input and the output, in compute precision.
#[inline(always)]
fn slab<T: SoftmaxFloat, const FUSED: bool>(
    x: &[T],
    out: &mut [T],
    inner: usize,
    log: bool,
    scratch: &mut Vec<T>,
) {
    if inner == 1 {
        row::<T, FUSED>(x, out, log);
    } else {
        scratch.resize(2 * inner, T::ZERO);
        block::<T, FUSED>(x, out, inner, log, scratch);
    }
}

/// Runs `f(first_slab, count)` over `outer` slabs of `slab_len` elements, in parallel when
/// the work is large enough.
fn for_slabs(outer: usize, slab_len: usize, f: impl Fn(usize, usize) + Sync) {
    let total = outer * slab_len;
    if total < GRAIN_SIZE || outer == 1 {
        f(0, outer);
        return;
    }
    let per = GRAIN_SIZE.div_ceil(slab_len).max(1);
    let chunks = outer.div_ceil(per);
    pool().install(|| {
        (0..chunks)
            .into_par_iter()
            .for_each(|c| f(c * per, per.min(outer - c * per)))
    });
}

/// Raw input and output addresses, passed to the pool's threads.
#[derive(Clone, Copy)]
struct Ptrs {
    input: usize,
    output: usize,
}

/// Softmax over slabs stored as `T` and computed as `T` (f32, f64).
///
/// # Safety
/// `p.input` must point to `outer·slab_len` readable `T` and `p.output` to as many writable
/// `T` that nothing else accesses during the call, and the two ranges must not overlap.
unsafe fn run_direct<T: SoftmaxFloat>(
    p: Ptrs,
    outer: usize,
    slab_len: usize,
    inner: usize,
    log: bool,
) {
    // Outputs large against the cache are written with streaming stores.
    let stream = outer * slab_len * std::mem::size_of::<T>() >= crate::backend::cpu::stream_bytes();
    for_slabs(outer, slab_len, |first, count| {
        let mut scratch = Vec::new();
        for o in first..first + count {
            // SAFETY: slab `o` lies inside both ranges (o < outer); slabs handed to different
            // threads are disjoint, and the input and output ranges do not overlap.
            let (x, y) = unsafe {
                (
                    std::slice::from_raw_parts((p.input as *const T).add(o * slab_len), slab_len),
                    std::slice::from_raw_parts_mut(
                        (p.output as *mut T).add(o * slab_len),
                        slab_len,
                    ),
                )
            };
            T::slab_best(x, y, inner, log, &mut scratch, stream);
        }
        if stream {
            crate::backend::cpu::chunk::stream_fence();
        }
    });
}

/// Softmax over f16/bf16 slabs, computed in f32 through per-thread buffers.
///
/// # Safety
/// As [`run_direct`], for elements of type `H`.
unsafe fn run_widened<H>(p: Ptrs, outer: usize, slab_len: usize, inner: usize, log: bool)
where
    H: Copy + Send + Sync + 'static,
    [H]: HalfFloatSliceExt,
{
    for_slabs(outer, slab_len, |first, count| {
        let mut scratch = Vec::new();
        let mut xs = vec![0f32; slab_len];
        let mut ys = vec![0f32; slab_len];
        for o in first..first + count {
            // SAFETY: as in `run_direct`.
            let (x, y) = unsafe {
                (
                    std::slice::from_raw_parts((p.input as *const H).add(o * slab_len), slab_len),
                    std::slice::from_raw_parts_mut(
                        (p.output as *mut H).add(o * slab_len),
                        slab_len,
                    ),
                )
            };
            x.convert_to_f32_slice(&mut xs);
            f32::slab_best(&xs, &mut ys, inner, log, &mut scratch, false);
            y.convert_from_f32_slice(&ys);
        }
    });
}

/// Softmax (or with `log`, log-softmax) of `outer` contiguous slabs of `slab_len` elements,
/// each `[slab_len / inner, inner]` reduced along its first dimension, from `input` into
/// `output`, in `dtype` (floating). Does nothing for other dtypes.
///
/// # Safety
/// `input` must point to `outer·slab_len` readable elements of `dtype` and `output` to as
/// many writable ones that nothing else accesses during the call, and the two ranges must not
/// overlap.
pub(crate) unsafe fn slabs(args: &SoftmaxArgs) {
    let SoftmaxArgs {
        dtype,
        input,
        output,
        outer,
        slab_len,
        inner,
        log,
    } = *args;
    let p = Ptrs {
        input: input as usize,
        output: output as usize,
    };
    // SAFETY: forwarded from the caller.
    unsafe {
        match dtype {
            DType::F32 => run_direct::<f32>(p, outer, slab_len, inner, log),
            DType::F64 => run_direct::<f64>(p, outer, slab_len, inner, log),
            DType::F16 => run_widened::<half::f16>(p, outer, slab_len, inner, log),
            DType::BF16 => run_widened::<half::bf16>(p, outer, slab_len, inner, log),
            _ => {}
        }
    }
}
