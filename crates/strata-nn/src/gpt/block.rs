//! One transformer block of the GPT: pre-norm causal self-attention and an MLP, each added
//! back to the residual stream, with nanoGPT's module names (`ln_1`, `attn.c_attn`,
//! `attn.c_proj`, `ln_2`, `mlp.c_fc`, `mlp.gelu`, `mlp.c_proj`).

use strata_core::nn::functional::{scaled_dot_product_attention_with, SdpaOptions};
use strata_core::{Error, Result, SplitSize, Tensor};

use super::GptConfig;
use crate::module::{Module, ModuleCore};
use crate::{LayerNorm, Linear, GELU};

/// Multi-head causal self-attention: one product makes queries, keys and values
/// (`c_attn`, no bias), heads attend through `scaled_dot_product_attention` with
/// `is_causal`, and `c_proj` mixes the heads back.
#[derive(Debug, Clone)]
pub struct CausalSelfAttention {
    core: ModuleCore,
    c_attn: Linear,
    c_proj: Linear,
    n_head: usize,
}

impl CausalSelfAttention {
    fn new(config: &GptConfig) -> Result<Self> {
        let c = config.n_embd;
        let core = ModuleCore::library("CausalSelfAttention");
        let c_attn = Linear::new(c, 3 * c, false)?;
        let c_proj = Linear::new(c, c, false)?;
        core.register_module("c_attn", &c_attn)?;
        core.register_module("c_proj", &c_proj)?;
        Ok(CausalSelfAttention {
            core,
            c_attn,
            c_proj,
            n_head: config.n_head,
        })
    }

    /// Queries, keys and values of `x` `[B, T, C]`, each `[B, heads, T, C / heads]`.
    pub(crate) fn heads(&self, x: &Tensor) -> Result<[Tensor; 3]> {
        let &[b, t, c] = x.shape().as_slice() else {
            return Err(Error::argument(
                "CausalSelfAttention",
                format!("the input is [batch, time, channels], not {:?}", x.shape()),
                None,
            ));
        };
        let qkv = self.c_attn.call(x)?;
        let per_head = |p: &Tensor| -> Result<Tensor> {
            p.view(&[b, t, self.n_head, c / self.n_head])?
                .transpose(1, 2)
        };
        let parts = qkv.split(SplitSize::Size(c), 2)?;
        match &parts[..] {
            [q, k, v] => Ok([per_head(q)?, per_head(k)?, per_head(v)?]),
            _ => Err(Error::Unsupported {
                op: "CausalSelfAttention",
                message: format!("c_attn's output split into {} parts, not 3", parts.len()),
            }),
        }
    }

    /// `y` `[B, heads, T, C / heads]` back to `[B, T, C]` through `c_proj`.
    pub(crate) fn merge(&self, y: &Tensor) -> Result<Tensor> {
        let s = y.shape();
        let y = y.transpose(1, 2)?.contiguous()?;
        self.c_proj.call(&y.view(&[s[0], s[2], s[1] * s[3]])?)
    }
}

impl Module for CausalSelfAttention {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let [q, k, v] = self.heads(x)?;
        let options = SdpaOptions {
            is_causal: true,
            ..SdpaOptions::default()
        };
        let y = scaled_dot_product_attention_with(&q, &k, &v, &options)?;
        drop((q, k, v));
        self.merge(&y)
    }
}

/// The block's feed-forward part: `c_fc` (C → 4C), exact GELU, `c_proj` (4C → C), no biases.
#[derive(Debug, Clone)]
pub struct Mlp {
    core: ModuleCore,
    c_fc: Linear,
    gelu: GELU,
    c_proj: Linear,
}

impl Mlp {
    fn new(config: &GptConfig) -> Result<Self> {
        let c = config.n_embd;
        let core = ModuleCore::library("MLP");
        let c_fc = Linear::new(c, 4 * c, false)?;
        let gelu = GELU::new();
        let c_proj = Linear::new(4 * c, c, false)?;
        core.register_module("c_fc", &c_fc)?;
        core.register_module("gelu", &gelu)?;
        core.register_module("c_proj", &c_proj)?;
        Ok(Mlp {
            core,
            c_fc,
            gelu,
            c_proj,
        })
    }
}

impl Module for Mlp {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.c_fc.call(x)?;
        let h = self.gelu.call(&h)?;
        self.c_proj.call(&h)
    }
}

/// `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`.
#[derive(Debug, Clone)]
pub struct Block {
    core: ModuleCore,
    pub(crate) ln_1: LayerNorm,
    pub(crate) attn: CausalSelfAttention,
    ln_2: LayerNorm,
    mlp: Mlp,
}

impl Block {
    pub(crate) fn new(config: &GptConfig) -> Result<Self> {
        let c = config.n_embd;
        let core = ModuleCore::library("Block");
        let ln_1 = LayerNorm::without_bias(&[c])?;
        let attn = CausalSelfAttention::new(config)?;
        let ln_2 = LayerNorm::without_bias(&[c])?;
        let mlp = Mlp::new(config)?;
        core.register_module("ln_1", &ln_1)?;
        core.register_module("attn", &attn)?;
        core.register_module("ln_2", &ln_2)?;
        core.register_module("mlp", &mlp)?;
        Ok(Block {
            core,
            ln_1,
            attn,
            ln_2,
            mlp,
        })
    }

    /// The second half: `x + mlp(ln_2(x))`.
    pub(crate) fn feed_forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.ln_2.call(x)?;
        x.add(&self.mlp.call(&h)?)
    }
}

impl Module for Block {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.ln_1.call(x)?;
        let x = x.add(&self.attn.call(&h)?)?;
        drop(h);
        self.feed_forward(&x)
    }
}
