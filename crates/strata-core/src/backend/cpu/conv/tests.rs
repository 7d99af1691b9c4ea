//! Every vector kernel this CPU runs against the plain loop, bit for bit: both sum each
//! output from its bias in the depth's order with fused multiply-adds.

use super::{plain, run, Problem};
use crate::backend::args::ConvSizes;

/// `(n, c, h, w, o, kh, kw, ph, pw)`.
pub(super) type Shape = (
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
);

/// Shapes with partial tiles in every direction: output rows shorter and longer than a
/// vector, a panel crossing samples, one output position, channels not a multiple of a
/// tile's rows, the cnn's two layers and the second's input gradient.
const SHAPES: [Shape; 8] = [
    (2, 1, 28, 28, 32, 3, 3, 1, 1),
    (3, 32, 14, 14, 64, 3, 3, 1, 1),
    (2, 64, 14, 14, 32, 3, 3, 1, 1),
    (3, 5, 7, 9, 13, 3, 2, 2, 1),
    (1, 3, 5, 40, 7, 5, 5, 0, 4),
    (4, 2, 3, 3, 3, 3, 3, 0, 0),
    (2, 6, 1, 37, 9, 1, 3, 0, 2),
    (5, 4, 6, 6, 17, 2, 2, 1, 0),
];

/// Deterministic values in about [-2, 2), some of them exact zeros.
pub(super) fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((s >> 40) as i32 - (1 << 23)) as f32 / (1 << 22) as f32;
            if s.is_multiple_of(11) {
                0.0
            } else {
                v
            }
        })
        .collect()
}

/// The shape's problem over the given buffers: a weight stored `[o, c, kh, kw]`, or
/// `[c, o, kh, kw]` read flipped (as an input gradient reads it).
fn problem(
    s: Shape,
    x: &[f32],
    weight: &[f32],
    flipped: bool,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Problem {
    let (n, c, h, w, o, kh, kw, ph, pw) = s;
    let ws = if flipped {
        [kh * kw, o * kh * kw, kw, 1]
    } else {
        [c * kh * kw, kh * kw, kw, 1]
    };
    let sizes = ConvSizes {
        n,
        c,
        h,
        w,
        o,
        kh,
        kw,
        ph,
        pw,
    };
    let (oh, ow) = sizes.out_plane();
    Problem {
        sizes,
        oh,
        ow,
        x: x.as_ptr(),
        weight: weight.as_ptr(),
        ws,
        flip: flipped,
        bias: bias.map_or(std::ptr::null(), |b| b.as_ptr()),
        bias_stride: 1,
        out: out.as_mut_ptr(),
    }
}

#[test]
fn vector_kernels_equal_the_plain_loop_bit_for_bit() {
    let kernels = super::forward::available();
    if kernels.is_empty() {
        eprintln!("this CPU has neither AVX-512F nor AVX2 with FMA: only the plain loop runs");
        return;
    }
    for (name, kernel) in kernels {
        eprintln!("direct convolution: the {name} kernel against the plain loop");
        for (index, &s) in SHAPES.iter().enumerate() {
            let (n, c, h, w, o, kh, kw, ph, pw) = s;
            let out_len = n * o * (h + 2 * ph + 1 - kh) * (w + 2 * pw + 1 - kw);
            let x = values(n * c * h * w, 1 + index as u64);
            let weight = values(o * c * kh * kw, 100 + index as u64);
            let bias = values(o, 200 + index as u64);
            for flipped in [false, true] {
                for with_bias in [false, true] {
                    let b = with_bias.then_some(&bias[..]);
                    let mut want = vec![f32::NAN; out_len];
                    let mut got = vec![f32::NAN; out_len];
                    // SAFETY: every buffer holds what the shape's problem addresses; `got`
                    // and `want` are written by their call alone.
                    unsafe {
                        plain(&problem(s, &x, &weight, flipped, b, &mut want));
                        run(&problem(s, &x, &weight, flipped, b, &mut got), kernel);
                    }
                    for (e, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            g.to_bits(),
                            w.to_bits(),
                            "{name}, shape {s:?}, flipped {flipped}, bias {with_bias}: \
                             element {e} is {g}, the plain loop gives {w}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_plain_loop_convolves() {
    // A 1-channel 3×3 image, a 2×2 kernel of ones, padding 1 on the columns: each output is
    // the sum of the window's values inside the image, plus the bias.
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let weight = [1.0f32; 4];
    let bias = [0.5f32];
    let s = (1, 1, 3, 3, 1, 2, 2, 0, 1);
    let mut out = vec![0.0; 2 * 4];
    // SAFETY: the buffers hold what the problem addresses.
    unsafe { plain(&problem(s, &x, &weight, false, Some(&bias), &mut out)) };
    assert_eq!(
        out,
        [5.5, 12.5, 16.5, 9.5, 11.5, 24.5, 28.5, 15.5],
        "rows 0-1 and 1-2 of [[1,2,3],[4,5,6],[7,8,9]] padded by a zero column each side"
    );
}
