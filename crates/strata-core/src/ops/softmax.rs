//! `softmax` and `log_softmax` along one dimension, into a new tensor or a given one.
//!
//! The input is viewed as `[outer, len, inner]` (made contiguous first if it is not), and the
//! result is a new contiguous tensor, as PyTorch's is (or a contiguous `out=` tensor). Each slice along `dim` is processed in
//! three streaming passes over memory that stays in cache: the maximum, the sum of
//! `exp(x - max)`, and the write. With `inner > 1` the passes run across the `inner`
//! neighbours at once, so the inner loop is always over contiguous memory. f16 and bf16 are
//! computed in f32 (converted slice-wise); f32 uses a vectorisable `exp` (`exp_f32`).
//! Blocks of `outer` run in parallel on strata's pool.

use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use crate::autograd::record::refuse_out_with_grad;
use crate::engine::kernels;
use crate::engine::pool::{pool, GRAIN_SIZE};
use crate::layout::overlap::{overlap, Overlap};
use crate::layout::{wrap_dim, Layout};
use crate::op::OpContext;
use crate::ops::iter::{ElementwiseSpec, Output};
use crate::ops::out::{check_memory, expect_dtype, Aliasing};
use crate::storage::{lock_storages, Access};
use crate::{DType, Error, Result, Tensor};

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
fn exp_f32_with<const FUSED: bool>(x: f32) -> f32 {
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

/// The arithmetic a softmax runs in: f32 (also for f16/bf16) or f64.
trait SoftmaxFloat: Copy + Send + Sync + PartialOrd + 'static {
    const NEG_INF: Self;
    const ZERO: Self;
    fn exp(self) -> Self;
    /// `exp` in code compiled with FMA enabled (see [`exp_f32_with`]).
    #[inline(always)]
    fn exp_fused(self) -> Self {
        self.exp()
    }
    fn ln(self) -> Self;
    fn max_nan(self, other: Self) -> Self;
    fn sub(self, other: Self) -> Self;
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    fn recip(self) -> Self;
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
    ($t:ty, $exp:expr, avx2) => {
        softmax_float!($t, $exp, {
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
                if crate::engine::chunk::avx2() {
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
    ($t:ty, $exp:expr) => {
        softmax_float!($t, $exp, {});
    };
    ($t:ty, $exp:expr, { $($extra:item)* }) => {
        impl SoftmaxFloat for $t {
            const NEG_INF: Self = <$t>::NEG_INFINITY;
            const ZERO: Self = 0.0;
            #[inline(always)]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn max_nan(self, other: Self) -> Self {
                // NaN wins, as in PyTorch; written without branches on data so it vectorises.
                if self.is_nan() || self > other {
                    self
                } else {
                    other
                }
            }
            #[inline(always)]
            fn sub(self, other: Self) -> Self {
                self - other
            }
            #[inline(always)]
            fn add(self, other: Self) -> Self {
                self + other
            }
            #[inline(always)]
            fn mul(self, other: Self) -> Self {
                self * other
            }
            #[inline(always)]
            fn recip(self) -> Self {
                1.0 / self
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
        use super::softmax_row_simd::{row_avx2, row_avx512};
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

softmax_float!(f32, exp_f32, avx2);
softmax_float!(f64, f64::exp);

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
    let exp = |v: T| if FUSED { v.exp_fused() } else { v.exp() };
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
        let r = s.recip();
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
    let exp = |v: T| if FUSED { v.exp_fused() } else { v.exp() };
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
            *a = a.recip();
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
    let stream = outer * slab_len * std::mem::size_of::<T>() >= crate::engine::stream_bytes();
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
            crate::engine::chunk::stream_fence();
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

/// `softmax`/`log_softmax` of `x` along `dim` into a new contiguous tensor, or into `out`
/// (checked, resized and written, its version bumped once).
fn softmax_op(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    log: bool,
    out: Option<&Tensor>,
) -> Result<Tensor> {
    let op = ctx.op();
    // As PyTorch, an empty integer tensor is accepted (there is nothing to compute).
    if !x.dtype().is_floating() && x.numel() > 0 {
        return Err(Error::dtype(
            op,
            format!("{op} needs a floating tensor, got {}", x.dtype()),
            Some("convert first with .to(DType::F32)"),
        ));
    }
    let shape = x.shape();
    let ndim = shape.len();
    let d = wrap_dim(dim, ndim).ok_or(Error::Dim { op, dim, ndim })?;
    if let Some(o) = out {
        expect_dtype(op, o, x.dtype())?;
        check_memory(op, o, &shape, &[x], Aliasing::Exact)?;
    }
    let (outer, len, inner) = if ndim == 0 {
        (1, 1, 1)
    } else {
        (
            shape[..d].iter().product::<usize>(),
            shape[d],
            shape[d + 1..].iter().product::<usize>(),
        )
    };
    // A contiguous input (size-1 dims aside) is read in place; anything else is copied once.
    let src = x.contiguous()?;
    // The kernel writes a contiguous range that must not overlap its input: an `out` that is
    // not contiguous, or is the input itself, gets the result through a temporary.
    let target = match out {
        None => Tensor::uninit_with_layout(ctx, Layout::contiguous(&shape, 0), x.dtype())?,
        Some(o) => {
            o.resize_for_out(ctx, &shape)?;
            let l = o.layout();
            let apart = !o.shares_storage(&src) || overlap(&l, &src.layout()) == Overlap::No;
            if l.is_contiguous() && apart {
                o.clone()
            } else {
                Tensor::uninit_with_layout(ctx, Layout::contiguous(&shape, 0), x.dtype())?
            }
        }
    };
    if x.numel() > 0 {
        let (sb, ob) = (src.body(), target.body());
        let guards = lock_storages(&[(&*ob.storage, Access::Write), (&*sb.storage, Access::Read)]);
        let esize = x.dtype().size();
        let p = Ptrs {
            input: guards.read_ptr(&sb.storage) as usize + sb.layout.offset() * esize,
            output: guards.write_ptr(&ob.storage) as usize + ob.layout.offset() * esize,
        };
        let slab_len = len * inner;
        // SAFETY: `src` is contiguous from its offset and holds outer·len·inner elements, as
        // does `target` from its own offset; `target` is either fresh or an output that shares
        // no memory with `src` (checked above); both storages are locked (the output's for
        // writing) until `guards` drops.
        unsafe {
            match x.dtype() {
                DType::F32 => run_direct::<f32>(p, outer, slab_len, inner, log),
                DType::F64 => run_direct::<f64>(p, outer, slab_len, inner, log),
                DType::F16 => run_widened::<half::f16>(p, outer, slab_len, inner, log),
                DType::BF16 => run_widened::<half::bf16>(p, outer, slab_len, inner, log),
                _ => unreachable!("checked floating above"),
            }
        }
    }
    match out {
        None => Ok(target),
        Some(o) if target.is_same(o) => {
            o.bump_version();
            Ok(o.clone())
        }
        Some(o) => {
            // SAFETY: `execute` locks the storages and passes a plan valid for them; it counts
            // the copy as the op's one write.
            ElementwiseSpec::new(Output::Existing(o), vec![&target])
                .infer(op)?
                .execute(ctx, |plan| unsafe { kernels::copy(plan) })
        }
    }
}

impl Tensor {
    /// `exp(x) / sum(exp(x))` along `dim`, computed around the maximum so it never
    /// overflows; a new contiguous tensor (f16/bf16 computed in f32).
    ///
    /// ```
    /// use strata_core::{Tensor, DType};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 1000.0, 1000.0, 1000.0], &[2, 3])?;
    /// let p = x.softmax(-1)?.to_vec::<f32>()?;
    /// assert!((p[0..3].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    /// assert!((p[3] - 1.0 / 3.0).abs() < 1e-6);           // no overflow at 1000
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        let ctx = OpContext::enter("softmax");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            softmax_op(&ctx, self, dim, false, None)
        })?;
        crate::autograd::formulas::reduce::softmax(&ctx, false, self, dim, &out)?;
        Ok(out)
    }

    /// `log(softmax(x))` along `dim`, computed as `x - max - log(sum(exp(x - max)))`, which
    /// stays finite where `softmax` underflows to 0.
    #[track_caller]
    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        let ctx = OpContext::enter("log_softmax");
        let out = crate::autograd::mode::internal(|| -> Result<Tensor> {
            softmax_op(&ctx, self, dim, true, None)
        })?;
        crate::autograd::formulas::reduce::softmax(&ctx, true, self, dim, &out)?;
        Ok(out)
    }

    /// [`Tensor::softmax`] written into `out`, which must have `self`'s dtype. A contiguous
    /// `out` of `self`'s shape that does not share memory with `self` is written directly;
    /// a non-contiguous `out`, or `self` itself, receives the result through a temporary
    /// contiguous tensor (the kernel writes whole contiguous slices). A non-contiguous
    /// `self` is copied first, as for [`Tensor::softmax`]. Returns `out`, whose version goes
    /// up by one.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![0.0f32, 0.0], &[2])?;
    /// let out = Tensor::zeros(&[0], DType::F32)?;
    /// x.softmax_out(0, &out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![0.5, 0.5]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn softmax_out(&self, dim: i64, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("softmax_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        softmax_op(&ctx, self, dim, false, Some(out))
    }

    /// [`Tensor::log_softmax`] written into `out`, as [`Tensor::softmax_out`].
    #[track_caller]
    pub fn log_softmax_out(&self, dim: i64, out: &Tensor) -> Result<Tensor> {
        let ctx = OpContext::enter("log_softmax_out");
        refuse_out_with_grad(ctx.op(), &[self], out)?;
        softmax_op(&ctx, self, dim, true, Some(out))
    }
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

    fn reference(x: &[f64], outer: usize, len: usize, inner: usize, log: bool) -> Vec<f64> {
        let mut out = vec![0.0; x.len()];
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| o * len * inner + k * inner + i;
                let m = (0..len).map(|k| x[at(k)]).fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = (0..len).map(|k| (x[at(k)] - m).exp()).sum();
                for k in 0..len {
                    out[at(k)] = if log {
                        x[at(k)] - m - s.ln()
                    } else {
                        (x[at(k)] - m).exp() / s
                    };
                }
            }
        }
        out
    }

    #[test]
    fn matches_a_reference_along_every_dim_and_dtype() {
        let shape = [3usize, 37, 5];
        let n: usize = shape.iter().product();
        let data: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % 101) as f64 / 7.0 - 6.0)
            .collect();
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let x = Tensor::from_vec(data.clone(), &shape)
                .unwrap()
                .to(dtype)
                .unwrap();
            let exact: Vec<f64> = x.to(DType::F64).unwrap().to_vec().unwrap();
            let tol = match dtype {
                DType::F64 => 1e-12,
                DType::F32 => 1e-6,
                _ => 1e-2,
            };
            for d in 0..3 {
                let outer = shape[..d].iter().product();
                let inner = shape[d + 1..].iter().product();
                for log in [false, true] {
                    let y = if log {
                        x.log_softmax(d as i64)
                    } else {
                        x.softmax(d as i64)
                    };
                    let y = y.unwrap();
                    assert_eq!(y.dtype(), dtype);
                    assert!(y.is_contiguous());
                    let got: Vec<f64> = y.to(DType::F64).unwrap().to_vec().unwrap();
                    let want = reference(&exact, outer, shape[d], inner, log);
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (g - w).abs() <= tol * (1.0 + w.abs()),
                            "{dtype} dim {d} log {log}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn strided_input_large_rows_and_special_values() {
        let x = Tensor::randn(&[64, 1500], DType::F32).unwrap();
        let xt = x.t().unwrap(); // [1500, 64], strides [1, 1500]
        let a: Vec<f32> = xt.softmax(0).unwrap().to_vec().unwrap();
        let b: Vec<f32> = xt
            .contiguous()
            .unwrap()
            .softmax(0)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(a, b);
        let r = Tensor::from_vec(vec![f32::NEG_INFINITY, 0.0, f32::NAN, 1.0], &[2, 2]).unwrap();
        let y: Vec<f32> = r.softmax(1).unwrap().to_vec().unwrap();
        assert_eq!(&y[..2], &[0.0, 1.0]);
        assert!(y[2].is_nan() && y[3].is_nan());
        let e = Tensor::zeros(&[0, 3], DType::F32)
            .unwrap()
            .softmax(1)
            .unwrap();
        assert_eq!(e.shape(), vec![0, 3]);
        assert!(Tensor::arange(3, DType::I64).unwrap().softmax(0).is_err());
        assert!(x.softmax(2).is_err());
    }

    #[test]
    fn softmax_out_writes_its_output_and_follows_pytorch_dtypes() {
        use crate::ops::out::testing::{check_dtype_refused, check_out_form};
        let x = Tensor::arange(12, DType::F32)
            .unwrap()
            .mul(0.5)
            .unwrap()
            .view(&[3, 4])
            .unwrap();
        let xt = x.t().unwrap();
        for d in [0, 1] {
            check_out_form(&x.softmax(d).unwrap(), 0.0, |o| x.softmax_out(d, o));
            check_out_form(&x.log_softmax(d).unwrap(), 0.0, |o| x.log_softmax_out(d, o));
            // A strided input is made contiguous first, as for softmax().
            let out = Tensor::zeros(&[4, 3], DType::F32).unwrap();
            xt.log_softmax_out(d, &out).unwrap();
            assert_eq!(
                out.to_vec::<f32>().unwrap(),
                xt.log_softmax(d).unwrap().to_vec::<f32>().unwrap()
            );
        }
        check_dtype_refused(&[3, 4], DType::F64, |o| x.softmax_out(1, o));
        check_dtype_refused(&[3, 4], DType::F64, |o| x.log_softmax_out(1, o));
        // Into its own input (through a temporary), one write.
        let y = x.deep_clone().unwrap();
        y.softmax_out(1, &y).unwrap();
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            x.softmax(1).unwrap().to_vec::<f32>().unwrap()
        );
        assert_eq!(y.version(), 1);
        // Overlapping the input elsewhere is refused, untouched.
        let z = Tensor::arange(8, DType::F32).unwrap();
        let r = z
            .narrow(0, 0, 6)
            .unwrap()
            .softmax_out(0, &z.narrow(0, 2, 6).unwrap());
        assert!(matches!(r, Err(Error::Overlap { .. })));
        assert_eq!(z.version(), 0);
        // A contiguous output of the right shape with an offset is written in place.
        let big = Tensor::zeros(&[20], DType::F32).unwrap();
        let part = big.narrow(0, 4, 12).unwrap().view(&[3, 4]).unwrap();
        x.softmax_out(1, &part).unwrap();
        assert_eq!(
            part.to_vec::<f32>().unwrap(),
            x.softmax(1).unwrap().to_vec::<f32>().unwrap()
        );
        assert_eq!(big.to_vec::<f32>().unwrap()[..4], [0.0; 4]);
        assert_eq!(big.to_vec::<f32>().unwrap()[16..], [0.0; 4]);
    }
}
