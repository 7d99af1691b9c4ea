//! Generation with a key/value cache: each block keeps the keys and values of the tokens
//! seen so far in tensors of the whole context, so that a new token costs one position's
//! work instead of the whole sequence's. Past the context, the sequence is cropped to its
//! last `block_size` tokens and recomputed, as nanoGPT's `generate` does.

use strata_core::autograd::GradModeGuard;
use strata_core::nn::functional::{scaled_dot_product_attention_with, SdpaOptions};
use strata_core::{DType, Device, Error, Generator, Result, Tensor};

use super::{Block, Gpt, GptConfig};
use crate::module::Module;

/// The keys and values of every block for the first [`len`](KvCache::len) positions: per
/// block two `[batch, heads, block_size, head_dim]` tensors, allocated once.
#[derive(Debug)]
pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    len: usize,
}

impl KvCache {
    /// An empty cache for `batch` sequences of `config`'s model, on `device` in `dtype`.
    pub fn new(config: &GptConfig, batch: usize, device: Device, dtype: DType) -> Result<Self> {
        let shape = [
            batch,
            config.n_head,
            config.block_size,
            config.n_embd / config.n_head,
        ];
        let on = Tensor::on(device);
        let mut keys = Vec::with_capacity(config.n_layer);
        let mut values = Vec::with_capacity(config.n_layer);
        for _ in 0..config.n_layer {
            keys.push(on.zeros(&shape, dtype)?);
            values.push(on.zeros(&shape, dtype)?);
        }
        Ok(KvCache {
            keys,
            values,
            len: 0,
        })
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions it can hold: the model's context.
    pub fn capacity(&self) -> usize {
        self.keys.first().map_or(0, |k| k.shape()[2])
    }

    /// Bytes its tensors take (requested, as the allocator counts them).
    pub fn bytes(&self) -> usize {
        self.keys
            .iter()
            .chain(&self.values)
            .map(|t| t.numel() * t.dtype().size())
            .sum()
    }

    /// Forgets every position (the memory stays, to be written again).
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// How the next token is drawn from the last position's logits: divided by `temperature`,
/// kept to the `top_k` largest (when given), softmax, one draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Above 0; below 1 sharpens the distribution.
    pub temperature: f64,
    /// Only the `top_k` most likely tokens can be drawn.
    pub top_k: Option<usize>,
}

impl Sampling {
    /// The token drawn for one row of logits, with `generator`.
    pub fn draw(&self, logits: &[f32], generator: &mut Generator) -> Result<usize> {
        if !(self.temperature > 0.0 && self.temperature.is_finite()) || logits.is_empty() {
            return Err(Error::argument(
                "Sampling::draw",
                format!(
                    "the temperature must be a positive number (got {}) and the row non-empty",
                    self.temperature
                ),
                None,
            ));
        }
        let scaled: Vec<f64> = logits
            .iter()
            .map(|&l| f64::from(l) / self.temperature)
            .collect();
        // The k-th largest value is the threshold; ties with it stay, as PyTorch's
        // `logits < v[:, [-1]]` keeps them.
        let threshold = match self.top_k {
            Some(k) if k > 0 && k < scaled.len() => {
                let mut sorted = scaled.clone();
                sorted.sort_by(|a, b| b.total_cmp(a));
                sorted[k - 1]
            }
            _ => f64::NEG_INFINITY,
        };
        let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = scaled
            .iter()
            .map(|&s| if s >= threshold { (s - max).exp() } else { 0.0 })
            .collect();
        let total: f64 = weights.iter().sum();
        if !(total > 0.0 && total.is_finite()) {
            return Err(Error::argument(
                "Sampling::draw",
                "the logits have no finite value to draw from",
                None,
            ));
        }
        let mut u = generator.next_f64() * total;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                return Ok(i);
            }
            u -= w;
        }
        // Rounding left `u` past the last weight: the last token with a weight.
        Ok(weights.iter().rposition(|w| *w > 0.0).unwrap_or(0))
    }
}

impl Gpt {
    /// Runs the tokens `idx` `[B, T]` at positions `cache.len()..` through the model,
    /// storing their keys and values in `cache`, and returns the logits of the last
    /// position, `[B, vocab]`. Either the cache is empty (a prompt, attended causally) or
    /// `T` is 1 (the next token, attending every position held).
    #[track_caller]
    pub fn forward_cached(&self, idx: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let at = std::panic::Location::caller();
        self.core().called_at(at, || self.run_cached(idx, cache))
    }

    fn run_cached(&self, idx: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let shape = idx.shape();
        let (start, t) = (cache.len, shape.get(1).copied().unwrap_or(0));
        let fits = shape.len() == 2
            && t > 0
            && (start == 0 || t == 1)
            && start + t <= cache.capacity()
            && cache.keys.len() == self.transformer.h.len()
            && cache.keys.first().map(|k| k.shape()[0]) == Some(shape[0]);
        if !fits {
            return Err(Error::argument(
                "Gpt::forward_cached",
                format!(
                    "{:?} tokens at position {start} do not fit a cache of {} positions for \
                     {} blocks: give a whole prompt to an empty cache, or one token at a time, \
                     with the cache's batch size",
                    shape.as_slice(),
                    cache.capacity(),
                    cache.keys.len()
                ),
                Some("clear the cache and run the last block_size tokens again"),
            ));
        }
        let trunk = &self.transformer;
        let x = trunk.core().scoped(|| {
            let mut x = trunk.embed(idx, start)?;
            trunk.list.core().scoped(|| {
                for (i, block) in trunk.h.iter().enumerate() {
                    let (keys, values) = (&cache.keys[i], &cache.values[i]);
                    x = block
                        .core()
                        .scoped(|| attend_cached(block, &x, keys, values, start))?;
                }
                Ok(())
            })?;
            trunk.ln_f.call(&x.narrow(1, t as i64 - 1, 1)?)
        })?;
        cache.len = start + t;
        let logits = self.lm_head.call(&x)?;
        logits.select(1, 0)
    }

    /// `tokens` new tokens after `prompt` (at least one token; the batch's first sequence),
    /// drawn as `sampling` says with `generator`, under inference mode with `cache` (which
    /// is cleared first). While the sequence fits the context each token costs one position;
    /// past it, the last `block_size` tokens are run again from an empty cache.
    pub fn generate(
        &self,
        prompt: &[i64],
        tokens: usize,
        sampling: Sampling,
        generator: &mut Generator,
        cache: &mut KvCache,
    ) -> Result<Vec<i64>> {
        if prompt.is_empty() {
            return Err(Error::argument(
                "Gpt::generate",
                "the prompt has no token",
                Some("start from at least one character of the vocabulary"),
            ));
        }
        let device = self.transformer.wte.weight().device();
        let block = self.config.block_size;
        let mut seq = prompt.to_vec();
        let _inference = GradModeGuard::inference_mode();
        cache.clear();
        let mut logits = self.forward_cached(&context(&seq, block, device)?, cache)?;
        for _ in 0..tokens {
            let next = if device == Device::Meta {
                0 // no values to draw from: the memory of every step is the same
            } else {
                sampling.draw(&logits.select(0, 0)?.to_vec::<f32>()?, generator)? as i64
            };
            seq.push(next);
            logits = if cache.len() < cache.capacity() {
                let one = Tensor::on(device).from_vec(vec![next], &[1, 1])?;
                self.forward_cached(&one, cache)?
            } else {
                cache.clear();
                self.forward_cached(&context(&seq, block, device)?, cache)?
            };
        }
        Ok(seq)
    }
}

/// The last `block` tokens of `seq` as a `[1, T]` tensor on `device`.
fn context(seq: &[i64], block: usize, device: Device) -> Result<Tensor> {
    let tail = &seq[seq.len().saturating_sub(block)..];
    Tensor::on(device).from_vec(tail.to_vec(), &[1, tail.len()])
}

/// One block over the new positions `x` `[B, T, C]` starting at `start`: their keys and
/// values written into the block's cache tensors, their queries attending every position
/// held (causally among themselves).
fn attend_cached(
    block: &Block,
    x: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    start: usize,
) -> Result<Tensor> {
    let h = block.ln_1.call(x)?;
    let [q, k, v] = block.attn.heads(&h)?;
    drop(h);
    let t = q.shape()[2];
    keys.narrow(2, start as i64, t)?.copy_(&k)?;
    values.narrow(2, start as i64, t)?.copy_(&v)?;
    drop((k, v));
    let held = start + t;
    let options = SdpaOptions {
        is_causal: start == 0 && t > 1,
        ..SdpaOptions::default()
    };
    let y = scaled_dot_product_attention_with(
        &q,
        &keys.narrow(2, 0, held)?,
        &values.narrow(2, 0, held)?,
        &options,
    )?;
    drop(q);
    let x = x.add(&block.attn.merge(&y)?)?;
    block.feed_forward(&x)
}
