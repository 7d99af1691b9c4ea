//! Parameter-free element-wise layers: `ReLU`, `GELU`, `SiLU`, `Tanh`, `Sigmoid`, and the
//! softmax family along a dimension.

use strata_core::{Result, Tensor};

use crate::module::{Module, ModuleCore};

macro_rules! elementwise {
    ($($name:ident, $method:ident, $doc:literal;)*) => {
        $(
            #[doc = $doc]
            #[derive(Debug, Clone)]
            pub struct $name {
                core: ModuleCore,
            }

            impl $name {
                #[doc = concat!("A new `", stringify!($name), "` layer.")]
                pub fn new() -> Self {
                    $name { core: ModuleCore::library(stringify!($name)) }
                }
            }

            impl Default for $name {
                fn default() -> Self {
                    Self::new()
                }
            }

            impl Module for $name {
                fn core(&self) -> &ModuleCore {
                    &self.core
                }

                fn forward(&self, x: &Tensor) -> Result<Tensor> {
                    x.$method()
                }
            }
        )*
    };
}

elementwise! {
    ReLU, relu, "`max(x, 0)` element-wise (`nn.ReLU`).";
    SiLU, silu, "`x · sigmoid(x)` (`nn.SiLU`).";
    Tanh, tanh, "`tanh(x)` element-wise (`nn.Tanh`).";
    Sigmoid, sigmoid, "`1 / (1 + e^-x)` element-wise (`nn.Sigmoid`).";
}

/// How [`GELU`] computes: PyTorch's `approximate` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GeluApproximate {
    /// The exact form, `x/2 (1 + erf(x/√2))` (`approximate="none"`).
    #[default]
    None,
    /// The tanh approximation GPT-2 uses (`approximate="tanh"`).
    Tanh,
}

/// The Gaussian error linear unit (`nn.GELU`): exact by default, or its tanh approximation
/// with [`GELU::tanh`].
#[derive(Debug, Clone)]
pub struct GELU {
    core: ModuleCore,
    approximate: GeluApproximate,
}

impl GELU {
    /// A new exact `GELU` layer (`nn.GELU()`).
    pub fn new() -> Self {
        GELU::with_approximate(GeluApproximate::None)
    }

    /// A new `GELU` layer of the tanh approximation (`nn.GELU(approximate="tanh")`).
    pub fn tanh() -> Self {
        GELU::with_approximate(GeluApproximate::Tanh)
    }

    /// A new `GELU` layer computing as `approximate` says.
    pub fn with_approximate(approximate: GeluApproximate) -> Self {
        GELU {
            core: ModuleCore::library("GELU"),
            approximate,
        }
    }

    /// How this layer computes.
    pub fn approximate(&self) -> GeluApproximate {
        self.approximate
    }
}

impl Default for GELU {
    fn default() -> Self {
        Self::new()
    }
}

impl Module for GELU {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.approximate {
            GeluApproximate::None => x.gelu(),
            GeluApproximate::Tanh => x.gelu_tanh(),
        }
    }
}

macro_rules! along_dim {
    ($($name:ident, $method:ident, $doc:literal;)*) => {
        $(
            #[doc = $doc]
            #[derive(Debug, Clone)]
            pub struct $name {
                core: ModuleCore,
                dim: i64,
            }

            impl $name {
                #[doc = concat!("A new `", stringify!($name), "` along `dim` (negative counts from the end).")]
                pub fn new(dim: i64) -> Self {
                    $name { core: ModuleCore::library(stringify!($name)), dim }
                }

                /// The dimension it normalises along.
                pub fn dim(&self) -> i64 {
                    self.dim
                }
            }

            impl Module for $name {
                fn core(&self) -> &ModuleCore {
                    &self.core
                }

                fn forward(&self, x: &Tensor) -> Result<Tensor> {
                    x.$method(self.dim)
                }
            }
        )*
    };
}

along_dim! {
    Softmax, softmax, "Softmax along a dimension (`nn.Softmax(dim)`).";
    LogSoftmax, log_softmax, "Log-softmax along a dimension (`nn.LogSoftmax(dim)`).";
}
