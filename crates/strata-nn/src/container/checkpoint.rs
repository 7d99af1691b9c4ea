//! `checkpoint_sequential`: a `Sequential` run in segments whose activations are recomputed
//! in backward (PyTorch's `torch.utils.checkpoint.checkpoint_sequential`).

use std::sync::Arc;

use strata_core::autograd::{checkpoint, checkpoint_selective, SelectivePolicy};
use strata_core::{Error, Result, Tensor};

use super::sequential::run_chain;
use super::Sequential;
use crate::module::Module;

/// Runs `seq` on `x` in `segments` consecutive segments; every segment but the last is
/// checkpointed (keeps only its input; its activations are recomputed when backward needs
/// them), as PyTorch does. Without grad mode it simply runs the sequence.
///
/// ```
/// use strata_core::{DType, Tensor};
/// use strata_nn::{checkpoint_sequential, Linear, Module, ReLU, Sequential};
/// let net = Sequential::new().append(Linear::new(8, 8, true)?)?.append(ReLU::new())?
///     .append(Linear::new(8, 8, true)?)?.append(ReLU::new())?;
/// let x = Tensor::ones(&[2, 8], DType::F32)?.requires_grad_(true)?;
/// let y = checkpoint_sequential(&net, 2, &x)?;
/// y.sum(None, false)?.backward()?;
/// assert!(net.parameters().iter().all(|p| p.grad().is_some()));
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn checkpoint_sequential(seq: &Sequential, segments: usize, x: &Tensor) -> Result<Tensor> {
    let modules = seq.modules();
    if segments == 0 {
        return Err(Error::argument(
            "checkpoint_sequential",
            "segments must be at least 1",
            None,
        ));
    }
    let _scope = strata_core::scope::enter(&seq.core().name());
    // PyTorch's split: `segments - 1` checkpointed segments of `len / segments` modules,
    // and the rest run normally.
    let size = (modules.len() / segments).max(1);
    let mut start = 0;
    let mut h = x.clone();
    for _ in 1..segments {
        if start + size >= modules.len() {
            break;
        }
        let part: Vec<Arc<dyn Module>> = modules[start..start + size].to_vec();
        let out = checkpoint(move |t: &[Tensor]| Ok(vec![run_chain(&part, &t[0])?]), &[h])?;
        h = out.into_iter().next().ok_or_else(|| Error::Unsupported {
            op: "checkpoint_sequential",
            message: "a checkpointed segment returned no output".into(),
        })?;
        start += size;
    }
    run_chain(&modules[start..], &h)
}

/// How a model's checkpointed regions (a GPT's blocks) keep their activations for backward.
#[derive(Debug, Clone, Default)]
pub enum Checkpointing {
    /// No checkpointing: every activation backward needs is kept.
    #[default]
    Off,
    /// Each region keeps only its inputs; everything else is recomputed in backward.
    Full,
    /// Each region keeps its inputs and the outputs of the ops the policy saves; the rest
    /// is recomputed in backward ([`checkpoint_selective`]).
    Selective(SelectivePolicy),
}

impl Checkpointing {
    /// Runs `region` on `input` (one input, one output) as this says: directly, or as a
    /// fully or selectively checkpointed region.
    pub fn run<F>(&self, op: &'static str, region: F, input: Tensor) -> Result<Tensor>
    where
        F: Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
    {
        let out = match self {
            Checkpointing::Off => return region(&input),
            Checkpointing::Full => {
                checkpoint(move |t: &[Tensor]| Ok(vec![region(&t[0])?]), &[input])?
            }
            Checkpointing::Selective(policy) => checkpoint_selective(
                move |t: &[Tensor]| Ok(vec![region(&t[0])?]),
                &[input],
                policy,
            )?,
        };
        out.into_iter().next().ok_or_else(|| Error::Unsupported {
            op,
            message: "a checkpointed region returned no output".into(),
        })
    }
}
