//! One time step of each recurrent cell, given the input's projection for that step
//! (`x_t W_ihᵀ + b_ih`, computed for all steps at once) and the previous state.

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

/// LSTM, gates in PyTorch's order i, f, g, o: `c' = f c + i g`, `h' = o tanh(c')`.
pub(crate) fn lstm_step(
    gx: &Tensor,
    h: &Tensor,
    c: &Tensor,
    w: &LayerWeights,
) -> Result<(Tensor, Tensor)> {
    let gates = gx.add(&w.hidden(h)?)?.chunk(4, 1)?;
    let i = gates[0].sigmoid()?;
    let f = gates[1].sigmoid()?;
    let g = gates[2].tanh()?;
    let o = gates[3].sigmoid()?;
    let c = f.mul(c)?.add(&i.mul(&g)?)?;
    let h = o.mul(&c.tanh()?)?;
    Ok((h, c))
}

/// GRU, gates in PyTorch's order r, z, n: `n = tanh(x_n + r (h W_hn + b_hn))`,
/// `h' = (1 − z) n + z h`.
pub(crate) fn gru_step(gx: &Tensor, h: &Tensor, w: &LayerWeights) -> Result<Tensor> {
    let gi = gx.chunk(3, 1)?;
    let gh = w.hidden(h)?.chunk(3, 1)?;
    let r = gi[0].add(&gh[0])?.sigmoid()?;
    let z = gi[1].add(&gh[1])?.sigmoid()?;
    let n = gi[2].add(&r.mul(&gh[2])?)?.tanh()?;
    // (1 - z) n + z h = n + z (h - n)
    n.add(&z.mul(&h.sub(&n)?)?)
}
