//! Pooling layers: `MaxPool2d`, `AvgPool2d`, `AdaptiveAvgPool2d`, over the last two
//! dimensions of `[N, C, H, W]` or `[C, H, W]` inputs.

use strata_core::nn::functional::{
    adaptive_avg_pool2d, avg_pool2d, max_pool2d_with, Pair, Pool2dOptions,
};
use strata_core::{Result, Tensor};

use crate::module::{Module, ModuleCore};

/// A fixed-window pooling layer: its name, the functional op it runs and what its padding
/// holds, with PyTorch's builder-style options.
macro_rules! window_pool {
    ($name:ident, $op:ident, $doc:literal, $padding_doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone)]
        pub struct $name {
            core: ModuleCore,
            opts: Pool2dOptions,
        }

        impl $name {
            #[doc = concat!("`nn.", stringify!($name), "(kernel)`: stride = kernel, no padding, floor mode.")]
            pub fn new(kernel: impl Into<Pair>) -> Self {
                $name {
                    core: ModuleCore::library(stringify!($name)),
                    opts: Pool2dOptions::new(kernel),
                }
            }

            /// Sets the stride.
            pub fn stride(mut self, stride: impl Into<Pair>) -> Self {
                self.opts.stride = Some(stride.into());
                self
            }

            #[doc = $padding_doc]
            pub fn padding(mut self, padding: impl Into<Pair>) -> Self {
                self.opts.padding = padding.into();
                self
            }

            /// Rounds the output size up instead of down.
            pub fn ceil_mode(mut self, ceil_mode: bool) -> Self {
                self.opts.ceil_mode = ceil_mode;
                self
            }
        }

        impl Module for $name {
            fn core(&self) -> &ModuleCore {
                &self.core
            }

            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                $op(x, self.opts)
            }
        }
    };
}

window_pool!(
    MaxPool2d,
    max_pool2d_with,
    "The maximum of each window (`nn.MaxPool2d`): stride defaults to the kernel size; padding \
     (never chosen, at most half the kernel) and ceil mode as in PyTorch.",
    "Sets the implicit padding on each side (never chosen by the maximum)."
);

window_pool!(
    AvgPool2d,
    avg_pool2d,
    "The mean of each window (`nn.AvgPool2d`): stride defaults to the kernel size; zero \
     padding counted in the mean (PyTorch's default `count_include_pad=True`).",
    "Sets the zero padding on each side."
);

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
            core: ModuleCore::library("AdaptiveAvgPool2d"),
            output: output.into(),
        }
    }
}

impl Module for AdaptiveAvgPool2d {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        adaptive_avg_pool2d(x, self.output)
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
