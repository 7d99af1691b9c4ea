//! Pooling layers: `MaxPool2d`, `AvgPool2d`, `AdaptiveAvgPool2d`, over the last two
//! dimensions of `[N, C, H, W]` or `[C, H, W]` inputs.

use strata_core::nn::functional::{max_pool2d, Pair};
use strata_core::{Error, Result, Tensor};

use super::pad::pad2d;
use crate::module::{Module, ModuleCore};

/// The output size along one dimension and the padding after the input that makes a
/// floor-mode pooling produce it (PyTorch's rule: in ceil mode the last window must start
/// inside the input or the padding before it).
fn out_and_tail(
    op: &'static str,
    len: usize,
    k: usize,
    s: usize,
    p: usize,
    ceil: bool,
) -> Result<(usize, usize)> {
    if k == 0 || s == 0 || 2 * p > k {
        return Err(Error::argument(
            op,
            format!("kernel {k} and stride {s} must be positive and padding {p} at most half the kernel"),
            None,
        ));
    }
    let span = len + 2 * p;
    if span < k {
        return Err(Error::argument(
            op,
            format!("the padded input ({span}) is smaller than the kernel ({k})"),
            None,
        ));
    }
    let mut out = if ceil {
        (span - k).div_ceil(s) + 1
    } else {
        (span - k) / s + 1
    };
    if ceil && (out - 1) * s >= len + p {
        out -= 1;
    }
    let needed = (out - 1) * s + k;
    Ok((out, needed.saturating_sub(len + p)))
}

fn spatial(op: &'static str, x: &Tensor) -> Result<(usize, usize)> {
    let s = x.shape();
    if !matches!(s.len(), 3 | 4) {
        return Err(Error::shape(
            op,
            format!("expected [N, C, H, W] or [C, H, W], got {:?}", s.as_slice()),
            vec![s.to_vec()],
        ));
    }
    Ok((s[s.len() - 2], s[s.len() - 1]))
}

/// The maximum of each window (`nn.MaxPool2d`): stride defaults to the kernel size; padding
/// (−∞, at most half the kernel) and ceil mode as in PyTorch.
#[derive(Debug, Clone)]
pub struct MaxPool2d {
    core: ModuleCore,
    kernel: Pair,
    stride: Option<Pair>,
    padding: Pair,
    ceil_mode: bool,
}

impl MaxPool2d {
    /// `nn.MaxPool2d(kernel)`: stride = kernel, no padding, floor mode.
    pub fn new(kernel: impl Into<Pair>) -> Self {
        MaxPool2d {
            core: ModuleCore::new("MaxPool2d"),
            kernel: kernel.into(),
            stride: None,
            padding: Pair(0, 0),
            ceil_mode: false,
        }
    }

    /// Sets the stride.
    pub fn stride(mut self, stride: impl Into<Pair>) -> Self {
        self.stride = Some(stride.into());
        self
    }

    /// Sets the implicit padding (−∞ on each side).
    pub fn padding(mut self, padding: impl Into<Pair>) -> Self {
        self.padding = padding.into();
        self
    }

    /// Rounds the output size up instead of down.
    pub fn ceil_mode(mut self, ceil_mode: bool) -> Self {
        self.ceil_mode = ceil_mode;
        self
    }
}

impl Module for MaxPool2d {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        const OP: &str = "MaxPool2d";
        let (h, w) = spatial(OP, x)?;
        let Pair(kh, kw) = self.kernel;
        let Pair(sh, sw) = self.stride.unwrap_or(self.kernel);
        let Pair(ph, pw) = self.padding;
        let (_, tail_h) = out_and_tail(OP, h, kh, sh, ph, self.ceil_mode)?;
        let (_, tail_w) = out_and_tail(OP, w, kw, sw, pw, self.ceil_mode)?;
        if ph + pw + tail_h + tail_w == 0 {
            return max_pool2d(x, self.kernel, Some(Pair(sh, sw)));
        }
        if !x.dtype().is_floating() {
            return Err(Error::dtype(
                OP,
                "padding and ceil mode pool floating tensors only",
                None,
            ));
        }
        let padded = pad2d(x, (ph, tail_h), (pw, tail_w), f64::NEG_INFINITY)?;
        max_pool2d(&padded, self.kernel, Some(Pair(sh, sw)))
    }
}

/// The mean of each window (`nn.AvgPool2d`): stride defaults to the kernel size; zero
/// padding counted in the mean (PyTorch's default `count_include_pad=True`).
#[derive(Debug, Clone)]
pub struct AvgPool2d {
    core: ModuleCore,
    kernel: Pair,
    stride: Option<Pair>,
    padding: Pair,
}

impl AvgPool2d {
    /// `nn.AvgPool2d(kernel)`: stride = kernel, no padding.
    pub fn new(kernel: impl Into<Pair>) -> Self {
        AvgPool2d {
            core: ModuleCore::new("AvgPool2d"),
            kernel: kernel.into(),
            stride: None,
            padding: Pair(0, 0),
        }
    }

    /// Sets the stride.
    pub fn stride(mut self, stride: impl Into<Pair>) -> Self {
        self.stride = Some(stride.into());
        self
    }

    /// Sets the zero padding on each side.
    pub fn padding(mut self, padding: impl Into<Pair>) -> Self {
        self.padding = padding.into();
        self
    }
}

impl Module for AvgPool2d {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        const OP: &str = "AvgPool2d";
        let (h, w) = spatial(OP, x)?;
        let Pair(kh, kw) = self.kernel;
        let Pair(sh, sw) = self.stride.unwrap_or(self.kernel);
        let Pair(ph, pw) = self.padding;
        out_and_tail(OP, h, kh, sh, ph, false)?;
        out_and_tail(OP, w, kw, sw, pw, false)?;
        let nd = x.dim() as i64;
        let padded = pad2d(x, (ph, ph), (pw, pw), 0.0)?;
        let windows = padded.unfold(nd - 2, kh, sh)?.unfold(nd - 1, kw, sw)?;
        windows.mean(Some(&[nd, nd + 1]), false)
    }
}

/// Averages into a fixed output size (`nn.AdaptiveAvgPool2d`): output cell `i` of `out`
/// covers input rows `⌊i·H/out⌋ .. ⌈(i+1)·H/out⌉`, and likewise for columns.
#[derive(Debug, Clone)]
pub struct AdaptiveAvgPool2d {
    core: ModuleCore,
    output: Pair,
}

impl AdaptiveAvgPool2d {
    /// Pools to `output` (`1` for global average pooling).
    pub fn new(output: impl Into<Pair>) -> Self {
        AdaptiveAvgPool2d {
            core: ModuleCore::new("AdaptiveAvgPool2d"),
            output: output.into(),
        }
    }
}

impl Module for AdaptiveAvgPool2d {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        const OP: &str = "AdaptiveAvgPool2d";
        let (h, w) = spatial(OP, x)?;
        let Pair(oh, ow) = self.output;
        if oh == 0 || ow == 0 {
            return Err(Error::argument(
                OP,
                "the output size must be positive",
                None,
            ));
        }
        let nd = x.dim() as i64;
        let bin = |i: usize, n: usize, o: usize| (i * n / o, ((i + 1) * n).div_ceil(o));
        let mut cells = Vec::with_capacity(oh * ow);
        for i in 0..oh {
            let (r0, r1) = bin(i, h, oh);
            let rows = x.narrow(nd - 2, r0 as i64, r1 - r0)?;
            for j in 0..ow {
                let (c0, c1) = bin(j, w, ow);
                let cell = rows.narrow(nd - 1, c0 as i64, c1 - c0)?;
                cells.push(cell.mean(Some(&[nd - 2, nd - 1]), false)?);
            }
        }
        let flat = Tensor::stack(&cells.iter().collect::<Vec<_>>(), -1)?;
        let mut shape: Vec<i64> = x.shape()[..x.dim() - 2].iter().map(|&d| d as i64).collect();
        shape.extend([oh as i64, ow as i64]);
        flat.reshape(&shape)
    }
}

#[cfg(test)]
mod tests {
    use strata_core::{DType, Tensor};

    use super::*;

    fn grid() -> Tensor {
        Tensor::arange(16, DType::F32)
            .unwrap()
            .view(&[1, 1, 4, 4])
            .unwrap()
    }

    #[test]
    fn max_pool_padding_and_ceil_mode() {
        let y = MaxPool2d::new(2).padding(1).call(&grid()).unwrap();
        assert_eq!(y.shape().as_slice(), [1, 1, 3, 3]);
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            [0.0, 2.0, 3.0, 8.0, 10.0, 11.0, 12.0, 14.0, 15.0]
        );
        let x = Tensor::arange(25, DType::F32)
            .unwrap()
            .view(&[1, 5, 5])
            .unwrap();
        let floor = MaxPool2d::new(2).call(&x).unwrap();
        assert_eq!(floor.shape().as_slice(), [1, 2, 2]);
        let ceil = MaxPool2d::new(2).ceil_mode(true).call(&x).unwrap();
        assert_eq!(ceil.shape().as_slice(), [1, 3, 3]);
        assert_eq!(ceil.to_vec::<f32>().unwrap()[8], 24.0);
        assert!(MaxPool2d::new(2).padding(2).call(&x).is_err());
    }

    #[test]
    fn avg_pool_counts_padding() {
        let y = AvgPool2d::new(2).call(&grid()).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [2.5, 4.5, 10.5, 12.5]);
        let p = AvgPool2d::new(2).padding(1).call(&grid()).unwrap();
        assert_eq!(p.shape().as_slice(), [1, 1, 3, 3]);
        assert_eq!(p.to_vec::<f32>().unwrap()[0], 0.0 / 4.0);
        assert_eq!(p.to_vec::<f32>().unwrap()[1], (1.0 + 2.0) / 4.0);
    }

    #[test]
    fn adaptive_bins_overlap_as_pytorch() {
        let x = Tensor::arange(5, DType::F32)
            .unwrap()
            .view(&[1, 1, 1, 5])
            .unwrap();
        let y = AdaptiveAvgPool2d::new(Pair(1, 3)).call(&x).unwrap();
        // Bins [0, 2), [1, 4), [3, 5).
        assert_eq!(y.to_vec::<f32>().unwrap(), [0.5, 2.0, 3.5]);
        let g = AdaptiveAvgPool2d::new(1).call(&grid()).unwrap();
        assert_eq!(g.shape().as_slice(), [1, 1, 1, 1]);
        assert_eq!(g.item::<f32>().unwrap(), 7.5);
    }
}
