//! The three models `strata train` builds, with PyTorch's module layout so that their state
//! dicts are interchangeable with PyTorch's.

use std::sync::Arc;

use strata::core::nn::functional::Pair;
use strata::core::{Result, Tensor};
use strata::nn::module::shared;
use strata::nn::{
    BatchNorm2d, Conv2d, Conv2dConfig, Flatten, Linear, MaxPool2d, Module, ModuleCore, ReLU,
    RnnConfig, Sequential, LSTM,
};

/// Which model to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelKind {
    /// Flatten, Linear(784,1024), ReLU, Linear(1024,1024), ReLU, Linear(1024,10).
    Mlp,
    /// Two blocks of Conv2d(3×3, padding 1), BatchNorm2d, ReLU, MaxPool2d(2), then
    /// Flatten and Linear(3136,10).
    Cnn,
    /// Each image as 28 rows of 28 features: LSTM(28,128), batch first, its last output
    /// into Linear(128,10).
    Lstm,
}

impl ModelKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Mlp => "mlp",
            ModelKind::Cnn => "cnn",
            ModelKind::Lstm => "lstm",
        }
    }
}

/// Builds `kind` with fresh weights (from the global generator).
pub fn build(kind: ModelKind) -> Result<Arc<dyn Module>> {
    Ok(match kind {
        ModelKind::Mlp => {
            let m = Sequential::new();
            m.push(shared(Flatten::new()))?;
            m.push(shared(Linear::new(784, 1024, true)?))?;
            m.push(shared(ReLU::new()))?;
            m.push(shared(Linear::new(1024, 1024, true)?))?;
            m.push(shared(ReLU::new()))?;
            m.push(shared(Linear::new(1024, 10, true)?))?;
            shared(m)
        }
        ModelKind::Cnn => {
            let m = Sequential::new();
            for (cin, cout) in [(1, 32), (32, 64)] {
                let config = Conv2dConfig {
                    padding: Pair(1, 1),
                    ..Conv2dConfig::default()
                };
                m.push(shared(Conv2d::with_config(cin, cout, 3, config)?))?;
                m.push(shared(BatchNorm2d::new(cout)?))?;
                m.push(shared(ReLU::new()))?;
                m.push(shared(MaxPool2d::new(2)))?;
            }
            m.push(shared(Flatten::new()))?;
            m.push(shared(Linear::new(3136, 10, true)?))?;
            shared(m)
        }
        ModelKind::Lstm => shared(LstmClassifier::new()?),
    })
}

/// The LSTM classifier: keys `lstm.*` and `head.*`.
#[derive(Clone)]
pub struct LstmClassifier {
    core: ModuleCore,
    lstm: LSTM,
    head: Linear,
}

impl LstmClassifier {
    fn new() -> Result<Self> {
        let core = ModuleCore::new("LstmClassifier");
        let config = RnnConfig {
            batch_first: true,
            ..RnnConfig::default()
        };
        let lstm = LSTM::with_config(28, 128, config)?;
        let head = Linear::new(128, 10, true)?;
        core.register_module("lstm", &lstm)?;
        core.register_module("head", &head)?;
        Ok(LstmClassifier { core, lstm, head })
    }
}

impl Module for LstmClassifier {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let b = x.shape()[0] as i64;
        let rows = x.reshape(&[b, 28, 28])?;
        let out = self.lstm.call(&rows)?; // [b, 28, 128]
        self.head.call(&out.select(1, 27)?)
    }
}
