//! The innermost loop of the map kernels: `out[i] = f(a[i], …)` over one contiguous block,
//! in register-sized chunks, compiled for the widest vector instructions the CPU has.
//!
//! An output that no input is (a fresh output) is written straight by one counted loop.
//! Otherwise each chunk of [`CHUNK`] elements is computed by the same loop into a local
//! buffer and then written out whole. The buffer cannot alias the inputs, so an output that
//! *is* one of the inputs (an in-place op) vectorises like any other; a loop writing
//! through the output would fall back to scalar code there, since the compiler cannot prove
//! the overlap harmless. Both destinations share the loop, so that the element function
//! has one call site there and is inlined however large it is.
//!
//! On x86_64 the same generic loop is also compiled with AVX2 and FMA enabled and chosen at
//! run time when the CPU has them. Enabling FMA lets explicit `mul_add` calls use the
//! instruction; it never fuses a separate multiply and add, so results are identical on
//! either path.
//!
//! With `stream`, chunks are written with non-temporal stores where the output is aligned:
//! a fresh output far larger than the cache is then written without first being read in
//! (no read-for-ownership), which saves a quarter of the memory traffic of a binary op.

use std::mem::{size_of, MaybeUninit};
use std::ptr;

/// Elements per chunk: four 64-byte cache lines of f32.
pub(crate) const CHUNK: usize = 64;

/// Whether code built with AVX2 and FMA enabled can run on this CPU (checked once, cached
/// by the standard library).
#[inline(always)]
pub(crate) fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Writes one chunk from `chunk` to `dst`: with non-temporal stores when `stream` and `dst` is 32-byte
/// aligned and the chunk is a whole number of 32-byte pieces, else with a plain store.
///
/// # Safety
/// `dst` must be valid for writing and `chunk` for reading `CHUNK` elements of `O`, and the
/// two must not overlap.
#[inline(always)]
unsafe fn store_chunk<O: Copy>(dst: *mut O, chunk: *const O, stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if stream && (size_of::<O>() * CHUNK).is_multiple_of(32) && (dst as usize).is_multiple_of(32) {
        use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};
        let src = chunk as *const __m256i;
        let dst = dst as *mut __m256i;
        for k in 0..(size_of::<O>() * CHUNK) / 32 {
            // SAFETY: the chunk holds `size_of::<O>() * CHUNK` bytes, a multiple of 32, and
            // `dst` is 32-byte aligned and writable for as many (caller's contract). AVX is
            // implied: `stream` is only passed on the AVX2 path.
            unsafe { _mm256_stream_si256(dst.add(k), _mm256_loadu_si256(src.add(k))) };
        }
        return;
    }
    let _ = stream;
    #[cfg(target_arch = "x86_64")]
    if (size_of::<O>() * CHUNK).is_multiple_of(16) {
        // 16-byte moves the compiler keeps inline (and widens where AVX is enabled): a
        // `copy_nonoverlapping` of a whole chunk becomes a call to the C library's `memcpy`,
        // which costs more than computing the chunk.
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        let (src, dst) = (chunk as *const __m128i, dst as *mut __m128i);
        for k in 0..(size_of::<O>() * CHUNK) / 16 {
            // SAFETY: the chunk holds `size_of::<O>() * CHUNK` bytes, a multiple of 16, and
            // `dst` is writable for as many (caller's contract); SSE2 is part of x86_64.
            unsafe { _mm_storeu_si128(dst.add(k), _mm_loadu_si128(src.add(k))) };
        }
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { ptr::copy_nonoverlapping(chunk, dst, CHUNK) };
}

/// Orders this thread's non-temporal stores before whatever it does next (joining the pool,
/// handing the output to the caller).
#[inline(always)]
pub(crate) fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` is part of SSE, which every x86_64 CPU has.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Defines `$name(out, inputs…, m, f, stream)`: the chunked loop (`$body`), its AVX2 build
/// (`$avx`) and the run-time choice between them.
macro_rules! chunked {
    ($name:ident, $body:ident, $avx:ident, ($($x:ident),+), [$($fty:tt)+]) => {
        /// `out[i] = f(inputs[i]…)` for `i < m`, written in chunks (see the module docs).
        ///
        /// # Safety
        /// `out` must be writable and every input readable for `m` elements; an input may be
        /// the output itself but must not otherwise overlap it.
        #[inline(always)]
        pub(crate) unsafe fn $name<I: Copy, O: Copy>(
            out: *mut O,
            $($x: *const I,)+
            m: usize,
            f: &impl $($fty)+,
            stream: bool,
        ) {
            #[cfg(target_arch = "x86_64")]
            if avx2() {
                // SAFETY: the CPU has AVX2 and FMA; the rest is the caller's contract.
                return unsafe { $avx(out, $($x,)+ m, f, stream) };
            }
            // SAFETY: the caller's contract. Streaming stores need AVX, so none here.
            unsafe { $body(out, $($x,)+ m, f, false) }
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx<I: Copy, O: Copy, F: $($fty)+>(
            out: *mut O,
            $($x: *const I,)+
            m: usize,
            f: &F,
            stream: bool,
        ) {
            // SAFETY: forwarded.
            unsafe { $body(out, $($x,)+ m, f, stream) }
        }

        #[inline(always)]
        unsafe fn $body<I: Copy, O: Copy, F: $($fty)+>(
            out: *mut O,
            $($x: *const I,)+
            m: usize,
            f: &F,
            stream: bool,
        ) {
            // No input is the output, so (the caller's contract) none overlaps it: the loop
            // then writes the output straight, in one piece.
            let direct = !stream && true $(&& $x as usize != out as usize)+;
            let mut i = 0;
            if stream {
                // Single elements up to the first 64-byte boundary, so chunks align.
                while i < m && (out.wrapping_add(i) as usize) % 64 != 0 {
                    // SAFETY: `i < m`, and the caller vouched for `m` elements behind every pointer.
                    unsafe { *out.add(i) = f($(*$x.add(i)),+) };
                    i += 1;
                }
            }
            while i < m {
                let n = if direct { m - i } else { CHUNK.min(m - i) };
                let mut buf = [const { MaybeUninit::<O>::uninit() }; CHUNK];
                let dst: *mut O = if direct {
                    out.wrapping_add(i)
                } else {
                    buf.as_mut_ptr().cast()
                };
                // A plain counted loop, the element function's only call site in the loop
                // (so it is inlined however large): the compiler vectorises it, checking at
                // run time that `dst` is apart from the inputs, which it is (the output
                // with no input in it, or the local buffer).
                for j in 0..n {
                    // SAFETY: i + j < i + n ≤ m; `dst` holds `n` writable elements.
                    unsafe { dst.add(j).write(f($(*$x.add(i + j)),+)) };
                }
                if direct {
                    return;
                }
                // SAFETY: the first `n` slots were written above, and `out` is writable
                // from `i` for `n ≤ m - i` elements; an input that is the output itself was
                // read in full (for this chunk) before this write.
                unsafe {
                    if n == CHUNK {
                        store_chunk(out.add(i), buf.as_ptr() as *const O, stream);
                    } else {
                        for (j, v) in buf.iter().enumerate().take(n) {
                            *out.add(i + j) = v.assume_init();
                        }
                    }
                }
                i += n;
            }
        }
    };
}

chunked!(apply1, apply1_body, apply1_avx2, (a), [Fn(I) -> O]);
chunked!(apply2, apply2_body, apply2_avx2, (a, b), [Fn(I, I) -> O]);
chunked!(
    apply3,
    apply3_body,
    apply3_avx2,
    (a, b, c),
    [Fn(I, I, I) -> O]
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_loops_match_a_scalar_loop_for_every_length_and_alignment() {
        let a: Vec<f32> = (0..100).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..100).map(|i| 3.0 - i as f32).collect();
        for stream in [false, true] {
            for start in 0..3 {
                for m in 0..(100 - start) {
                    let mut out = vec![0f32; 100];
                    // SAFETY: every pointer covers `m` elements from `start`.
                    unsafe {
                        apply2(
                            out.as_mut_ptr().add(start),
                            a.as_ptr().add(start),
                            b.as_ptr().add(start),
                            m,
                            &|x: f32, y: f32| x * y + 1.0,
                            stream,
                        )
                    };
                    stream_fence();
                    for i in 0..100 {
                        let want = if i >= start && i < start + m {
                            a[i] * b[i] + 1.0
                        } else {
                            0.0
                        };
                        assert_eq!(out[i], want, "m={m} start={start} i={i} stream={stream}");
                    }
                }
            }
        }
    }

    #[test]
    fn an_output_that_is_an_input_is_computed_element_by_element() {
        let mut x: Vec<f64> = (0..37).map(f64::from).collect();
        let y: Vec<f64> = (0..37).map(|i| f64::from(i) * 2.0).collect();
        let p = x.as_mut_ptr();
        // SAFETY: `x` is both the output and the first input, element for element.
        unsafe { apply2(p, p as *const f64, y.as_ptr(), 37, &|u, v| u + v, false) };
        let want: Vec<f64> = (0..37).map(|i| f64::from(i) * 3.0).collect();
        assert_eq!(x, want);
        // The output as the second input.
        // SAFETY: `x` is both the output and the second input, element for element.
        unsafe { apply2(p, y.as_ptr(), p as *const f64, 37, &|u, v| u - v, false) };
        let want: Vec<f64> = (0..37).map(|i| -f64::from(i)).collect();
        assert_eq!(x, want);
    }

    #[test]
    fn three_inputs_and_a_narrower_output() {
        let a = [
            1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
        ];
        let mut out = [false; 18];
        // SAFETY: all arrays hold 18 elements.
        unsafe {
            apply3(
                out.as_mut_ptr(),
                a.as_ptr(),
                a.as_ptr(),
                a.as_ptr(),
                18,
                &|x: u8, y: u8, z: u8| (x + y + z).is_multiple_of(2),
                false,
            )
        };
        assert!(out
            .iter()
            .enumerate()
            .all(|(i, &v)| v == ((3 * (i + 1)) % 2 == 0)));
    }
}
