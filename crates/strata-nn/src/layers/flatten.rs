//! `Flatten` and `Dropout`: the shape and regularisation layers without parameters.

use strata_core::nn::functional::dropout;
use strata_core::{Error, Result, Tensor};

use crate::module::{Module, ModuleCore};

/// Flattens dimensions `start_dim..=end_dim` into one (`nn.Flatten`, default 1 to −1, so a
/// batch stays a batch). A view when the layout allows it.
#[derive(Debug, Clone)]
pub struct Flatten {
    core: ModuleCore,
    start_dim: i64,
    end_dim: i64,
}

impl Flatten {
    /// `nn.Flatten()`: dimensions 1 to −1.
    pub fn new() -> Self {
        Self::with_dims(1, -1)
    }

    /// Flattens `start_dim..=end_dim` (negative counts from the end).
    pub fn with_dims(start_dim: i64, end_dim: i64) -> Self {
        Flatten {
            core: ModuleCore::library("Flatten"),
            start_dim,
            end_dim,
        }
    }
}

impl Default for Flatten {
    fn default() -> Self {
        Self::new()
    }
}

impl Module for Flatten {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.flatten(self.start_dim, self.end_dim)
    }
}

/// Zeroes each element with probability `p` in training and scales the rest by
/// `1 / (1 − p)`; the identity in evaluation mode (`nn.Dropout`).
#[derive(Debug, Clone)]
pub struct Dropout {
    core: ModuleCore,
    p: f64,
}

impl Dropout {
    /// Dropout with probability `p` in `[0, 1]`.
    pub fn new(p: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::argument(
                "Dropout",
                format!("the probability must be in [0, 1], got {p}"),
                None,
            ));
        }
        Ok(Dropout {
            core: ModuleCore::library("Dropout"),
            p,
        })
    }

    /// The drop probability.
    pub fn p(&self) -> f64 {
        self.p
    }
}

impl Module for Dropout {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        dropout(x, self.p, self.is_training())
    }
}
