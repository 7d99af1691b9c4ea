//! `MultiheadAttention` (`nn.MultiheadAttention`): PyTorch's parameters, state-dict keys,
//! masks and both of its computations (explicit weights, or scaled dot-product attention
//! when the weights are not asked for).

use strata_core::nn::functional::{
    dropout, linear, scaled_dot_product_attention_with, SdpaOptions,
};
use strata_core::{DType, Error, Result, Tensor};

use super::linear::Linear;
use crate::init;
use crate::module::{Module, ModuleCore, TensorSlot};

/// Construction options of [`MultiheadAttention`] (PyTorch's keyword arguments).
#[derive(Debug, Clone, Copy)]
pub struct MultiheadAttentionOptions {
    /// Biases on the input and output projections (default true).
    pub bias: bool,
    /// The keys' width (default: `embed_dim`).
    pub kdim: Option<usize>,
    /// The values' width (default: `embed_dim`).
    pub vdim: Option<usize>,
    /// Dropout on the attention weights in training (default 0).
    pub dropout: f64,
    /// Inputs and outputs are `[batch, seq, feature]` (default: `[seq, batch, feature]`).
    pub batch_first: bool,
}

impl Default for MultiheadAttentionOptions {
    fn default() -> Self {
        MultiheadAttentionOptions {
            bias: true,
            kdim: None,
            vdim: None,
            dropout: 0.0,
            batch_first: false,
        }
    }
}

/// The arguments of one call (PyTorch's `forward` keywords).
#[derive(Debug, Clone, Copy)]
pub struct AttendOptions<'a> {
    /// `[batch, S]` (or `[S]` unbatched) bool, true = this key is padding and is ignored
    /// (the opposite of `scaled_dot_product_attention`'s bool masks), or float, added.
    pub key_padding_mask: Option<&'a Tensor>,
    /// Return the attention weights (default true).
    pub need_weights: bool,
    /// `[L, S]` or `[batch * heads, L, S]`: bool, true = not allowed, or float, added.
    pub attn_mask: Option<&'a Tensor>,
    /// Average the returned weights over heads (default true).
    pub average_attn_weights: bool,
}

impl Default for AttendOptions<'_> {
    fn default() -> Self {
        AttendOptions {
            key_padding_mask: None,
            need_weights: true,
            attn_mask: None,
            average_attn_weights: true,
        }
    }
}

/// Multi-head attention (`nn.MultiheadAttention`): `embed_dim` split over `num_heads`
/// heads. Parameters as PyTorch names them: `in_proj_weight` `[3E, E]` (or `q_proj_weight`,
/// `k_proj_weight`, `v_proj_weight` when `kdim` or `vdim` differ from E), `in_proj_bias`
/// `[3E]`, `out_proj.weight` and `out_proj.bias`; initialised as PyTorch does (Xavier-
/// uniform projections, zero biases), so a PyTorch state dict loads as it is.
///
/// ```
/// use strata_nn::{AttendOptions, Module, MultiheadAttention, MultiheadAttentionOptions};
/// use strata_core::{DType, Tensor};
/// let opts = MultiheadAttentionOptions { batch_first: true, ..Default::default() };
/// let mha = MultiheadAttention::with_options(16, 4, opts)?;
/// let x = Tensor::randn(&[2, 10, 16], DType::F32)?;
/// let (y, weights) = mha.attend(&x, &x, &x, &AttendOptions::default())?;
/// assert_eq!(y.shape().as_slice(), [2, 10, 16]);
/// assert_eq!(weights.unwrap().shape().as_slice(), [2, 10, 10]); // averaged over heads
/// assert_eq!(mha.call(&x)?.shape().as_slice(), [2, 10, 16]); // self-attention, no weights
/// # Ok::<(), strata_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct MultiheadAttention {
    core: ModuleCore,
    embed_dim: usize,
    num_heads: usize,
    options: MultiheadAttentionOptions,
    /// `in_proj_weight` when key and value have the query's width, else the three
    /// `q/k/v_proj_weight`s.
    projections: Projections,
    in_proj_bias: Option<TensorSlot>,
    out_proj: Linear,
}

#[derive(Debug, Clone)]
enum Projections {
    Packed(TensorSlot),
    Separate([TensorSlot; 3]),
}

impl MultiheadAttention {
    /// `embed_dim` over `num_heads` heads with PyTorch's defaults.
    pub fn new(embed_dim: usize, num_heads: usize) -> Result<Self> {
        MultiheadAttention::with_options(embed_dim, num_heads, MultiheadAttentionOptions::default())
    }

    /// `embed_dim` over `num_heads` heads with `options`.
    pub fn with_options(
        embed_dim: usize,
        num_heads: usize,
        options: MultiheadAttentionOptions,
    ) -> Result<Self> {
        if num_heads == 0 || !embed_dim.is_multiple_of(num_heads) {
            return Err(Error::argument(
                "MultiheadAttention",
                format!("embed_dim must be divisible by num_heads ({embed_dim} by {num_heads})"),
                Some("choose a head count that divides the embedding width"),
            ));
        }
        let core = ModuleCore::library("MultiheadAttention");
        let (kdim, vdim) = (
            options.kdim.unwrap_or(embed_dim),
            options.vdim.unwrap_or(embed_dim),
        );
        let xavier = |rows: usize, cols: usize| -> Result<Tensor> {
            let w = Tensor::zeros(&[rows, cols], DType::F32)?;
            init::xavier_uniform_(&w, 1.0, None)?;
            Ok(w)
        };
        let projections = if kdim == embed_dim && vdim == embed_dim {
            Projections::Packed(
                core.register_parameter("in_proj_weight", xavier(3 * embed_dim, embed_dim)?)?,
            )
        } else {
            Projections::Separate([
                core.register_parameter("q_proj_weight", xavier(embed_dim, embed_dim)?)?,
                core.register_parameter("k_proj_weight", xavier(embed_dim, kdim)?)?,
                core.register_parameter("v_proj_weight", xavier(embed_dim, vdim)?)?,
            ])
        };
        let in_proj_bias = if options.bias {
            let b = Tensor::zeros(&[3 * embed_dim], DType::F32)?;
            Some(core.register_parameter("in_proj_bias", b)?)
        } else {
            None
        };
        let out_proj = Linear::new(embed_dim, embed_dim, options.bias)?;
        if let Some(b) = out_proj.bias() {
            init::zeros_(&b)?;
        }
        core.register_module("out_proj", &out_proj)?;
        Ok(MultiheadAttention {
            core,
            embed_dim,
            num_heads,
            options,
            projections,
            in_proj_bias,
            out_proj,
        })
    }

    /// The embedding width E.
    pub fn embed_dim(&self) -> usize {
        self.embed_dim
    }

    /// The number of heads.
    pub fn num_heads(&self) -> usize {
        self.num_heads
    }

    /// The output projection.
    pub fn out_proj(&self) -> &Linear {
        &self.out_proj
    }

    /// Attention of `query` over `key` and `value`, as PyTorch's `forward`: returns the
    /// output and, when `need_weights`, the attention weights (`[batch, L, S]` averaged over
    /// heads, or `[batch, heads, L, S]`; without a batch dimension when the inputs had
    /// none). Without weights it runs through `scaled_dot_product_attention`.
    #[track_caller]
    pub fn attend(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        options: &AttendOptions<'_>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        self.core().called_at(std::panic::Location::caller(), || {
            self.compute(query, key, value, options)
        })
    }

    /// The three projection weights (views of `in_proj_weight` when packed) and biases.
    fn projection_weights(&self) -> Result<([Tensor; 3], [Option<Tensor>; 3])> {
        let weights = match &self.projections {
            Projections::Packed(w) => thirds(&w.get())?,
            Projections::Separate(ws) => [ws[0].get(), ws[1].get(), ws[2].get()],
        };
        let biases = match &self.in_proj_bias {
            Some(b) => thirds(&b.get())?.map(Some),
            None => [None, None, None],
        };
        Ok((weights, biases))
    }

    fn compute(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        o: &AttendOptions<'_>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        const OP: &str = "MultiheadAttention";
        let batched = query.dim() == 3;
        if !batched && query.dim() != 2 || key.dim() != query.dim() || value.dim() != query.dim() {
            return Err(Error::shape(
                OP,
                "query, key and value must all be 3-d (batched) or all 2-d (unbatched)",
                vec![
                    query.shape().to_vec(),
                    key.shape().to_vec(),
                    value.shape().to_vec(),
                ],
            ));
        }
        // Work in PyTorch's [seq, batch, feature] layout.
        let seq_first = |t: &Tensor| -> Result<Tensor> {
            match (batched, self.options.batch_first) {
                (false, _) => t.unsqueeze(1i64),
                (true, true) => t.transpose(0, 1),
                (true, false) => Ok(t.clone()),
            }
        };
        let (q, k, v) = (seq_first(query)?, seq_first(key)?, seq_first(value)?);
        let (l, n, e) = (q.shape()[0], q.shape()[1], q.shape()[2]);
        let s = k.shape()[0];
        if e != self.embed_dim {
            return Err(Error::shape(
                OP,
                format!(
                    "was expecting embedding dimension of {}, but got {e}",
                    self.embed_dim
                ),
                vec![query.shape().to_vec()],
            ));
        }
        let h = self.num_heads;
        let hd = e / h;
        let ([wq, wk, wv], [bq, bk, bv]) = self.projection_weights()?;
        let q = linear(&q, &wq, bq.as_ref())?;
        let k = linear(&k, &wk, bk.as_ref())?;
        let v = linear(&v, &wv, bv.as_ref())?;

        let mask = self.merged_mask(o, batched, l, s, n, q.dtype())?;
        // [seq, batch, E] -> [batch * heads, seq, head_dim]
        let heads = |t: &Tensor, len: usize| t.reshape(&[len, n * h, hd])?.transpose(0, 1);
        let (q, k, v) = (heads(&q, l)?, heads(&k, s)?, heads(&v, s)?);
        let p = if self.core.is_training() {
            self.options.dropout
        } else {
            0.0
        };

        let (out, weights) = if o.need_weights {
            let scores = q
                .mul((hd as f64).sqrt().recip())?
                .bmm(&k.transpose(-2, -1)?)?;
            let scores = match &mask {
                Some(m) => scores.add(m)?,
                None => scores,
            };
            let mut w = scores.softmax(-1)?;
            if p > 0.0 {
                w = dropout(&w, p, true)?;
            }
            (w.bmm(&v)?, Some(w))
        } else {
            let as4 = |t: &Tensor| t.reshape(&[n as i64, h as i64, -1, hd as i64]);
            let mask4 = match &mask {
                Some(m) if m.shape()[0] == 1 => Some(m.unsqueeze(0i64)?),
                Some(m) => Some(m.reshape(&[n as i64, h as i64, -1, s as i64])?),
                None => None,
            };
            let sdpa = SdpaOptions {
                attn_mask: mask4.as_ref(),
                dropout_p: p,
                ..Default::default()
            };
            let out = scaled_dot_product_attention_with(&as4(&q)?, &as4(&k)?, &as4(&v)?, &sdpa)?;
            (out.reshape(&[n * h, l, hd])?, None)
        };
        // [batch * heads, L, head_dim] -> [L, batch, E], then the output projection.
        let out = out.transpose(0, 1)?.contiguous()?.reshape(&[l, n, e])?;
        let out = self.out_proj.forward(&out)?;
        let out = match (batched, self.options.batch_first) {
            (false, _) => out.squeeze(Some(&[1]))?,
            (true, true) => out.transpose(0, 1)?,
            (true, false) => out,
        };
        let weights = match weights {
            None => None,
            Some(w) => {
                let w = w.reshape(&[n, h, l, s])?;
                let w = if o.average_attn_weights {
                    w.mean(Some(&[1]), false)?
                } else {
                    w
                };
                Some(if batched { w } else { w.squeeze(Some(&[0]))? })
            }
        };
        Ok((out, weights))
    }

    /// The attention mask and the key padding mask as one additive float mask of `dtype`,
    /// `[1 or batch * heads, L, S]` (bool masks: true = -inf), or none.
    fn merged_mask(
        &self,
        o: &AttendOptions<'_>,
        batched: bool,
        l: usize,
        s: usize,
        n: usize,
        dtype: DType,
    ) -> Result<Option<Tensor>> {
        const OP: &str = "MultiheadAttention";
        let additive = |m: &Tensor| -> Result<Tensor> {
            if m.dtype() == DType::Bool {
                Tensor::on(m.device())
                    .zeros(&m.shape(), dtype)?
                    .masked_fill(m, f64::NEG_INFINITY)
            } else {
                m.to(dtype)
            }
        };
        let h = self.num_heads;
        let mut mask = match o.attn_mask {
            None => None,
            Some(m) => {
                let m = additive(m)?;
                let m = match m.dim() {
                    2 if m.shape().as_slice() == [l, s] => m.unsqueeze(0i64)?,
                    3 if m.shape().as_slice() == [n * h, l, s] => m,
                    _ => {
                        return Err(Error::shape(
                            OP,
                            format!(
                                "attn_mask must be [{l}, {s}] or [{}, {l}, {s}], got {:?}",
                                n * h,
                                m.shape().as_slice()
                            ),
                            vec![m.shape().to_vec()],
                        ))
                    }
                };
                Some(m)
            }
        };
        if let Some(kpm) = o.key_padding_mask {
            let kpm = if batched {
                kpm.clone()
            } else {
                kpm.unsqueeze(0i64)?
            };
            if kpm.shape().as_slice() != [n, s] {
                return Err(Error::shape(
                    OP,
                    format!(
                        "key_padding_mask must be [{n}, {s}], got {:?}",
                        kpm.shape().as_slice()
                    ),
                    vec![kpm.shape().to_vec()],
                ));
            }
            let kpm = additive(&kpm)?
                .reshape(&[n, 1, 1, s])?
                .expand(&[n, h, 1, s])?
                .reshape(&[n * h, 1, s])?;
            mask = Some(match mask {
                None => kpm,
                Some(m) => m.add(&kpm)?,
            });
        }
        Ok(mask)
    }
}

/// The query, key and value parts of a packed projection (`[3E, ..]`): three views along
/// dimension 0, as PyTorch's `chunk(3)`.
fn thirds(packed: &Tensor) -> Result<[Tensor; 3]> {
    let parts = packed.chunk(3, 0)?;
    <[Tensor; 3]>::try_from(parts).map_err(|parts| {
        Error::shape(
            "MultiheadAttention",
            format!(
                "a packed projection splits into 3 parts, got {}",
                parts.len()
            ),
            vec![packed.shape().to_vec()],
        )
    })
}

impl Module for MultiheadAttention {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    /// Self-attention of `x` without weights (`mha(x, x, x, need_weights=False)[0]`).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let options = AttendOptions {
            need_weights: false,
            ..Default::default()
        };
        Ok(self.compute(x, x, x, &options)?.0)
    }
}
