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
    GELU, gelu, "The Gaussian error linear unit, exact form (`nn.GELU`).";
    SiLU, silu, "`x · sigmoid(x)` (`nn.SiLU`).";
    Tanh, tanh, "`tanh(x)` element-wise (`nn.Tanh`).";
    Sigmoid, sigmoid, "`1 / (1 + e^-x)` element-wise (`nn.Sigmoid`).";
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
