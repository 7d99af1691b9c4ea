//! Column matrices for a slice of the batch: each kernel offset `(i, j)` copies the input
//! positions it reads (a strided window of the input) into its rows, and the gradient adds
//! them back. Nothing is padded: positions that fall in the padding stay zero in the columns
//! and are skipped on the way back.

use super::geometry::Geometry;
use crate::{Result, Tensor};

/// The output positions along one axis that kernel offset `k` reads inside the input, and the
/// first input position read: `(first output, count, first input)`, or `None` when every
/// position falls in the padding.
fn reach(
    out: usize,
    size: usize,
    stride: usize,
    pad: usize,
    dil: usize,
    k: usize,
) -> Option<(usize, usize, usize)> {
    let offset = k * dil;
    // Output o reads input o·stride + offset - pad, which must lie in 0..size.
    let first = pad.saturating_sub(offset).div_ceil(stride);
    let last = (size - 1 + pad).checked_sub(offset)? / stride;
    let last = last.min(out.checked_sub(1)?);
    if first > last {
        return None;
    }
    Some((first, last - first + 1, first * stride + offset - pad))
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
    for i in 0..g.kernel.0 {
        let Some((oy, ny, iy)) = reach(g.oh, g.h, g.stride.0, g.padding.0, g.dilation.0, i) else {
            continue;
        };
        for j in 0..g.kernel.1 {
            let Some((ox, nx, ix)) = reach(g.ow, g.w, g.stride.1, g.padding.1, g.dilation.1, j)
            else {
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
    if g.padding.0 > 0 || g.padding.1 > 0 {
        cols.zero_()?;
    }
    windows(x, cols, g, |input, column| column.copy_(&input).map(drop))
}

/// Adds every column entry of `cols` (`[b, C, kh, kw, OH, OW]`) back onto the position of
/// `gx` (`[b, C, H, W]`) it was read from; entries in the padding are dropped.
pub(super) fn add_back(cols: &Tensor, gx: &Tensor, g: &Geometry) -> Result<()> {
    windows(gx, cols, g, |input, column| input.add_(&column).map(drop))
}

#[cfg(test)]
mod tests {
    use super::reach;

    #[test]
    fn reach_skips_padding_and_respects_dilation() {
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
