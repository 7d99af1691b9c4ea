//! Pooling layers: `MaxPool2d`.

use strata_core::nn::functional::{max_pool2d, Pair};
use strata_core::{Error, Result, Tensor};

use crate::module::{Module, ModuleCore};

/// The maximum of each window (`nn.MaxPool2d`): stride defaults to the kernel size.
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
        if self.padding != Pair(0, 0) || self.ceil_mode {
            return Err(Error::Unsupported {
                op: "MaxPool2d",
                message: "padding and ceil_mode need the max_pool2d_with op".into(),
            });
        }
        max_pool2d(x, self.kernel, self.stride)
    }
}
