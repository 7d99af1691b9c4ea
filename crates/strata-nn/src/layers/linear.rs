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

    /// A layer without a bias whose weight is the one `weight` holds, registered under this
    /// layer's name too (weight tying, as nanoGPT's `lm_head.weight = wte.weight`): both
    /// names appear in the state dict, the parameter once in `parameters()`, and loading
    /// either name sets both.
    pub fn tied(weight: &TensorSlot) -> Result<Self> {
        let w = weight.get();
        let [out_features, in_features] = w.shape()[..] else {
            return Err(strata_core::Error::argument(
                "Linear::tied",
                format!("a linear weight is 2-d, this one has shape {:?}", w.shape()),
                Some("tie to an embedding table or another layer's weight"),
            ));
        };
        let core = ModuleCore::library("Linear");
        core.register_parameter_slot("weight", weight)?;
        Ok(Linear {
            core,
            weight: weight.clone(),
            bias: None,
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
