//! `LayerNorm`: normalisation over the trailing dimensions of each sample.

use strata_core::nn::functional::layer_norm;
use strata_core::{DType, Result, Tensor};

use crate::module::{Module, ModuleCore, TensorSlot};

/// Normalises over the last `normalized_shape.len()` dimensions, then scales and shifts by a
/// learned `weight` (ones) and `bias` (zeros) of `normalized_shape` (`nn.LayerNorm`,
/// eps 1e-5).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    core: ModuleCore,
    normalized_shape: Vec<usize>,
    eps: f64,
    weight: Option<TensorSlot>,
    bias: Option<TensorSlot>,
}

impl LayerNorm {
    /// `nn.LayerNorm(normalized_shape)`: eps 1e-5, with a weight and a bias.
    pub fn new(normalized_shape: &[usize]) -> Result<Self> {
        Self::with_options(normalized_shape, 1e-5, true)
    }

    /// A layer norm with `eps`, and a weight and bias when `elementwise_affine`.
    pub fn with_options(
        normalized_shape: &[usize],
        eps: f64,
        elementwise_affine: bool,
    ) -> Result<Self> {
        Self::with_affine(
            normalized_shape,
            eps,
            elementwise_affine,
            elementwise_affine,
        )
    }

    /// `nn.LayerNorm(normalized_shape, bias=False)`: eps 1e-5 and a learned weight, no bias
    /// (the state dict holds `weight` only).
    pub fn without_bias(normalized_shape: &[usize]) -> Result<Self> {
        Self::with_affine(normalized_shape, 1e-5, true, false)
    }

    fn with_affine(normalized_shape: &[usize], eps: f64, weight: bool, bias: bool) -> Result<Self> {
        let core = ModuleCore::library("LayerNorm");
        let weight = if weight {
            let w = Tensor::ones(normalized_shape, DType::F32)?;
            Some(core.register_parameter("weight", w)?)
        } else {
            None
        };
        let bias = if bias {
            let b = Tensor::zeros(normalized_shape, DType::F32)?;
            Some(core.register_parameter("bias", b)?)
        } else {
            None
        };
        Ok(LayerNorm {
            core,
            normalized_shape: normalized_shape.to_vec(),
            eps,
            weight,
            bias,
        })
    }
}

impl Module for LayerNorm {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.weight.as_ref().map(TensorSlot::get);
        let b = self.bias.as_ref().map(TensorSlot::get);
        layer_norm(x, &self.normalized_shape, w.as_ref(), b.as_ref(), self.eps)
    }
}
