//! PyTorch's default initialisation of each layer's parameters.

use strata_core::{Result, Tensor};

use crate::init::{self, FanMode, Nonlinearity};

/// `kaiming_uniform_(w, a=√5)`: U(±1/√fan_in), the default of linear and convolution
/// weights.
pub(crate) fn kaiming_weight(w: &Tensor) -> Result<()> {
    let a = 5f64.sqrt();
    init::kaiming_uniform_(w, a, FanMode::FanIn, Nonlinearity::LeakyRelu(a), None)
}

/// U(±1/√fan_in), the default of linear and convolution biases (zeros when the fan is 0).
pub(crate) fn fan_in_bias(b: &Tensor, fan_in: usize) -> Result<()> {
    let bound = if fan_in > 0 {
        1.0 / (fan_in as f64).sqrt()
    } else {
        0.0
    };
    init::uniform_(b, -bound, bound, None)
}
