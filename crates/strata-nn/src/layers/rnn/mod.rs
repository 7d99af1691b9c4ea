//! Recurrent layers: `RNN` (tanh), `LSTM` and `GRU`, with PyTorch's parameter names
//! (`weight_ih_l0`, `weight_hh_l0`, `bias_ih_l0`, `bias_hh_l0`, ...), gate order (i, f, g, o
//! for the LSTM; r, z, n for the GRU), shapes (`[T, N, I]`, or `[N, T, I]` with
//! `batch_first`, or unbatched `[T, I]`) and initialisation (everything U(±1/√hidden)).

mod cells;

use strata_core::nn::functional::{gru_layer, linear, lstm_layer};
use strata_core::{DType, Error, Result, Tensor};

use crate::init;
use crate::module::{Module, ModuleCore, TensorSlot};
use cells::LayerWeights;

/// The settings shared by the recurrent layers; PyTorch's defaults are one layer, biases,
/// and time-major input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnnConfig {
    /// Stacked layers, each running on the previous one's outputs.
    pub num_layers: usize,
    /// Whether each layer has `bias_ih` and `bias_hh`.
    pub bias: bool,
    /// Inputs and outputs are `[N, T, features]` instead of `[T, N, features]`.
    pub batch_first: bool,
}

impl Default for RnnConfig {
    fn default() -> Self {
        RnnConfig {
            num_layers: 1,
            bias: true,
            batch_first: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tanh,
    Lstm,
    Gru,
}

impl Kind {
    fn gates(self) -> usize {
        match self {
            Kind::Tanh => 1,
            Kind::Lstm => 4,
            Kind::Gru => 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Tanh => "RNN",
            Kind::Lstm => "LSTM",
            Kind::Gru => "GRU",
        }
    }
}

#[derive(Debug, Clone)]
struct Layer {
    w_ih: TensorSlot,
    w_hh: TensorSlot,
    b_ih: Option<TensorSlot>,
    b_hh: Option<TensorSlot>,
}

/// What the three layers share: the registry, the weights, and the loop over time.
#[derive(Debug, Clone)]
struct Recurrent {
    core: ModuleCore,
    kind: Kind,
    input_size: usize,
    hidden_size: usize,
    config: RnnConfig,
    layers: Vec<Layer>,
}

/// The final states a run returns.
struct Finals {
    h: Tensor,
    c: Option<Tensor>,
}

impl Recurrent {
    fn new(kind: Kind, input_size: usize, hidden_size: usize, config: RnnConfig) -> Result<Self> {
        if config.num_layers == 0 || hidden_size == 0 {
            return Err(Error::argument(
                kind.name(),
                "num_layers and hidden_size must be positive",
                None,
            ));
        }
        let core = ModuleCore::library(kind.name());
        let g = kind.gates() * hidden_size;
        let bound = 1.0 / (hidden_size as f64).sqrt();
        let param = |name: String, shape: &[usize]| -> Result<TensorSlot> {
            let t = Tensor::zeros(shape, DType::F32)?;
            init::uniform_(&t, -bound, bound, None)?;
            core.register_parameter(&name, t)
        };
        let mut layers = Vec::with_capacity(config.num_layers);
        for l in 0..config.num_layers {
            let inp = if l == 0 { input_size } else { hidden_size };
            let w_ih = param(format!("weight_ih_l{l}"), &[g, inp])?;
            let w_hh = param(format!("weight_hh_l{l}"), &[g, hidden_size])?;
            let (b_ih, b_hh) = if config.bias {
                (
                    Some(param(format!("bias_ih_l{l}"), &[g])?),
                    Some(param(format!("bias_hh_l{l}"), &[g])?),
                )
            } else {
                (None, None)
            };
            layers.push(Layer {
                w_ih,
                w_hh,
                b_ih,
                b_hh,
            });
        }
        Ok(Recurrent {
            core,
            kind,
            input_size,
            hidden_size,
            config,
            layers,
        })
    }

    /// A state given by the caller as `[L, N, H]` (or `[L, H]` unbatched), or zeros.
    fn initial(
        &self,
        given: Option<&Tensor>,
        x: &Tensor,
        batched: bool,
        n: usize,
        what: &str,
    ) -> Result<Tensor> {
        let want = [self.config.num_layers, n, self.hidden_size];
        let Some(s) = given else {
            return Tensor::on(x.device()).zeros(&want, x.dtype());
        };
        let s = if batched { s.clone() } else { s.unsqueeze(1)? };
        if s.shape().as_slice() != want {
            return Err(Error::shape(
                self.kind.name(),
                format!(
                    "{what} must be [num_layers, batch, hidden] = {want:?}, got {:?}",
                    given.map(|g| g.shape().to_vec()).unwrap_or_default()
                ),
                vec![s.shape().to_vec()],
            ));
        }
        Ok(s)
    }

    fn run(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
    ) -> Result<(Tensor, Finals)> {
        let name = self.kind.name();
        let batched = match x.dim() {
            3 => true,
            2 => false,
            d => {
                return Err(Error::shape(
                    name,
                    format!("expected a 2-d (unbatched) or 3-d input, got {d} dimensions"),
                    vec![x.shape().to_vec()],
                ))
            }
        };
        let mut seq = if !batched {
            x.unsqueeze(1)?
        } else if self.config.batch_first {
            x.transpose(0, 1)?
        } else {
            x.clone()
        };
        let shape = seq.shape();
        if shape[2] != self.input_size {
            return Err(Error::shape(
                name,
                format!(
                    "expected {} input features, got {}",
                    self.input_size, shape[2]
                ),
                vec![x.shape().to_vec()],
            ));
        }
        let (steps, n) = (shape[0], shape[1]);
        let h0 = self.initial(h0, x, batched, n, "h0")?;
        let c0 = match self.kind {
            Kind::Lstm => Some(self.initial(c0, x, batched, n, "c0")?),
            _ => None,
        };
        let (mut hs, mut cs) = (Vec::new(), Vec::new());
        for (l, layer) in self.layers.iter().enumerate() {
            let (w_ih, w_hh) = (layer.w_ih.get(), layer.w_hh.get());
            let b_ih = layer.b_ih.as_ref().map(TensorSlot::get);
            let b_hh = layer.b_hh.as_ref().map(TensorSlot::get);
            let h = h0.select(0, l as i64)?;
            // The LSTM and GRU run the whole sequence as one layer: fused on the CPU, steps
            // of cells elsewhere.
            match (self.kind, &c0) {
                (Kind::Lstm, Some(c0)) => {
                    let c = c0.select(0, l as i64)?;
                    let (out, h_n, c_n) =
                        lstm_layer(&seq, &h, &c, &w_ih, &w_hh, b_ih.as_ref(), b_hh.as_ref())?;
                    seq = out;
                    hs.push(h_n);
                    cs.push(c_n);
                    continue;
                }
                (Kind::Gru, _) => {
                    let (out, h_n) =
                        gru_layer(&seq, &h, &w_ih, &w_hh, b_ih.as_ref(), b_hh.as_ref())?;
                    seq = out;
                    hs.push(h_n);
                    continue;
                }
                _ => {}
            }
            // The Elman cell projects every step's input at once, then steps.
            let gx_all = linear(&seq, &w_ih, b_ih.as_ref())?;
            let w = LayerWeights {
                w_hh: w_hh.clone(),
                b_hh: b_hh.clone(),
            };
            let mut h = h;
            let mut outs = Vec::with_capacity(steps);
            for t in 0..steps {
                h = cells::tanh_step(&gx_all.select(0, t as i64)?, &h, &w)?;
                outs.push(h.clone());
            }
            seq = if outs.is_empty() {
                Tensor::on(x.device()).zeros(&[0, n, self.hidden_size], x.dtype())?
            } else {
                Tensor::stack(&outs.iter().collect::<Vec<_>>(), 0)?
            };
            hs.push(h);
        }
        let finish = |t: Tensor| {
            if batched {
                Ok(t)
            } else {
                t.squeeze(Some(&[1]))
            }
        };
        let out = if !batched {
            seq.squeeze(Some(&[1]))?
        } else if self.config.batch_first {
            seq.transpose(0, 1)?
        } else {
            seq
        };
        let h = finish(Tensor::stack(&hs.iter().collect::<Vec<_>>(), 0)?)?;
        let c = if cs.is_empty() {
            None
        } else {
            Some(finish(Tensor::stack(&cs.iter().collect::<Vec<_>>(), 0)?)?)
        };
        Ok((out, Finals { h, c }))
    }
}

macro_rules! recurrent_layer {
    ($name:ident, $kind:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone)]
        pub struct $name(Recurrent);

        impl $name {
            #[doc = concat!("A one-layer `", stringify!($name), "` with biases, time-major.")]
            pub fn new(input_size: usize, hidden_size: usize) -> Result<Self> {
                Self::with_config(input_size, hidden_size, RnnConfig::default())
            }

            /// A layer with the given settings.
            pub fn with_config(
                input_size: usize,
                hidden_size: usize,
                config: RnnConfig,
            ) -> Result<Self> {
                Recurrent::new($kind, input_size, hidden_size, config).map($name)
            }

            /// The hidden size.
            pub fn hidden_size(&self) -> usize {
                self.0.hidden_size
            }
        }
    };
}

recurrent_layer!(RNN, Kind::Tanh, "An Elman RNN with tanh (`nn.RNN`).");
recurrent_layer!(
    LSTM,
    Kind::Lstm,
    "A long short-term memory layer (`nn.LSTM`)."
);
recurrent_layer!(GRU, Kind::Gru, "A gated recurrent unit layer (`nn.GRU`).");

impl RNN {
    /// Runs on `x` from `h0` (zeros when `None`) and returns `(output, h_n)`, in the
    /// module's scope.
    pub fn call_with(&self, x: &Tensor, h0: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        self.0
            .core
            .scoped(|| self.0.run(x, h0, None).map(|(o, f)| (o, f.h)))
    }
}

impl GRU {
    /// Runs on `x` from `h0` (zeros when `None`) and returns `(output, h_n)`, in the
    /// module's scope.
    pub fn call_with(&self, x: &Tensor, h0: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        self.0
            .core
            .scoped(|| self.0.run(x, h0, None).map(|(o, f)| (o, f.h)))
    }
}

impl LSTM {
    /// Runs on `x` from `(h0, c0)` (zeros when `None`) and returns `(output, (h_n, c_n))`, in
    /// the module's scope.
    pub fn call_with(
        &self,
        x: &Tensor,
        state: Option<(&Tensor, &Tensor)>,
    ) -> Result<(Tensor, (Tensor, Tensor))> {
        let (h0, c0) = match state {
            Some((h, c)) => (Some(h), Some(c)),
            None => (None, None),
        };
        self.0.core.scoped(|| {
            let (out, f) = self.0.run(x, h0, c0)?;
            let c = f.c.ok_or_else(|| Error::Unsupported {
                op: "LSTM",
                message: "the cell state went missing".into(),
            })?;
            Ok((out, (f.h, c)))
        })
    }
}

macro_rules! module_impl {
    ($($name:ident),*) => {
        $(
            impl Module for $name {
                fn core(&self) -> &ModuleCore {
                    &self.0.core
                }

                /// The output sequence from zero states (use `call_with` for the final
                /// states or to pass initial ones).
                fn forward(&self, x: &Tensor) -> Result<Tensor> {
                    self.0.run(x, None, None).map(|(o, _)| o)
                }
            }
        )*
    };
}

module_impl!(RNN, LSTM, GRU);

#[cfg(test)]
mod tests;
