//! `strata sample`: text from a trained gpt, generated with a key/value cache, and the
//! memory generation takes (the cache, and the peak on an allocator of its own), which
//! `strata plan --sample N` predicts on the meta device.

use std::path::PathBuf;

use serde::Serialize;
use strata::core::device::DefaultDevice;
use strata::core::{DType, Device, Generator};
use strata::nn::gpt::{KvCache, Sampling};

use super::measure::measure_on_fresh;
use super::models::{Model, ModelKind};
use super::text::{default_data_dir, Text};
use super::{load_weights, Result, TrainError};

/// What `strata sample` generates.
#[derive(Debug, Clone)]
pub struct SampleOptions {
    /// The corpus directory the model was trained on (its vocabulary).
    pub data_dir: PathBuf,
    /// The trained weights (safetensors, nanoGPT's keys); not read on meta.
    pub load: Option<PathBuf>,
    /// The text generation starts from (characters of the vocabulary).
    pub prompt: String,
    /// Tokens to generate after the prompt.
    pub tokens: usize,
    /// Divides the logits before the softmax.
    pub temperature: f64,
    /// Only the `top_k` most likely tokens can be drawn.
    pub top_k: Option<usize>,
    /// Seed of the draws.
    pub seed: u64,
    /// `Device::Cpu`, or `Device::Meta`: the memory of the generation without computing.
    pub device: Device,
}

impl Default for SampleOptions {
    /// nanoGPT's `sample.py` defaults: a newline as the prompt, temperature 0.8, top 200.
    fn default() -> Self {
        SampleOptions {
            data_dir: default_data_dir(ModelKind::Gpt),
            load: None,
            prompt: "\n".to_owned(),
            tokens: 500,
            temperature: 0.8,
            top_k: Some(200),
            seed: 1337,
            device: Device::Cpu,
        }
    }
}

/// What a generation made and the memory it took.
#[derive(Debug, Clone, Serialize)]
pub struct SampleReport {
    /// The prompt and the generated text (null on meta).
    pub text: Option<String>,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub tokens: usize,
    /// Bytes of the key/value cache: keys and values of every block for the whole context.
    pub cache_bytes: usize,
    /// Peak allocated bytes of the generation (cache included), on an allocator of its own;
    /// the model's weights live beside it.
    pub peak_allocated: usize,
    /// Peak reserved bytes of the generation.
    pub peak_reserved: usize,
    /// Peak of the bytes the generation's ops asked for (unrounded).
    pub peak_requested: usize,
}

impl SampleReport {
    /// The memory lines of the report.
    pub fn memory_text(&self) -> String {
        let size = strata::alloc::caching::format_size;
        format!(
            "{} tokens after a prompt of {}: key/value cache {}; generation peak allocated {}, \
             reserved {}, requested {}\n",
            self.tokens,
            self.prompt_tokens,
            size(self.cache_bytes),
            size(self.peak_allocated),
            size(self.peak_reserved),
            size(self.peak_requested)
        )
    }
}

/// Generates as `o` says: the gpt for the vocabulary of the corpus in `o.data_dir`, with the
/// weights of `o.load`, then `o.tokens` tokens after the prompt, on a fresh allocator.
pub fn sample(o: &SampleOptions) -> Result<SampleReport> {
    let text = Text::load(&o.data_dir)?;
    let prompt = text.corpus().encode(&o.prompt)?;
    let model = {
        let _on = DefaultDevice::set(o.device);
        Model::language_model(text.vocabulary(), None)?
    };
    if o.device != Device::Meta {
        load_weights(model.module().as_ref(), o.load.as_ref())?;
    }
    let gpt = model
        .gpt()
        .ok_or_else(|| TrainError::Options("the sampled model is not a gpt".into()))?;
    let sampling = Sampling {
        temperature: o.temperature,
        top_k: o.top_k,
    };
    let mut generator = Generator::new(o.seed);
    // The cache and the generation's activations on a fresh allocator; the weights beside it.
    let ((seq, cache_bytes), peaks) = measure_on_fresh(o.device, |_| {
        let mut cache = KvCache::new(gpt.config(), 1, o.device, DType::F32)?;
        let seq = gpt.generate(&prompt, o.tokens, sampling, &mut generator, &mut cache)?;
        Ok((seq, cache.bytes()))
    })?;
    let text = match o.device {
        Device::Meta => None,
        _ => Some(text.corpus().decode(&seq)?),
    };
    Ok(SampleReport {
        text,
        prompt_tokens: prompt.len(),
        tokens: o.tokens,
        cache_bytes,
        peak_allocated: peaks.allocated,
        peak_reserved: peaks.reserved,
        peak_requested: peaks.requested,
    })
}
