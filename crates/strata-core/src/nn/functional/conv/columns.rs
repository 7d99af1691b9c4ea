//! Column matrices for a slice of the batch, built and added back in one pass by the
//! backend's column kernels where it has them. Otherwise (the composed default) each kernel
//! offset `(i, j)` copies the input positions it reads (a strided window of the input) into
//! its rows, and the gradient adds them back. Nothing is padded: positions that fall in the
//! padding stay zero in the columns and are skipped on the way back.

use super::geometry::Geometry;
use crate::backend::kernel::ConvWindows;
use crate::ops::columns::{col2im_add, im2col};
use crate::{Result, Tensor};

/// The windows of `g` for the column kernels.
fn conv_windows(g: &Geometry) -> ConvWindows {
    ConvWindows {
        h: g.h,
        w: g.w,
        oh: g.oh,
        ow: g.ow,
        kh: g.kernel.0,
        kw: g.kernel.1,
        sh: g.stride.0,
        sw: g.stride.1,
        ph: g.padding.0,
        pw: g.padding.1,
        dh: g.dilation.0,
        dw: g.dilation.1,
    }
}

/// Each kernel offset's pair of matching windows: the input positions (a strided view of
/// `x`, `[b, C, ny, nx]`) and the output positions of `cols` (`[b, C, kh, kw, OH, OW]`) at
/// offset `(i, j)`.
fn windows(
    x: &Tensor,
    cols: &Tensor,
    g: &Geometry,
    mut each: impl FnMut(Tensor, Tensor) -> Result<()>,
) -> Result<()> {
    let win = conv_windows(g);
    for i in 0..g.kernel.0 {
        let Some((oy, ny, iy)) = win.rows(i) else {
            continue;
        };
        for j in 0..g.kernel.1 {
            let Some((ox, nx, ix)) = win.cols(j) else {
                continue;
            };
            let input = x
                .slice(
                    2,
                    Some(iy as i64),
                    Some((iy + (ny - 1) * g.stride.0 + 1) as i64),
                    g.stride.0,
                )?
                .slice(
                    3,
                    Some(ix as i64),
                    Some((ix + (nx - 1) * g.stride.1 + 1) as i64),
                    g.stride.1,
                )?;
            let column = cols
                .select(2, i as i64)?
                .select(2, j as i64)?
                .narrow(2, oy as i64, ny)?
                .narrow(3, ox as i64, nx)?;
            each(input, column)?;
        }
    }
    Ok(())
}

/// Fills `cols` (a `[b, C, kh, kw, OH, OW]` view of any layout) with the patches of `x`
/// (`[b, C, H, W]`): `cols[n, c, i, j, y, x]` is the input under output `(y, x)` at kernel
/// offset `(i, j)`, or 0 in the padding.
pub(super) fn fill(x: &Tensor, cols: &Tensor, g: &Geometry) -> Result<()> {
    if im2col(x, cols, &conv_windows(g))? {
        return Ok(());
    }
    if g.padding.0 > 0 || g.padding.1 > 0 {
        cols.zero_()?;
    }
    windows(x, cols, g, |input, column| column.copy_(&input).map(drop))
}

/// Adds every column entry of `cols` (`[b, C, kh, kw, OH, OW]`) back onto the position of
/// `gx` (`[b, C, H, W]`) it was read from; entries in the padding are dropped.
pub(super) fn add_back(cols: &Tensor, gx: &Tensor, g: &Geometry) -> Result<()> {
    if col2im_add(cols, gx, &conv_windows(g))? {
        return Ok(());
    }
    windows(gx, cols, g, |input, column| input.add_(&column).map(drop))
}

#[cfg(test)]
mod tests {
    use crate::backend::kernel::ConvWindows;

    use super::super::geometry::Geometry;
    use super::super::Pair;
    use super::{conv_windows, windows};
    use crate::ops::columns::{col2im_add, im2col};
    use crate::{DType, Result, Tensor};

    /// `(h, w, kernel, stride, padding, dilation)`.
    type Case = (usize, usize, Pair, Pair, Pair, Pair);

    fn geometry((h, w, kernel, stride, padding, dilation): Case, n: usize, c: usize) -> Geometry {
        let out = |size: usize, k: usize, s: usize, p: usize, d: usize| {
            (size + 2 * p - d * (k - 1) - 1) / s + 1
        };
        Geometry {
            n,
            c,
            h,
            w,
            o: 1,
            groups: 1,
            kernel,
            stride,
            padding,
            dilation,
            oh: out(h, kernel.0, stride.0, padding.0, dilation.0),
            ow: out(w, kernel.1, stride.1, padding.1, dilation.1),
        }
    }

    fn bits(t: &Tensor) -> Result<Vec<u64>> {
        Ok(t.to(DType::F64)?
            .to_vec::<f64>()?
            .iter()
            .map(|v| v.to_bits())
            .collect())
    }

    /// The column kernels give exactly what the strided copies and adds give, for column
    /// buffers laid out as the forward's and as the weight gradient's, for an input that is
    /// a strided view, in every float dtype.
    #[test]
    fn the_column_kernels_equal_the_composed_copies_and_adds() -> Result<()> {
        // Stride 1 with "same" padding takes the kernels' banded path (the first, the 28×28
        // and the last three, one dilated); the others take the row by row path.
        let cases: [Case; 9] = [
            (6, 7, Pair(3, 3), Pair(1, 1), Pair(1, 1), Pair(1, 1)),
            (7, 5, Pair(3, 2), Pair(2, 1), Pair(0, 1), Pair(1, 1)),
            (9, 8, Pair(3, 3), Pair(2, 2), Pair(2, 2), Pair(2, 2)),
            (5, 5, Pair(1, 1), Pair(2, 2), Pair(0, 0), Pair(1, 1)),
            (4, 6, Pair(2, 3), Pair(1, 3), Pair(3, 2), Pair(1, 1)),
            (28, 28, Pair(3, 3), Pair(1, 1), Pair(1, 1), Pair(1, 1)),
            (8, 9, Pair(3, 3), Pair(1, 1), Pair(2, 2), Pair(2, 2)),
            (3, 4, Pair(5, 5), Pair(1, 1), Pair(2, 2), Pair(1, 1)),
            (2, 2, Pair(7, 7), Pair(1, 1), Pair(3, 3), Pair(1, 1)),
        ];
        for dtype in [DType::F64, DType::F32, DType::BF16] {
            for case in cases {
                let (n, c) = (2, 3);
                let g = geometry(case, n, c);
                let six = [n, c, g.kernel.0, g.kernel.1, g.oh, g.ow];
                // The input contiguous, then as a strided view (the last two dimensions
                // swapped back).
                let inputs = [
                    Tensor::randn(&[n, c, g.h, g.w], dtype)?,
                    Tensor::randn(&[n, c, g.w, g.h], dtype)?.transpose(2, 3)?,
                ];
                for x in inputs {
                    let layouts = [
                        Tensor::full(&six[..], f64::NAN, dtype)?,
                        Tensor::full(&[c, g.kernel.0, g.kernel.1, n, g.oh, g.ow], f64::NAN, dtype)?
                            .permute(&[3, 0, 1, 2, 4, 5])?,
                    ];
                    for fast in layouts {
                        let composed = Tensor::zeros(&six[..], dtype)?;
                        assert!(im2col(&x, &fast, &conv_windows(&g))?, "{case:?}");
                        windows(&x, &composed, &g, |input, column| {
                            column.copy_(&input).map(drop)
                        })?;
                        assert_eq!(bits(&fast)?, bits(&composed)?, "im2col {dtype} {case:?}");

                        let gx = Tensor::randn(&[n, c, g.h, g.w], dtype)?;
                        let gx_composed = gx.deep_clone()?;
                        assert!(col2im_add(&fast, &gx, &conv_windows(&g))?, "{case:?}");
                        windows(&gx_composed, &fast, &g, |input, column| {
                            input.add_(&column).map(drop)
                        })?;
                        assert_eq!(bits(&gx)?, bits(&gx_composed)?, "col2im {dtype} {case:?}");
                    }
                }
            }
        }
        Ok(())
    }

    /// A written operand that overlaps itself is declined (the caller composes), not
    /// written.
    #[test]
    fn an_overlapping_buffer_is_declined() -> Result<()> {
        let g = geometry((4, 4, Pair(3, 3), Pair(1, 1), Pair(1, 1), Pair(1, 1)), 1, 1);
        let x = Tensor::randn(&[1, 1, 4, 4], DType::F32)?;
        let overlapping = Tensor::zeros(&[1], DType::F32)?.expand(&[1, 1, 3, 3, 4, 4])?;
        assert!(!im2col(&x, &overlapping, &conv_windows(&g))?);
        let cols = Tensor::zeros(&[1, 1, 3, 3, 4, 4], DType::F32)?;
        let image = Tensor::zeros(&[1], DType::F32)?.expand(&[1, 1, 4, 4])?;
        assert!(!col2im_add(&cols, &image, &conv_windows(&g))?);
        Ok(())
    }

    #[test]
    fn reach_skips_padding_and_respects_dilation() {
        let reach = ConvWindows::reach;
        // size 5, kernel offset 0, stride 1, pad 1: output 0 reads -1 (padding).
        assert_eq!(reach(5, 5, 1, 1, 1, 0), Some((1, 4, 0)));
        // offset 2 with pad 1 reads 1.. and the last output reads 5 (padding).
        assert_eq!(reach(5, 5, 1, 1, 1, 2), Some((0, 4, 1)));
        // stride 2, dilation 2, pad 2, size 4, out 3: offset 1 reads o·2 + 2 - 2 = 0, 2, 4.
        assert_eq!(reach(3, 4, 2, 2, 2, 1), Some((0, 2, 0)));
        // a kernel offset that only ever reads padding.
        assert_eq!(reach(1, 1, 1, 2, 1, 0), None);
    }
}
