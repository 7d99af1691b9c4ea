//! Fans and gains: how the initialisers scale to a tensor's shape and the nonlinearity that
//! follows it (PyTorch's `_calculate_fan_in_and_fan_out` and `calculate_gain`).

use strata_core::{Error, Result, Tensor};

/// Which fan scales an initialiser: `FanIn` keeps the forward pass's variance, `FanOut`
/// the backward pass's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FanMode {
    /// The inputs per output (`size(1) * receptive field`).
    #[default]
    FanIn,
    /// The outputs per input (`size(0) * receptive field`).
    FanOut,
}

/// The nonlinearity after a layer, for [`calculate_gain`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Nonlinearity {
    /// Identity, convolutions, sigmoid: gain 1.
    Linear,
    /// Sigmoid: gain 1.
    Sigmoid,
    /// Tanh: gain 5/3.
    Tanh,
    /// ReLU: gain √2.
    Relu,
    /// Leaky ReLU with this negative slope: gain √(2 / (1 + slope²)).
    LeakyRelu(f64),
    /// SELU: gain 3/4.
    Selu,
}

/// The recommended gain for `nonlinearity` (PyTorch's `calculate_gain`).
pub fn calculate_gain(nonlinearity: Nonlinearity) -> f64 {
    match nonlinearity {
        Nonlinearity::Linear | Nonlinearity::Sigmoid => 1.0,
        Nonlinearity::Tanh => 5.0 / 3.0,
        Nonlinearity::Relu => 2f64.sqrt(),
        Nonlinearity::LeakyRelu(slope) => (2.0 / (1.0 + slope * slope)).sqrt(),
        Nonlinearity::Selu => 0.75,
    }
}

/// `(fan_in, fan_out)` of a weight of at least two dimensions: `size(1)` and `size(0)`, each
/// times the receptive field (the product of the remaining sizes).
pub fn calculate_fan_in_and_fan_out(t: &Tensor) -> Result<(usize, usize)> {
    let shape = t.shape();
    if shape.len() < 2 {
        return Err(Error::argument(
            "init",
            format!(
                "fan in and fan out need a tensor of at least 2 dimensions, got shape {:?}",
                shape.as_slice()
            ),
            Some("use uniform_ or normal_ with explicit bounds for vectors"),
        ));
    }
    let receptive: usize = shape[2..].iter().product();
    Ok((shape[1] * receptive, shape[0] * receptive))
}

/// The fan `mode` selects.
pub(crate) fn fan(t: &Tensor, mode: FanMode) -> Result<usize> {
    let (fan_in, fan_out) = calculate_fan_in_and_fan_out(t)?;
    Ok(match mode {
        FanMode::FanIn => fan_in,
        FanMode::FanOut => fan_out,
    })
}
