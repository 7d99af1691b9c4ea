//! Kernels over the runs of a [`Plan`]: map, fill and copy, with blockwise dtype conversion.
//!
//! A run whose operands already have the compute type and unit stride is processed in place
//! through raw pointers (no slices are formed, so an output that is also an input is fine);
//! otherwise up to [`BLOCK`] elements at a time are converted into a stack buffer of the
//! compute type, computed, and converted back out.

use std::mem::{size_of, MaybeUninit};

use super::convert::convert;
use super::{chunk, Plan};
use crate::dtype::{cast, dispatch, DType, DTypeFn, Element};

/// Elements converted per block on the slow path.
pub const BLOCK: usize = 256;

struct Load<'a, T> {
    src: *const u8,
    stride: isize,
    dst: &'a mut [MaybeUninit<T>],
}

impl<T: Element> DTypeFn for Load<'_, T> {
    type Output = ();
    fn call<S: Element>(self) {
        if S::DTYPE == T::DTYPE && self.stride == size_of::<S>() as isize {
            // SAFETY: same type, contiguous: a plain copy of `dst.len()` elements that lie
            // inside the locked storage (caller's contract) into our own buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.src as *const T,
                    self.dst.as_mut_ptr() as *mut T,
                    self.dst.len(),
                )
            };
            return;
        }
        let (n, dst) = (self.dst.len(), self.dst.as_mut_ptr() as *mut u8);
        let size = size_of::<T>() as isize;
        // SAFETY: as below; `dst` is our own buffer of `n` elements of `T`.
        if unsafe { convert(self.src, self.stride, S::DTYPE, dst, size, T::DTYPE, n) } {
            return;
        }
        for (i, d) in self.dst.iter_mut().enumerate() {
            // SAFETY: `load` callers pass a run start and stride inside a locked storage, and
            // `dst.len()` elements of dtype S at that stride lie within it.
            let v =
                unsafe { std::ptr::read(self.src.offset(i as isize * self.stride) as *const S) };
            d.write(cast::<S, T>(v));
        }
    }
}

struct Store<'a, T> {
    src: &'a [T],
    dst: *mut u8,
    stride: isize,
}

impl<T: Element> DTypeFn for Store<'_, T> {
    type Output = ();
    fn call<D: Element>(self) {
        let (n, src) = (self.src.len(), self.src.as_ptr() as *const u8);
        let size = size_of::<T>() as isize;
        // SAFETY: as below; `src` is our own buffer of `n` elements of `T`.
        if unsafe { convert(src, size, T::DTYPE, self.dst, self.stride, D::DTYPE, n) } {
            return;
        }
        for (i, &v) in self.src.iter().enumerate() {
            // SAFETY: as for Load, for a written operand whose storage is write-locked.
            unsafe {
                std::ptr::write(
                    self.dst.offset(i as isize * self.stride) as *mut D,
                    cast::<T, D>(v),
                )
            };
        }
    }
}

/// Reads `dst.len()` elements of `dtype` starting at `src`, `stride` bytes apart, as `T`.
///
/// # Safety
/// The elements must be readable (inside a storage the caller holds locked).
unsafe fn load<T: Element>(
    src: *const u8,
    stride: isize,
    dtype: DType,
    dst: &mut [MaybeUninit<T>],
) {
    dispatch(dtype, Load { src, stride, dst });
}

/// Writes `src` as elements of `dtype` starting at `dst`, `stride` bytes apart.
///
/// # Safety
/// The elements must be writable (inside a storage the caller holds write-locked).
pub(crate) unsafe fn store<T: Element>(src: &[T], dst: *mut u8, stride: isize, dtype: DType) {
    dispatch(dtype, Store { src, dst, stride });
}

/// Whether operand `operand` of a run with byte stride `stride` can be used in place as `T`.
pub(crate) fn direct<T: Element>(plan: &Plan, operand: usize, stride: isize) -> bool {
    plan.dtype(operand) == T::DTYPE && stride == size_of::<T>() as isize
}

/// Input `k` of a run as a pointer to `m` elements of `I` starting at element `start`: the
/// operand itself when it already is contiguous `I`, else a converted copy in `buf`.
///
/// # Safety
/// The run must be readable for operand `k`.
#[inline(always)]
pub(crate) unsafe fn input_block<I: Element>(
    plan: &Plan,
    k: usize,
    ptr: *mut u8,
    stride: isize,
    start: usize,
    m: usize,
    buf: &mut Buffer<I>,
) -> *const I {
    let at = ptr.wrapping_offset(start as isize * stride);
    if direct::<I>(plan, k, stride) {
        at as *const I
    } else {
        // SAFETY: forwarded from the caller; `load` initialises the first `m` elements,
        // which are all the kernel reads.
        unsafe { load(at, stride, plan.dtype(k), &mut buf[..m]) };
        buf.as_ptr() as *const I
    }
}

/// Scratch space for one block of converted elements, left uninitialised until written.
pub(crate) type Buffer<T> = [MaybeUninit<T>; BLOCK];

/// A fresh scratch buffer (no initialisation cost).
#[inline(always)]
pub(crate) fn buffer<T>() -> Buffer<T> {
    [const { MaybeUninit::uninit() }; BLOCK]
}

/// Runs at most this many elements long take [`short_run`]'s direct loop.
const SHORT: usize = 16;

/// The operands' addresses when `plan` is one run of at most [`SHORT`] elements whose
/// operands are contiguous and already of the types the kernel reads and writes (`out`, then
/// `input` for each input): a one-element `a + b` then costs a loop of one step instead of
/// the walk over runs, the block staging and the SIMD chunking built for long loops. The
/// element function is the same, so results are the same.
#[inline(always)]
fn short_run<O: Element, I: Element>(plan: &Plan) -> Option<(&[*mut u8], usize)> {
    if !plan.linear {
        return None;
    }
    let n = plan.shape[0];
    let (&out, inputs) = plan.dtypes.split_first()?;
    if n > SHORT || out != O::DTYPE {
        return None;
    }
    for &d in inputs {
        if d != I::DTYPE {
            return None;
        }
    }
    Some((&plan.ptrs[..], n))
}

/// `out = f(a)` element-wise. Operand 0 is the output, operand 1 the input; `a` is read as
/// `I` and `f`'s result written as the output's dtype.
///
/// # Safety
/// The plan's operands must be valid for the loop (storages locked, output write-locked).
pub unsafe fn map1<I: Element, O: Element>(plan: &Plan, f: impl Fn(I) -> O + Sync) {
    if let Some((p, n)) = short_run::<O, I>(plan) {
        let (o, a) = (p[0] as *mut O, p[1] as *const I);
        if n == 1 {
            // One element (a number's arithmetic) without the loop's set-up for a vector
            // body. SAFETY: as below.
            unsafe { o.write(f(a.read())) };
            return;
        }
        for i in 0..n {
            // SAFETY: `n` contiguous elements of each operand lie in its locked storage (the
            // caller's contract); an output that is also the input is read before written.
            unsafe { o.add(i).write(f(a.add(i).read())) };
        }
        return;
    }
    plan.for_each_run(|p, s, n| {
        let mut abuf = buffer::<I>();
        let mut obuf = buffer::<O>();
        let out_direct = direct::<O>(plan, 0, s[0]);
        let stream = out_direct && plan.streams_output();
        for start in (0..n).step_by(BLOCK) {
            let m = BLOCK.min(n - start);
            // SAFETY: the caller guarantees the run is valid for every operand.
            unsafe {
                let a = input_block(plan, 1, p[1], s[1], start, m, &mut abuf);
                let o_at = p[0].wrapping_offset(start as isize * s[0]);
                let o = if out_direct {
                    o_at as *mut O
                } else {
                    obuf.as_mut_ptr() as *mut O
                };
                chunk::apply1(o, a, m, &f, stream);
                if !out_direct {
                    // SAFETY: the loop above initialised the first `m` elements.
                    let done = std::slice::from_raw_parts(obuf.as_ptr() as *const O, m);
                    store(done, o_at, s[0], plan.dtype(0));
                }
            }
        }
        if stream {
            chunk::stream_fence();
        }
    });
}

/// `out = f(a, b)` element-wise; operands are (out, a, b).
///
/// # Safety
/// As for [`map1`].
pub unsafe fn map2<I: Element, O: Element>(plan: &Plan, f: impl Fn(I, I) -> O + Sync) {
    if let Some((p, n)) = short_run::<O, I>(plan) {
        let (o, a, b) = (p[0] as *mut O, p[1] as *const I, p[2] as *const I);
        if n == 1 {
            // One element (a number's arithmetic) without the loop's set-up for a vector
            // body. SAFETY: as in `map1`.
            unsafe { o.write(f(a.read(), b.read())) };
            return;
        }
        for i in 0..n {
            // SAFETY: as in `map1`.
            unsafe { o.add(i).write(f(a.add(i).read(), b.add(i).read())) };
        }
        return;
    }
    plan.for_each_run(|p, s, n| {
        let mut abuf = buffer::<I>();
        let mut bbuf = buffer::<I>();
        let mut obuf = buffer::<O>();
        let out_direct = direct::<O>(plan, 0, s[0]);
        let stream = out_direct && plan.streams_output();
        for start in (0..n).step_by(BLOCK) {
            let m = BLOCK.min(n - start);
            // SAFETY: the caller guarantees the run is valid for every operand.
            unsafe {
                let a = input_block(plan, 1, p[1], s[1], start, m, &mut abuf);
                let b = input_block(plan, 2, p[2], s[2], start, m, &mut bbuf);
                let o_at = p[0].wrapping_offset(start as isize * s[0]);
                let o = if out_direct {
                    o_at as *mut O
                } else {
                    obuf.as_mut_ptr() as *mut O
                };
                chunk::apply2(o, a, b, m, &f, stream);
                if !out_direct {
                    // SAFETY: the loop above initialised the first `m` elements.
                    let done = std::slice::from_raw_parts(obuf.as_ptr() as *const O, m);
                    store(done, o_at, s[0], plan.dtype(0));
                }
            }
        }
        if stream {
            chunk::stream_fence();
        }
    });
}

/// `out = f(a, b, c)` element-wise; operands are (out, a, b, c), all read as `I`.
///
/// # Safety
/// As for [`map1`].
pub unsafe fn map3<I: Element, O: Element>(plan: &Plan, f: impl Fn(I, I, I) -> O + Sync) {
    if let Some((p, n)) = short_run::<O, I>(plan) {
        let (o, a) = (p[0] as *mut O, p[1] as *const I);
        let (b, c) = (p[2] as *const I, p[3] as *const I);
        if n == 1 {
            // SAFETY: as in `map1`.
            unsafe { o.write(f(a.read(), b.read(), c.read())) };
            return;
        }
        for i in 0..n {
            // SAFETY: as in `map1`.
            unsafe {
                o.add(i)
                    .write(f(a.add(i).read(), b.add(i).read(), c.add(i).read()))
            };
        }
        return;
    }
    plan.for_each_run(|p, s, n| {
        let mut abuf = buffer::<I>();
        let mut bbuf = buffer::<I>();
        let mut cbuf = buffer::<I>();
        let mut obuf = buffer::<O>();
        let out_direct = direct::<O>(plan, 0, s[0]);
        let stream = out_direct && plan.streams_output();
        for start in (0..n).step_by(BLOCK) {
            let m = BLOCK.min(n - start);
            // SAFETY: the caller guarantees the run is valid for every operand.
            unsafe {
                let a = input_block(plan, 1, p[1], s[1], start, m, &mut abuf);
                let b = input_block(plan, 2, p[2], s[2], start, m, &mut bbuf);
                let c = input_block(plan, 3, p[3], s[3], start, m, &mut cbuf);
                let o_at = p[0].wrapping_offset(start as isize * s[0]);
                let o = if out_direct {
                    o_at as *mut O
                } else {
                    obuf.as_mut_ptr() as *mut O
                };
                chunk::apply3(o, a, b, c, m, &f, stream);
                if !out_direct {
                    // SAFETY: the loop above initialised the first `m` elements.
                    let done = std::slice::from_raw_parts(obuf.as_ptr() as *const O, m);
                    store(done, o_at, s[0], plan.dtype(0));
                }
            }
        }
        if stream {
            chunk::stream_fence();
        }
    });
}

/// Writes `value` to every element of operand 0.
///
/// # Safety
/// As for [`map1`].
pub unsafe fn fill<T: Element>(plan: &Plan, value: T) {
    plan.for_each_run(|p, s, n| {
        let out_direct = direct::<T>(plan, 0, s[0]);
        if out_direct {
            let o = p[0] as *mut T;
            for i in 0..n {
                // SAFETY: the caller guarantees the run is valid and write-locked.
                unsafe { *o.add(i) = value };
            }
        } else {
            let buf = [value; BLOCK];
            for start in (0..n).step_by(BLOCK) {
                let m = BLOCK.min(n - start);
                let at = p[0].wrapping_offset(start as isize * s[0]);
                // SAFETY: as above.
                unsafe { store(&buf[..m], at, s[0], plan.dtype(0)) };
            }
        }
    });
}

/// Copies operand 1 into operand 0, converting from the source's dtype to the destination's.
///
/// # Safety
/// As for [`map1`].
pub unsafe fn copy(plan: &Plan) {
    struct Copy<'a>(&'a Plan);
    impl DTypeFn for Copy<'_> {
        type Output = ();
        fn call<T: Element>(self) {
            // SAFETY: forwarded from `copy`'s caller.
            unsafe { map1::<T, T>(self.0, |v| v) }
        }
    }
    // SAFETY: forwarded from the caller.
    if unsafe { plan.copy_tiles() } {
        return;
    }
    dispatch(plan.dtype(0), Copy(plan));
}
