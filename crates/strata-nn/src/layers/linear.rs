//! `Linear`: `y = x Wᵀ + b`.

use strata_core::nn::functional::linear;
use strata_core::{DType, Result, Tensor};

use super::defaults;
use crate::module::{Module, ModuleCore, TensorSlot};

/// A fully connected layer (`nn.Linear`): weight `[out_features, in_features]`, optional bias
/// `[out_features]`, both U(±1/√in_features) as PyTorch initialises them.
#[derive(Debug, Clone)]
pub struct Linear {
    core: ModuleCore,
    weight: TensorSlot,
    bias: Option<TensorSlot>,
    in_features: usize,
    out_features: usize,
}

impl Linear {
    /// A layer mapping `in_features` to `out_features`, with a bias when `bias`.
    pub fn new(in_features: usize, out_features: usize, bias: bool) -> Result<Self> {
        let core = ModuleCore::library("Linear");
        let w = Tensor::zeros(&[out_features, in_features], DType::F32)?;
        defaults::kaiming_weight(&w)?;
        let weight = core.register_parameter("weight", w)?;
        let bias = if bias {
            let b = Tensor::zeros(&[out_features], DType::F32)?;
            defaults::fan_in_bias(&b, in_features)?;
            Some(core.register_parameter("bias", b)?)
        } else {
            None
        };
        Ok(Linear {
            core,
            weight,
            bias,
            in_features,
            out_features,
        })
    }

    /// The weight, `[out_features, in_features]`.
    pub fn weight(&self) -> Tensor {
        self.weight.get()
    }

    /// The bias, when the layer has one.
    pub fn bias(&self) -> Option<Tensor> {
        self.bias.as_ref().map(TensorSlot::get)
    }

    /// The input width.
    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// The output width.
    pub fn out_features(&self) -> usize {
        self.out_features
    }
}

impl Module for Linear {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        linear(x, &self.weight(), self.bias().as_ref())
    }
}
