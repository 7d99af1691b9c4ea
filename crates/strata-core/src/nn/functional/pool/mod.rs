//! Pooling: `max_pool2d`, `avg_pool2d` and `adaptive_avg_pool2d`, and the window arithmetic
//! they share.

mod adaptive;
mod avg;
mod max;

pub use adaptive::adaptive_avg_pool2d;
pub use avg::avg_pool2d;
pub use max::{max_pool2d, max_pool2d_with};

use super::check::{ndim_in, shape};
use super::Pair;
use crate::{Error, Result, Tensor};

/// The options of the fixed-window pools, with PyTorch's defaults: the stride is the kernel
/// size, no padding, sizes rounded down.
///
/// ```
/// use strata_core::nn::functional::{Pair, Pool2dOptions};
/// let o = Pool2dOptions { padding: Pair(1, 1), ceil_mode: true, ..Pool2dOptions::new(3) };
/// assert_eq!(o.kernel, Pair(3, 3));
/// assert_eq!(o.stride, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2dOptions {
    /// The window's size.
    pub kernel: Pair,
    /// Distance between windows (the kernel size when `None`).
    pub stride: Option<Pair>,
    /// Positions added on each side (never chosen by a max, counted by an average).
    pub padding: Pair,
    /// Round the output size up instead of down (a last window that would start in the right
    /// padding is still dropped).
    pub ceil_mode: bool,
}

impl Pool2dOptions {
    /// A `kernel` window, stride the kernel, no padding, sizes rounded down.
    pub fn new(kernel: impl Into<Pair>) -> Self {
        Pool2dOptions {
            kernel: kernel.into(),
            stride: None,
            padding: Pair(0, 0),
            ceil_mode: false,
        }
    }
}

/// The checked sizes of one fixed-window pooling of `[.., H, W]`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Windows {
    pub kernel: Pair,
    pub stride: Pair,
    pub padding: Pair,
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
}

impl Windows {
    /// The padded extent every window fits in: `(OH - 1)·sh + kh` rows (at least the padded
    /// input), and the same for columns.
    pub fn extent(&self) -> Pair {
        Pair(
            ((self.oh - 1) * self.stride.0 + self.kernel.0).max(self.h + 2 * self.padding.0),
            ((self.ow - 1) * self.stride.1 + self.kernel.1).max(self.w + 2 * self.padding.1),
        )
    }

    /// Whether the windows read only the input itself.
    pub fn unpadded(&self) -> bool {
        self.extent() == Pair(self.h, self.w)
    }
}

/// Output size along one axis, as PyTorch's `pooling_output_shape`.
fn output_size(size: usize, k: usize, s: usize, p: usize, ceil: bool) -> Option<usize> {
    let span = (size + 2 * p).checked_sub(k)?;
    let mut out = if ceil { span.div_ceil(s) } else { span / s } + 1;
    // A last window that would start in the right padding is dropped.
    if ceil && (out - 1) * s >= size + p {
        out -= 1;
    }
    Some(out)
}

/// Checks `x` (`[N, C, H, W]` or `[C, H, W]`) and the options of a fixed-window pool.
pub(super) fn check(op: &'static str, x: &Tensor, opts: &Pool2dOptions) -> Result<Windows> {
    ndim_in(op, "the input", x, &[3, 4])?;
    let kernel = opts.kernel;
    let stride = opts.stride.unwrap_or(kernel);
    let padding = opts.padding;
    if kernel.0 == 0 || kernel.1 == 0 || stride.0 == 0 || stride.1 == 0 {
        return Err(Error::argument(
            op,
            format!("the kernel {kernel:?} and stride {stride:?} must be positive"),
            Some("a 2x2 pooling is kernel 2 (stride defaults to the kernel)"),
        ));
    }
    if 2 * padding.0 > kernel.0 || 2 * padding.1 > kernel.1 {
        return Err(Error::argument(
            op,
            format!("the padding {padding:?} must be at most half the kernel {kernel:?}"),
            Some("use a larger kernel or less padding"),
        ));
    }
    let xs = x.shape().to_vec();
    let nd = xs.len();
    let (h, w) = (xs[nd - 2], xs[nd - 1]);
    let oh = output_size(h, kernel.0, stride.0, padding.0, opts.ceil_mode);
    let ow = output_size(w, kernel.1, stride.1, padding.1, opts.ceil_mode);
    match (oh, ow) {
        (Some(oh), Some(ow)) if oh > 0 && ow > 0 => Ok(Windows {
            kernel,
            stride,
            padding,
            h,
            w,
            oh,
            ow,
        }),
        _ => Err(shape(
            op,
            format!(
                "the input's {h}x{w} planes, padded by {padding:?}, are smaller than the \
                 kernel {}x{}",
                kernel.0, kernel.1
            ),
            vec![xs],
            "use a smaller kernel or a larger input",
        )),
    }
}

/// `x` (`[N, C, H, W]`) placed in a tensor of the windows' extent filled with `fill` around
/// it (or `x` itself when the windows read only the input).
pub(super) fn padded(x: &Tensor, win: &Windows, fill: crate::Scalar) -> Result<Tensor> {
    if win.unpadded() {
        return Ok(x.clone());
    }
    let s = x.shape();
    let ext = win.extent();
    let xp = Tensor::on(x.device()).full(&[s[0], s[1], ext.0, ext.1], fill, x.dtype())?;
    xp.narrow(2, win.padding.0 as i64, win.h)?
        .narrow(3, win.padding.1 as i64, win.w)?
        .copy_(x)?;
    Ok(xp)
}

/// The windows of `t` (`[n, c, extent]`) as `[n, c, OH, OW, kh·kw]`.
pub(super) fn windows_of(t: &Tensor, win: &Windows) -> Result<Tensor> {
    let s = t.shape();
    t.unfold(2, win.kernel.0, win.stride.0)?
        .unfold(3, win.kernel.1, win.stride.1)?
        .narrow(2, 0, win.oh)?
        .narrow(3, 0, win.ow)?
        .reshape_to(&[s[0], s[1], win.oh, win.ow, win.kernel.0 * win.kernel.1])
}

#[cfg(test)]
mod tests {
    use super::output_size;

    #[test]
    fn output_sizes_follow_pytorch() {
        assert_eq!(output_size(5, 2, 2, 0, false), Some(2));
        assert_eq!(output_size(5, 2, 2, 0, true), Some(3));
        // ceil would start a window at 6 >= 5 + 1 (in the padding): dropped.
        assert_eq!(output_size(5, 2, 2, 1, true), Some(3));
        assert_eq!(output_size(4, 3, 1, 1, false), Some(4));
        assert_eq!(output_size(1, 3, 1, 0, false), None);
    }
}
