//! Moving a rectangular tile of elements between two strided places: how the tiled walk
//! stages an operand that is transposed against the loop order in a dense buffer (and
//! back). Element `(i, j)` of a tile lives at `base + i·s0 + j·s1` bytes on either side.
//!
//! A tile that is contiguous along `j` on one side and along `i` on the other is a
//! transpose: it moves in 8×8 register blocks (AVX2 for 4-byte elements when the CPU has
//! it), so each side is read or written in whole vectors. Anything else is copied element
//! by element with the inner loop along whichever side is contiguous.

/// Copies the `ti × tj` tile whose element `(i, j)` is at `src + i·ss.0 + j·ss.1` bytes to
/// `dst + i·ds.0 + j·ds.1`, for elements of `esize` (1, 2, 4 or 8) bytes.
///
/// # Safety
/// Every source element must be readable and every destination element writable for the
/// duration of the call, aligned for an integer of `esize` bytes, and the two tiles must not
/// overlap.
pub(super) unsafe fn copy(
    src: *const u8,
    ss: (isize, isize),
    dst: *mut u8,
    ds: (isize, isize),
    (ti, tj): (usize, usize),
    esize: usize,
) {
    let e = esize as isize;
    // SAFETY: (all arms) forwarded from the caller; the element type matches `esize`.
    unsafe {
        match esize {
            1 => copy_as::<u8>(src, ss, dst, ds, ti, tj),
            2 => copy_as::<u16>(src, ss, dst, ds, ti, tj),
            4 => {
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx2") {
                    if ss.1 == e && ds.0 == e {
                        return transpose32_avx2(src, ss.0, dst, ds.1, ti, tj);
                    }
                    if ss.0 == e && ds.1 == e {
                        return transpose32_avx2(src, ss.1, dst, ds.0, tj, ti);
                    }
                }
                copy_as::<u32>(src, ss, dst, ds, ti, tj)
            }
            8 => copy_as::<u64>(src, ss, dst, ds, ti, tj),
            _ => unreachable!("elements are 1, 2, 4 or 8 bytes"),
        }
    }
}

/// [`copy`] for elements of type `T`, in 8×8 blocks so that a transpose touches each cache
/// line of either side once per block row.
///
/// # Safety
/// As [`copy`], with `T` of `esize` bytes.
unsafe fn copy_as<T: Copy>(
    src: *const u8,
    ss: (isize, isize),
    dst: *mut u8,
    ds: (isize, isize),
    ti: usize,
    tj: usize,
) {
    const B: usize = 8;
    let at = |p: *const u8, s: (isize, isize), i: usize, j: usize| {
        p.wrapping_offset(i as isize * s.0 + j as isize * s.1)
    };
    for i0 in (0..ti).step_by(B) {
        let bi = B.min(ti - i0);
        for j0 in (0..tj).step_by(B) {
            let bj = B.min(tj - j0);
            // Inner loop along j when the destination is contiguous along j, else along i.
            if ds.1.unsigned_abs() <= ds.0.unsigned_abs() {
                for i in i0..i0 + bi {
                    for j in j0..j0 + bj {
                        // SAFETY: (i, j) is inside the tile on both sides (caller).
                        unsafe {
                            let v = (at(src, ss, i, j) as *const T).read();
                            (at(dst, ds, i, j) as *mut T).write(v);
                        }
                    }
                }
            } else {
                for j in j0..j0 + bj {
                    for i in i0..i0 + bi {
                        // SAFETY: as above.
                        unsafe {
                            let v = (at(src, ss, i, j) as *const T).read();
                            (at(dst, ds, i, j) as *mut T).write(v);
                        }
                    }
                }
            }
        }
    }
}

/// Transposes `rows × cols` 4-byte elements: `dst[c·dp + r] = src[r·sp + c]` with the
/// pitches `sp`, `dp` in bytes and each row contiguous.
///
/// # Safety
/// As [`copy`] for that tile, and the CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose32_avx2(
    src: *const u8,
    sp: isize,
    dst: *mut u8,
    dp: isize,
    rows: usize,
    cols: usize,
) {
    use std::arch::x86_64::*;
    let (r8, c8) = (rows / 8 * 8, cols / 8 * 8);
    for r0 in (0..r8).step_by(8) {
        for c0 in (0..c8).step_by(8) {
            let s = src.wrapping_offset(r0 as isize * sp + c0 as isize * 4) as *const f32;
            let d = dst.wrapping_offset(c0 as isize * dp + r0 as isize * 4) as *mut f32;
            let row = |k: isize| s.wrapping_byte_offset(k * sp);
            let col = |k: isize| d.wrapping_byte_offset(k * dp);
            // SAFETY: the 8×8 block lies inside both tiles (r0 + 8 ≤ rows, c0 + 8 ≤ cols),
            // unaligned loads and stores; the shuffles only move bits.
            unsafe {
                let (a0, a1) = (_mm256_loadu_ps(row(0)), _mm256_loadu_ps(row(1)));
                let (a2, a3) = (_mm256_loadu_ps(row(2)), _mm256_loadu_ps(row(3)));
                let (a4, a5) = (_mm256_loadu_ps(row(4)), _mm256_loadu_ps(row(5)));
                let (a6, a7) = (_mm256_loadu_ps(row(6)), _mm256_loadu_ps(row(7)));
                let t0 = _mm256_unpacklo_ps(a0, a1);
                let t1 = _mm256_unpackhi_ps(a0, a1);
                let t2 = _mm256_unpacklo_ps(a2, a3);
                let t3 = _mm256_unpackhi_ps(a2, a3);
                let t4 = _mm256_unpacklo_ps(a4, a5);
                let t5 = _mm256_unpackhi_ps(a4, a5);
                let t6 = _mm256_unpacklo_ps(a6, a7);
                let t7 = _mm256_unpackhi_ps(a6, a7);
                let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
                let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
                let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
                let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
                let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
                let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
                let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
                let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
                _mm256_storeu_ps(col(0), _mm256_permute2f128_ps::<0x20>(u0, u4));
                _mm256_storeu_ps(col(1), _mm256_permute2f128_ps::<0x20>(u1, u5));
                _mm256_storeu_ps(col(2), _mm256_permute2f128_ps::<0x20>(u2, u6));
                _mm256_storeu_ps(col(3), _mm256_permute2f128_ps::<0x20>(u3, u7));
                _mm256_storeu_ps(col(4), _mm256_permute2f128_ps::<0x31>(u0, u4));
                _mm256_storeu_ps(col(5), _mm256_permute2f128_ps::<0x31>(u1, u5));
                _mm256_storeu_ps(col(6), _mm256_permute2f128_ps::<0x31>(u2, u6));
                _mm256_storeu_ps(col(7), _mm256_permute2f128_ps::<0x31>(u3, u7));
            }
        }
    }
    // The ragged edges: the last rows (all columns) and the last columns (full rows).
    let (e, s, d) = (4isize, (sp, 4isize), (4isize, dp));
    // SAFETY: the remaining elements lie inside both tiles.
    unsafe {
        if r8 < rows {
            copy_as::<u32>(
                src.wrapping_offset(r8 as isize * sp),
                s,
                dst.wrapping_offset(r8 as isize * e),
                d,
                rows - r8,
                cols,
            );
        }
        if c8 < cols {
            copy_as::<u32>(
                src.wrapping_offset(c8 as isize * e),
                s,
                dst.wrapping_offset(c8 as isize * dp),
                d,
                r8,
                cols - c8,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies a tile of `esize`-byte elements between two strided views of byte buffers and
    /// checks every element against a reference.
    fn check(esize: usize, ti: usize, tj: usize, src_rowmajor: bool, dst_rowmajor: bool) {
        // Pad the pitches so that the tiles are strided, not merely dense.
        let (sp, dp) = (tj + 3, ti + 5);
        let ss = if src_rowmajor {
            ((sp * esize) as isize, esize as isize)
        } else {
            (esize as isize, ((ti + 3) * esize) as isize)
        };
        let ds = if dst_rowmajor {
            (((tj + 5) * esize) as isize, esize as isize)
        } else {
            (esize as isize, (dp * esize) as isize)
        };
        let span = |s: (isize, isize)| (ti as isize * s.0 + tj as isize * s.1) as usize + 64;
        let mut src = vec![0u64; span(ss) / 8 + 1];
        let mut dst = vec![0u64; span(ds) / 8 + 1];
        let sb = src.as_mut_ptr() as *mut u8;
        for i in 0..ti {
            for j in 0..tj {
                let v = (i * 1000 + j + 1) as u64;
                let p = sb.wrapping_offset(i as isize * ss.0 + j as isize * ss.1);
                // SAFETY: inside `src` (span covers the tile), aligned for esize.
                unsafe { std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), p, esize) };
            }
        }
        let db = dst.as_mut_ptr() as *mut u8;
        // SAFETY: both tiles lie in their buffers, which are distinct and 8-byte aligned.
        unsafe { copy(sb, ss, db, ds, (ti, tj), esize) };
        for i in 0..ti {
            for j in 0..tj {
                let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
                // SAFETY: inside the buffers as above.
                unsafe {
                    let p = sb.wrapping_offset(i as isize * ss.0 + j as isize * ss.1);
                    let q = db.wrapping_offset(i as isize * ds.0 + j as isize * ds.1);
                    std::ptr::copy_nonoverlapping(p, a.as_mut_ptr(), esize);
                    std::ptr::copy_nonoverlapping(q, b.as_mut_ptr(), esize);
                }
                assert_eq!(a, b, "esize {esize} tile {ti}x{tj} at ({i}, {j})");
            }
        }
    }

    #[test]
    fn copies_every_element_in_every_orientation() {
        for esize in [1, 2, 4, 8] {
            for (ti, tj) in [
                (1, 1),
                (8, 8),
                (16, 24),
                (13, 7),
                (9, 17),
                (64, 64),
                (3, 40),
            ] {
                for (a, b) in [(true, false), (false, true), (true, true), (false, false)] {
                    check(esize, ti, tj, a, b);
                }
            }
        }
    }
}
