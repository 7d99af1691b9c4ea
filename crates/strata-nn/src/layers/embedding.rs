//! `Embedding`: a lookup table of learned vectors.

use strata_core::nn::functional::embedding_with;
use strata_core::{DType, Error, Result, Tensor};

use crate::init;
use crate::module::{Module, ModuleCore, TensorSlot};

/// A table of `num_embeddings` vectors of `embedding_dim`, looked up by integer index
/// (`nn.Embedding`); the weight is N(0, 1), and the row `padding_idx`, when given, is zero
/// and gets no gradient.
#[derive(Debug, Clone)]
pub struct Embedding {
    core: ModuleCore,
    weight: TensorSlot,
    padding_idx: Option<i64>,
}

impl Embedding {
    /// `nn.Embedding(num_embeddings, embedding_dim, padding_idx)`; a negative `padding_idx`
    /// counts from the end, as in PyTorch.
    pub fn new(
        num_embeddings: usize,
        embedding_dim: usize,
        padding_idx: Option<i64>,
    ) -> Result<Self> {
        let padding_idx = match padding_idx {
            None => None,
            Some(p) => {
                let n = num_embeddings as i64;
                if p >= n || p < -n {
                    return Err(Error::argument(
                        "Embedding",
                        format!("padding_idx {p} is outside the {num_embeddings} embeddings"),
                        None,
                    ));
                }
                Some(if p < 0 { p + n } else { p })
            }
        };
        let core = ModuleCore::library("Embedding");
        let w = Tensor::zeros(&[num_embeddings, embedding_dim], DType::F32)?;
        init::normal_(&w, 0.0, 1.0, None)?;
        if let Some(p) = padding_idx {
            init::zeros_(&w.select(0, p)?)?;
        }
        let weight = core.register_parameter("weight", w)?;
        Ok(Embedding {
            core,
            weight,
            padding_idx,
        })
    }

    /// The table, `[num_embeddings, embedding_dim]`.
    pub fn weight(&self) -> Tensor {
        self.weight.get()
    }

    /// The slot holding the table, to tie another layer's weight to it
    /// ([`Linear::tied`](crate::Linear::tied)).
    pub fn weight_slot(&self) -> &TensorSlot {
        &self.weight
    }

    /// The row that stays zero and gets no gradient.
    pub fn padding_idx(&self) -> Option<i64> {
        self.padding_idx
    }
}

impl Module for Embedding {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    fn forward(&self, index: &Tensor) -> Result<Tensor> {
        embedding_with(index, &self.weight(), self.padding_idx)
    }
}
