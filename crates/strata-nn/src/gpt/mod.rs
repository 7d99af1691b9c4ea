//! nanoGPT's GPT (Karpathy's `model.py`) with its module names, so that state dicts move
//! between the two: token and position embeddings, pre-norm transformer blocks of causal
//! self-attention and an MLP, a final LayerNorm and an output head tied to the token
//! embedding. As nanoGPT's `bias = False` and `dropout = 0`: no Linear or LayerNorm has a
//! bias, and nothing is dropped.
//!
//! ```
//! use strata_core::{DType, Tensor};
//! use strata_nn::gpt::{Gpt, GptConfig};
//! use strata_nn::Module;
//! let model = Gpt::new(&GptConfig { n_layer: 1, ..GptConfig::shakespeare_char(65) })?;
//! let idx = Tensor::zeros(&[2, 16], DType::I64)?; // 2 sequences of 16 tokens
//! let logits = model.call(&idx)?;
//! assert_eq!(logits.shape().as_slice(), &[2, 16, 65]);
//! # Ok::<(), strata_core::Error>(())
//! ```

mod block;
mod generate;

use std::sync::Arc;

use strata_core::autograd::SelectivePolicy;
use strata_core::{DType, Error, Result, Tensor};

pub use block::{Block, CausalSelfAttention, Mlp};
pub use generate::{KvCache, Sampling};

use crate::container::ModuleList;
use crate::init;
use crate::module::{Module, ModuleCore};
use crate::{Checkpointing, Embedding, LayerNorm, Linear};

/// The GPT's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GptConfig {
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// The longest context: positions in `wpe`.
    pub block_size: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Attention heads per block (they divide `n_embd`).
    pub n_head: usize,
    /// Width of the residual stream.
    pub n_embd: usize,
}

impl GptConfig {
    /// nanoGPT's `shakespeare_char` model as its CPU settings make it: 4 blocks of 4 heads,
    /// width 128, context 64, over a vocabulary of `vocab_size` characters.
    pub fn shakespeare_char(vocab_size: usize) -> GptConfig {
        GptConfig {
            vocab_size,
            block_size: 64,
            n_layer: 4,
            n_head: 4,
            n_embd: 128,
        }
    }

    fn check(&self) -> Result<()> {
        let zero = [
            self.vocab_size,
            self.block_size,
            self.n_layer,
            self.n_head,
            self.n_embd,
        ]
        .contains(&0);
        if zero || !self.n_embd.is_multiple_of(self.n_head) {
            return Err(Error::argument(
                "Gpt",
                format!("{self:?}: every size must be at least 1 and n_head must divide n_embd"),
                None,
            ));
        }
        Ok(())
    }
}

/// The trunk, under the key prefix `transformer.`: `wte`, `wpe`, `h.{i}`, `ln_f`.
#[derive(Debug, Clone)]
pub struct Transformer {
    core: ModuleCore,
    wte: Embedding,
    wpe: Embedding,
    h: Vec<Block>,
    list: ModuleList,
    ln_f: LayerNorm,
}

impl Transformer {
    fn new(config: &GptConfig) -> Result<Self> {
        let core = ModuleCore::library("Transformer");
        let wte = Embedding::new(config.vocab_size, config.n_embd, None)?;
        let wpe = Embedding::new(config.block_size, config.n_embd, None)?;
        let h = (0..config.n_layer)
            .map(|_| Block::new(config))
            .collect::<Result<Vec<_>>>()?;
        let ln_f = LayerNorm::without_bias(&[config.n_embd])?;
        let list = ModuleList::new();
        for block in &h {
            list.push(Arc::new(block.clone()))?;
        }
        core.register_module("wte", &wte)?;
        core.register_module("wpe", &wpe)?;
        core.register_module("h", &list)?;
        core.register_module("ln_f", &ln_f)?;
        Ok(Transformer {
            core,
            wte,
            wpe,
            h,
            list,
            ln_f,
        })
    }

    /// Token plus position embeddings of `idx` `[B, T]`, the positions starting at `start`.
    fn embed(&self, idx: &Tensor, start: usize) -> Result<Tensor> {
        let t = idx.shape()[1];
        let pos = Tensor::on(idx.device()).arange(start as i64..(start + t) as i64, DType::I64)?;
        self.wte.call(idx)?.add(&self.wpe.call(&pos)?)
    }

    /// The final hidden states `[B, T, C]` of `idx`, each block checkpointed as asked.
    fn hidden(&self, idx: &Tensor, checkpointing: &Checkpointing) -> Result<Tensor> {
        let x = self.embed(idx, 0)?;
        // The blocks run in the list's scope, so memory is reported under `h.{i}`.
        let x = self.list.core().scoped(|| self.blocks(x, checkpointing))?;
        self.ln_f.call(&x)
    }

    fn blocks(&self, mut x: Tensor, checkpointing: &Checkpointing) -> Result<Tensor> {
        for block in &self.h {
            let block = block.clone();
            x = checkpointing.run("Gpt", move |x: &Tensor| block.call(x), x)?;
        }
        Ok(x)
    }
}

impl Module for Transformer {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    /// The final hidden states `[B, T, C]` of the tokens `idx` `[B, T]`.
    fn forward(&self, idx: &Tensor) -> Result<Tensor> {
        self.hidden(idx, &Checkpointing::Off)
    }
}

/// nanoGPT's GPT: `transformer` and `lm_head`, whose weight is `transformer.wte.weight`.
/// Weights are initialised as nanoGPT does: N(0, 0.02) for every Linear and Embedding, then
/// N(0, 0.02/√(2·n_layer)) for the `c_proj` weights, LayerNorm weights 1.
#[derive(Debug, Clone)]
pub struct Gpt {
    core: ModuleCore,
    config: GptConfig,
    transformer: Transformer,
    lm_head: Linear,
}

impl Gpt {
    /// A GPT of `config`'s sizes, initialised from the global generator.
    pub fn new(config: &GptConfig) -> Result<Self> {
        config.check()?;
        let core = ModuleCore::library("GPT");
        let transformer = Transformer::new(config)?;
        let lm_head = Linear::tied(transformer.wte.weight_slot())?;
        core.register_module("transformer", &transformer)?;
        core.register_module("lm_head", &lm_head)?;
        let gpt = Gpt {
            core,
            config: *config,
            transformer,
            lm_head,
        };
        gpt.initialise()?;
        Ok(gpt)
    }

    fn initialise(&self) -> Result<()> {
        let residual_std = 0.02 / ((2 * self.config.n_layer) as f64).sqrt();
        for (name, p) in self.named_parameters() {
            if p.dim() < 2 {
                continue; // LayerNorm weights stay 1.
            }
            let std = if name.ends_with("c_proj.weight") {
                residual_std
            } else {
                0.02
            };
            init::normal_(&p, 0.0, std, None)?;
        }
        Ok(())
    }

    /// The sizes it was built with.
    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    /// The logits `[B, T, vocab]` of the tokens `idx` `[B, T]`, each transformer block
    /// checkpointed as `checkpointing` says: not at all, fully (only its input is kept; its
    /// activations are recomputed in backward) or selectively (for instance with
    /// [`Gpt::selective_policy`]).
    #[track_caller]
    pub fn logits(&self, idx: &Tensor, checkpointing: &Checkpointing) -> Result<Tensor> {
        let at = std::panic::Location::caller();
        self.core.called_at(at, || self.run(idx, checkpointing))
    }

    /// Selective checkpointing's policy for the blocks: keep the outputs of the products
    /// (`linear`) and of the fused attention (its output and each row's log-sum-exp),
    /// recompute the pointwise ops (layer norms, GELU, residual additions).
    pub fn selective_policy() -> SelectivePolicy {
        SelectivePolicy::saving(&["linear", "_scaled_dot_product_flash_attention_for_cpu"])
    }

    fn run(&self, idx: &Tensor, checkpointing: &Checkpointing) -> Result<Tensor> {
        let shape = idx.shape();
        if shape.len() != 2 || shape[1] == 0 || idx.dtype().is_floating() {
            return Err(Error::argument(
                "Gpt",
                format!(
                    "the input is [batch, time] token indices, not {} {:?}",
                    idx.dtype().name(),
                    shape.as_slice()
                ),
                None,
            ));
        }
        if shape[1] > self.config.block_size {
            return Err(Error::argument(
                "Gpt",
                format!(
                    "a sequence of {} tokens is longer than the context of {}",
                    shape[1], self.config.block_size
                ),
                Some("crop it to its last block_size tokens"),
            ));
        }
        let h = self
            .transformer
            .core()
            .scoped(|| self.transformer.hidden(idx, checkpointing))?;
        self.lm_head.call(&h)
    }
}

impl Module for Gpt {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    /// The logits `[B, T, vocab]` of the tokens `idx` `[B, T]`.
    fn forward(&self, idx: &Tensor) -> Result<Tensor> {
        self.run(idx, &Checkpointing::Off)
    }
}
