//! One time step of the Elman cell, given the input's projection for that step
//! (`x_t W_ihᵀ + b_ih`, computed for all steps at once) and the previous state. The LSTM and
//! GRU layers are core's `lstm_layer` and `gru_layer`.

use strata_core::nn::functional::linear;
use strata_core::{Result, Tensor};

/// The weights of one layer.
pub(crate) struct LayerWeights {
    pub w_hh: Tensor,
    pub b_hh: Option<Tensor>,
}

impl LayerWeights {
    fn hidden(&self, h: &Tensor) -> Result<Tensor> {
        linear(h, &self.w_hh, self.b_hh.as_ref())
    }
}

/// Elman RNN: `h' = tanh(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)`.
pub(crate) fn tanh_step(gx: &Tensor, h: &Tensor, w: &LayerWeights) -> Result<Tensor> {
    gx.add(&w.hidden(h)?)?.tanh()
}
