//! The models `strata train` builds, with PyTorch's module layout so that their state dicts
//! are interchangeable with PyTorch's (the gpt's with nanoGPT's).

use std::sync::Arc;

use strata::core::autograd::checkpoint;
use strata::core::nn::functional::Pair;
use strata::core::{Error, Result, Tensor};
use strata::nn::gpt::{Gpt, GptConfig};
use strata::nn::module::shared;
use strata::nn::{
    BatchNorm2d, Checkpointing, Conv2d, Conv2dConfig, Flatten, Linear, MaxPool2d, Module,
    ModuleCore, ReLU, RnnConfig, Sequential, LSTM,
};

/// Which activations a checkpointed step keeps (`--checkpoint-activations [full|selective]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckpointMode {
    /// Each region keeps only its inputs; everything else is recomputed in backward.
    Full,
    /// Each region also keeps the outputs of the ops its model's policy saves (the gpt:
    /// the products and the attention's output and log-sum-exp) and recomputes the
    /// pointwise ops. Only the gpt has a policy.
    Selective,
}

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
    /// nanoGPT's character-level GPT on the Shakespeare corpus: 4 blocks of 4 heads, width
    /// 128, context 64, trained by steps.
    Gpt,
}

impl ModelKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Mlp => "mlp",
            ModelKind::Cnn => "cnn",
            ModelKind::Lstm => "lstm",
            ModelKind::Gpt => "gpt",
        }
    }

    /// True for the models trained by steps on text (`--steps`), false for the Fashion-MNIST
    /// classifiers trained by epochs.
    pub fn is_language_model(self) -> bool {
        self == ModelKind::Gpt
    }

    /// The batch size of the model's recipe: 128 images, or nanoGPT's 12 windows.
    pub fn default_batch_size(self) -> usize {
        if self.is_language_model() {
            12
        } else {
            128
        }
    }
}

/// The text a language model is built for: its vocabulary size (the gpt's embedding and
/// head have a row per character).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vocabulary(pub usize);

/// A model `strata train` runs: the module, and how its forward is split into
/// checkpointed regions when activation checkpointing is on.
#[derive(Clone)]
pub struct Model {
    module: Arc<dyn Module>,
    lstm: Option<Arc<LstmClassifier>>,
    gpt: Option<Gpt>,
    checkpointing: Checkpointing,
}

/// Time steps per checkpointed segment of the lstm.
pub const LSTM_SEGMENT: usize = 7;

impl Model {
    /// Builds the classifier `kind` with fresh weights; checkpointed (`Full`), its forward
    /// keeps only the inputs of each region (mlp: children 1 to 4; cnn: each block of conv,
    /// BatchNorm, ReLU and pool; lstm: segments of 7 time steps) and recomputes the rest in
    /// backward. `Selective` is an `Err`: the classifiers have no policy. The gpt needs its
    /// vocabulary: build it with [`Model::language_model`].
    pub fn build(kind: ModelKind, checkpoint: Option<CheckpointMode>) -> Result<Model> {
        let checkpointing = match checkpoint {
            None => Checkpointing::Off,
            Some(CheckpointMode::Full) => Checkpointing::Full,
            Some(CheckpointMode::Selective) => return Err(no_selective_policy(kind)),
        };
        let (module, lstm) = match kind {
            ModelKind::Lstm => {
                let l = Arc::new(LstmClassifier::new()?);
                (l.clone() as Arc<dyn Module>, Some(l))
            }
            _ => (build(kind)?, None),
        };
        Ok(Model {
            module,
            lstm,
            gpt: None,
            checkpointing,
        })
    }

    /// The gpt over `vocabulary`, each transformer block checkpointed as `checkpoint` says
    /// (selectively with [`Gpt::selective_policy`]).
    pub fn language_model(
        vocabulary: Vocabulary,
        checkpoint: Option<CheckpointMode>,
    ) -> Result<Model> {
        let g = gpt(vocabulary)?;
        let checkpointing = match checkpoint {
            None => Checkpointing::Off,
            Some(CheckpointMode::Full) => Checkpointing::Full,
            Some(CheckpointMode::Selective) => Checkpointing::Selective(Gpt::selective_policy()),
        };
        Ok(Model {
            module: shared(g.clone()),
            lstm: None,
            gpt: Some(g),
            checkpointing,
        })
    }

    /// The module (parameters, buffers, state dict).
    pub fn module(&self) -> &Arc<dyn Module> {
        &self.module
    }

    /// The gpt, when this is one.
    pub fn gpt(&self) -> Option<&Gpt> {
        self.gpt.as_ref()
    }

    /// The forward pass, checkpointed when the model was built so (and grad mode is on).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if let Some(gpt) = &self.gpt {
            return gpt.logits(x, &self.checkpointing);
        }
        if matches!(self.checkpointing, Checkpointing::Off) {
            return self.module.call(x);
        }
        if let Some(lstm) = &self.lstm {
            return lstm.core.scoped(|| lstm.forward_in_segments(x));
        }
        let children: Vec<Arc<dyn Module>> = self
            .module
            .core()
            .children()
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        // mlp: [Flatten] (1..5 in one region) [Linear]; cnn: (0..4) (4..8) [Flatten, Linear].
        let regions: &[(usize, usize)] = if children.len() == 6 {
            &[(1, 5)]
        } else {
            &[(0, 4), (4, 8)]
        };
        self.module.core().scoped(|| {
            let mut h = x.clone();
            let mut next = 0;
            for &(start, end) in regions {
                h = chain(&children[next..start], &h)?;
                let part: Vec<Arc<dyn Module>> = children[start..end].to_vec();
                h = self
                    .checkpointing
                    .run("checkpoint", move |x: &Tensor| chain(&part, x), h)?;
                next = end;
            }
            chain(&children[next..], &h)
        })
    }
}

/// Runs `modules` in order, dropping each intermediate once the next has returned.
fn chain(modules: &[Arc<dyn Module>], x: &Tensor) -> Result<Tensor> {
    let mut h = x.clone();
    for m in modules {
        h = m.call(&h)?;
    }
    Ok(h)
}

/// The error for selective checkpointing of a classifier, which has no policy.
fn no_selective_policy(kind: ModelKind) -> Error {
    Error::argument(
        "Model::build",
        format!(
            "selective checkpointing needs a policy, and the {} has none",
            kind.name()
        ),
        Some("checkpoint it fully, or use checkpoint_selective with a SelectivePolicy"),
    )
}

/// nanoGPT's `shakespeare_char` model over `vocabulary`, fresh weights.
fn gpt(vocabulary: Vocabulary) -> Result<Gpt> {
    Gpt::new(&GptConfig::shakespeare_char(vocabulary.0))
}

/// Builds the classifier `kind` with fresh weights (from the global generator); the gpt
/// needs its vocabulary ([`Model::language_model`]).
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
        ModelKind::Gpt => {
            return Err(Error::argument(
                "strata train",
                "the gpt is built for its text's vocabulary",
                Some("build it with Model::language_model"),
            ))
        }
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

impl LstmClassifier {
    /// The forward with the sequence cut into checkpointed segments of
    /// [`LSTM_SEGMENT`] steps: each keeps its input rows and the state it starts from, and
    /// its gates are recomputed in backward. The state carried between segments is the
    /// graph's link between them.
    fn forward_in_segments(&self, x: &Tensor) -> Result<Tensor> {
        let b = x.shape()[0] as i64;
        let rows = x.reshape(&[b, 28, 28])?;
        let mut state: Option<(Tensor, Tensor)> = None;
        for start in (0..28).step_by(LSTM_SEGMENT) {
            let len = LSTM_SEGMENT.min(28 - start);
            let seg = rows.narrow(1, start as i64, len)?;
            let lstm = self.lstm.clone();
            let mut inputs = vec![seg];
            if let Some((h, c)) = state.take() {
                inputs.extend([h, c]);
            }
            let out = checkpoint(
                move |t: &[Tensor]| {
                    let carried = (t.len() == 3).then(|| (&t[1], &t[2]));
                    let (_, (h, c)) = lstm.call_with(&t[0], carried)?;
                    Ok(vec![h, c])
                },
                &inputs,
            )?;
            let mut out = out.into_iter();
            match (out.next(), out.next()) {
                (Some(h), Some(c)) => state = Some((h, c)),
                _ => {
                    return Err(Error::Unsupported {
                        op: "checkpoint",
                        message: "an lstm segment returned no state".into(),
                    })
                }
            }
        }
        let (h, _) = state.ok_or_else(|| Error::Unsupported {
            op: "LstmClassifier",
            message: "no time steps".into(),
        })?;
        // One layer: h_n[0] is the output at the last time step.
        self.head.call(&h.select(0, 0)?)
    }
}
