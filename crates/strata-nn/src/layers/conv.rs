//! `Conv2d`: 2-d convolution over `[N, C, H, W]` inputs.

use strata_core::nn::functional::{conv2d_with, Conv2dOptions, Pair};
use strata_core::{DType, Error, Result, Tensor};

use super::defaults;
use crate::module::{Module, ModuleCore, TensorSlot};

/// The settings of a [`Conv2d`] beyond its channels and kernel, PyTorch's defaults:
/// stride 1, padding 0, dilation 1, groups 1, a bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dConfig {
    /// The step between windows.
    pub stride: Pair,
    /// Zeros added on each side.
    pub padding: Pair,
    /// The spacing between kernel taps.
    pub dilation: Pair,
    /// Channel groups: input and output channels are split into this many independent
    /// convolutions.
    pub groups: usize,
    /// Whether the layer adds a learned bias.
    pub bias: bool,
}

impl Default for Conv2dConfig {
    fn default() -> Self {
        Conv2dConfig {
            stride: Pair(1, 1),
            padding: Pair(0, 0),
            dilation: Pair(1, 1),
            groups: 1,
            bias: true,
        }
    }
}

/// A 2-d convolution (`nn.Conv2d`): weight `[out_channels, in_channels / groups, kh, kw]`
/// and bias `[out_channels]`, both U(±1/√fan_in) with `fan_in = in_channels / groups · kh ·
/// kw`.
#[derive(Debug, Clone)]
pub struct Conv2d {
    core: ModuleCore,
    weight: TensorSlot,
    bias: Option<TensorSlot>,
    config: Conv2dConfig,
}

impl Conv2d {
    /// `nn.Conv2d(in_channels, out_channels, kernel_size)` with the default settings.
    pub fn new(in_channels: usize, out_channels: usize, kernel: impl Into<Pair>) -> Result<Self> {
        Self::with_config(in_channels, out_channels, kernel, Conv2dConfig::default())
    }

    /// A convolution with the given settings.
    pub fn with_config(
        in_channels: usize,
        out_channels: usize,
        kernel: impl Into<Pair>,
        config: Conv2dConfig,
    ) -> Result<Self> {
        let Pair(kh, kw) = kernel.into();
        let g = config.groups;
        if g == 0 || !in_channels.is_multiple_of(g) || !out_channels.is_multiple_of(g) {
            return Err(Error::argument(
                "Conv2d",
                format!(
                    "groups ({g}) must be positive and divide both in_channels ({in_channels}) and out_channels ({out_channels})"
                ),
                None,
            ));
        }
        let core = ModuleCore::library("Conv2d");
        let w = Tensor::zeros(&[out_channels, in_channels / g, kh, kw], DType::F32)?;
        defaults::kaiming_weight(&w)?;
        let weight = core.register_parameter("weight", w)?;
        let bias = if config.bias {
            let b = Tensor::zeros(&[out_channels], DType::F32)?;
            defaults::fan_in_bias(&b, in_channels / g * kh * kw)?;
            Some(core.register_parameter("bias", b)?)
        } else {
            None
        };
        Ok(Conv2d {
            core,
            weight,
            bias,
            config,
        })
    }

    /// The weight, `[out_channels, in_channels / groups, kh, kw]`.
    pub fn weight(&self) -> Tensor {
        self.weight.get()
    }

    /// The bias, when the layer has one.
    pub fn bias(&self) -> Option<Tensor> {
        self.bias.as_ref().map(TensorSlot::get)
    }

    /// The settings.
    pub fn config(&self) -> Conv2dConfig {
        self.config
    }
}

impl Module for Conv2d {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let c = self.config;
        let opts = Conv2dOptions {
            stride: c.stride,
            padding: c.padding,
            dilation: c.dilation,
            groups: c.groups,
        };
        conv2d_with(x, &self.weight(), self.bias().as_ref(), opts)
    }
}
