//! The convolution's column matrices in one pass each way: `im2col` writes every column
//! entry (the input under each output position at each kernel offset, zero in the padding),
//! `col2im_add` adds every entry back onto the input position it came from. One image
//! plane (a sample's channel) is one task; planes are split across strata's pool.

use super::gather::SharedPtr;
use super::threads::spread;
use crate::backend::args::ColumnsArgs;
use crate::backend::kernel::ConvWindows;
use crate::dtype::{dispatch, DTypeFn, Element};

/// Column entries below which a call stays on the calling thread.
const PARALLEL_WORK: usize = 1 << 15;

/// Fills the columns from the image.
///
/// # Safety
/// As for [`crate::backend::Backend::im2col`].
pub(crate) unsafe fn im2col(args: &ColumnsArgs) {
    dispatch(args.dtype, Columns::new(args, Direction::Gather));
}

/// Adds the columns back onto the image.
///
/// # Safety
/// As for [`crate::backend::Backend::col2im_add`].
pub(crate) unsafe fn col2im_add(args: &ColumnsArgs) {
    dispatch(args.dtype, Columns::new(args, Direction::AddBack));
}

#[derive(Clone, Copy)]
enum Direction {
    /// Image to columns.
    Gather,
    /// Columns added onto the image.
    AddBack,
}

struct Columns {
    image: SharedPtr,
    cols: SharedPtr,
    is: [usize; 4],
    cs: [usize; 6],
    samples: usize,
    channels: usize,
    win: ConvWindows,
    direction: Direction,
}

impl Columns {
    fn new(args: &ColumnsArgs, direction: Direction) -> Columns {
        Columns {
            image: SharedPtr(args.image),
            cols: SharedPtr(args.cols),
            is: args.image_strides,
            cs: args.col_strides,
            samples: args.samples,
            channels: args.channels,
            win: args.windows,
            direction,
        }
    }
}

impl DTypeFn for Columns {
    type Output = ();
    fn call<T: Element>(self) {
        let w = self.win;
        let planes = self.samples * self.channels;
        let one = |p: usize| {
            let (n, c) = (p / self.channels, p % self.channels);
            let image = (self.image.get() as *mut T).wrapping_add(n * self.is[0] + c * self.is[1]);
            let cols = (self.cols.get() as *mut T).wrapping_add(n * self.cs[0] + c * self.cs[1]);
            // SAFETY: plane (n, c) of the image and of the columns lies inside the operands
            // the caller described; no other plane's task touches either (the caller's
            // operands overlap neither themselves nor each other).
            unsafe {
                match self.direction {
                    Direction::Gather => gather_plane(image, cols, &self, &w),
                    Direction::AddBack => add_back_plane(image, cols, &self, &w),
                }
            }
        };
        let work = planes * w.kh * w.kw * w.oh * w.ow;
        if work < PARALLEL_WORK || planes < 2 {
            (0..planes).for_each(one);
        } else {
            spread(planes, &one);
        }
    }
}

/// One plane's column rows: calls `row(i, j, y, reach)` for every kernel offset `(i, j)`
/// (in kernel order) and output row `y`, with `reach` the `(first column, count, first
/// image row, first image column)` read inside the image, or `None` when the row reads only
/// padding.
fn offsets(
    w: &ConvWindows,
    mut row: impl FnMut(usize, usize, usize, Option<(usize, usize, usize, usize)>),
) {
    for i in 0..w.kh {
        let rows = w.rows(i);
        for j in 0..w.kw {
            let cols = w.cols(j);
            for y in 0..w.oh {
                let reach = match (rows, cols) {
                    (Some((oy, ny, iy)), Some((ox, nx, ix))) if (oy..oy + ny).contains(&y) => {
                        Some((ox, nx, iy + (y - oy) * w.sh, ix))
                    }
                    _ => None,
                };
                row(i, j, y, reach);
            }
        }
    }
}

/// Writes one plane's columns.
///
/// # Safety
/// `image` addresses the plane's `h×w` readable elements at `is[2..]`, `cols` the plane's
/// `kh×kw×oh×ow` writable elements at `cs[2..]`, apart from everything else in use.
unsafe fn gather_plane<T: Element>(image: *mut T, cols: *mut T, a: &Columns, w: &ConvWindows) {
    let (is, cs) = (a.is, a.cs);
    if banded(a, w) {
        // SAFETY: forwarded from the caller.
        return unsafe { gather_bands(image, cols, a, w) };
    }
    offsets(w, |i, j, y, reach| {
        let out = cols.wrapping_add(i * cs[2] + j * cs[3] + y * cs[4]);
        let put = |x: usize, v: T| {
            // SAFETY: x < ow, inside the plane's columns (the caller's contract).
            unsafe { *out.add(x * cs[5]) = v }
        };
        let Some((ox, nx, iy, ix)) = reach else {
            (0..w.ow).for_each(|x| put(x, T::ZERO));
            return;
        };
        (0..ox).for_each(|x| put(x, T::ZERO));
        let src = image.wrapping_add(iy * is[2] + ix * is[3]) as *const T;
        if cs[5] == 1 && is[3] == 1 && w.sw == 1 {
            // SAFETY: the nx image elements from (iy, ix) and the nx column entries from ox
            // lie inside their planes and do not overlap (the caller's contract).
            unsafe { std::ptr::copy_nonoverlapping(src, out.add(ox), nx) };
        } else {
            for k in 0..nx {
                // SAFETY: image column ix + k·sw < w (from `reach`).
                put(ox + k, unsafe { *src.add(k * w.sw * is[3]) });
            }
        }
        (ox + nx..w.ow).for_each(|x| put(x, T::ZERO));
    });
}

/// Whether each kernel offset's columns of a plane are one shifted run of the image:
/// stride 1 both ways, output rows as wide as the image's ("same" padding), and the image's
/// and the columns' rows dense and back to back. Entry `t` of the offset's `oh·ow` block
/// is then image element `t + shift`, except in the padding columns at the row ends.
fn banded(a: &Columns, w: &ConvWindows) -> bool {
    w.sh == 1
        && w.sw == 1
        && w.ow == w.w
        && a.is[3] == 1
        && a.is[2] == w.w
        && a.cs[5] == 1
        && a.cs[4] == w.ow
}

/// Writes one plane's columns when [`banded`]: per kernel offset, one copy of the image
/// run it reads, then zeros over the padding rows and the padding columns of each row.
/// A row of the columns is a few dozen entries; one copy per row costs more than the copy.
///
/// # Safety
/// As [`gather_plane`], and [`banded`] holds.
unsafe fn gather_bands<T: Element>(image: *mut T, cols: *mut T, a: &Columns, w: &ConvWindows) {
    let (oh, ow) = (w.oh, w.ow);
    for i in 0..w.kh {
        for j in 0..w.kw {
            // SAFETY: the offset's block of oh·ow entries is dense (`banded`) and inside the
            // plane's columns, which nothing else touches (the caller's contract).
            let block = unsafe {
                std::slice::from_raw_parts_mut(cols.add(i * a.cs[2] + j * a.cs[3]), oh * ow)
            };
            let (Some((oy, ny, iy)), Some((ox, nx, ix))) = (w.rows(i), w.cols(j)) else {
                block.fill(T::ZERO);
                continue;
            };
            let (start, len) = (oy * ow + ox, (ny - 1) * ow + nx);
            // SAFETY: image rows iy..iy + ny are inside the plane (`reach`), and the run
            // ends at row iy + ny - 1's column ix + nx - 1 < w.
            let run = unsafe { std::slice::from_raw_parts(image.add(iy * w.w + ix), len) };
            block[..start].fill(T::ZERO);
            block[start..start + len].copy_from_slice(run);
            block[start + len..].fill(T::ZERO);
            for y in oy..oy + ny {
                block[y * ow..y * ow + ox].fill(T::ZERO);
                block[y * ow + ox + nx..(y + 1) * ow].fill(T::ZERO);
            }
        }
    }
}

/// Adds one plane's columns onto its image.
///
/// # Safety
/// `cols` addresses the plane's `kh×kw×oh×ow` readable elements at `cs[2..]`, `image` the
/// plane's `h×w` writable elements at `is[2..]`, apart from everything else in use.
unsafe fn add_back_plane<T: Element>(image: *mut T, cols: *mut T, a: &Columns, w: &ConvWindows) {
    let (is, cs) = (a.is, a.cs);
    offsets(w, |i, j, y, reach| {
        let Some((ox, nx, iy, ix)) = reach else {
            return;
        };
        let src = cols.wrapping_add(i * cs[2] + j * cs[3] + y * cs[4] + ox * cs[5]) as *const T;
        let dst = image.wrapping_add(iy * is[2] + ix * is[3]);
        if cs[5] == 1 && is[3] == 1 && w.sw == 1 {
            // SAFETY: the nx column entries and the nx image elements lie inside their
            // planes and do not overlap (the caller's contract).
            let (src, dst) = unsafe {
                (
                    std::slice::from_raw_parts(src, nx),
                    std::slice::from_raw_parts_mut(dst, nx),
                )
            };
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = d.add(s);
            }
        } else {
            for k in 0..nx {
                // SAFETY: as above, element by element.
                unsafe {
                    let d = dst.add(k * w.sw * is[3]);
                    *d = (*d).add(*src.add(k * cs[5]));
                }
            }
        }
    });
}
