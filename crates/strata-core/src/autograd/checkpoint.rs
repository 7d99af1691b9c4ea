//! Activation checkpointing (non-reentrant, as PyTorch recommends): the forward of a region
//! keeps only its inputs; every tensor its ops would save for backward is replaced by an empty
//! holder, and the first backward that needs one recomputes the region (with the random
//! generator restored, so dropout draws the same mask, and the autocast state of the forward,
//! so the recomputed ops run in the same dtypes) and fills them all.

use std::sync::{Arc, Mutex, Weak};

use super::saved::{with_hook_pair, HookPair, Packed, SavedTensor};
use super::selective::{self, KeptStore, SelectivePolicy};
use crate::cast_scope;
use crate::mode::{is_grad_enabled, GradModeGuard};
use crate::random::global_generator;
use crate::{DType, Error, Result, Tensor};

type Region = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync;

struct Holder {
    slot: Mutex<Option<Tensor>>,
}

struct Frame {
    region: Arc<Region>,
    inputs: Vec<Option<SavedTensor>>,
    plain_inputs: Vec<Tensor>,
    requires_grad: Vec<bool>,
    rng_state: Vec<u8>,
    /// The autocast region's dtype at forward (`None`: outside autocast).
    autocast: Option<DType>,
    holders: Mutex<Vec<Weak<Holder>>>,
    /// The module scope the forward ran in: the recomputation runs in it again, so its
    /// allocations are reported under the region's own module names.
    scope: &'static str,
    /// Selective checkpointing's policy and the outputs the forward kept under it.
    selective: Option<(SelectivePolicy, Arc<KeptStore>)>,
}

/// What the region's ops store instead of a tensor.
struct HolderRef {
    frame: Arc<Frame>,
    holder: Arc<Holder>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `region` on `inputs` keeping only the inputs for backward; the activations are
/// recomputed when backward needs them. Regions nest; several inputs and outputs are fine.
/// Without grad mode it just runs the region. The recomputation runs in the autocast state
/// the forward ran in (inside a region of the same dtype, or outside autocast), whatever
/// the state around the backward call.
///
/// ```
/// use strata_core::{autograd, DType, Tensor};
/// let w = Tensor::from_vec(vec![0.5f32, 2.0], &[2])?.requires_grad_(true)?;
/// let x = Tensor::from_vec(vec![1.0f32, 3.0], &[2])?;
/// let out = autograd::checkpoint(|t: &[Tensor]| Ok(vec![t[0].mul(&t[1])?.tanh()?]), &[w.clone(), x])?;
/// out[0].sum(None, false)?.backward()?;
/// assert!(w.grad().is_some());
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn checkpoint<F>(region: F, inputs: &[Tensor]) -> Result<Vec<Tensor>>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    checkpoint_with(region, inputs, None)
}

/// [`checkpoint`] with selective checkpointing: the forward also keeps the outputs of the
/// ops `policy` saves, and the recomputation reuses them instead of running those ops
/// (PyTorch's `checkpoint(fn, *args, context_fn=partial(create_selective_checkpoint_contexts,
/// policy))`). Between full checkpointing (keep nothing) and none: the memory of the saved
/// outputs, for not recomputing the ops that are dear to run. The kept outputs serve one
/// backward; a second backward through the region is an `Err`.
#[track_caller]
pub fn checkpoint_selective<F>(
    region: F,
    inputs: &[Tensor],
    policy: &SelectivePolicy,
) -> Result<Vec<Tensor>>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    checkpoint_with(region, inputs, Some(policy))
}

#[track_caller]
fn checkpoint_with<F>(
    region: F,
    inputs: &[Tensor],
    policy: Option<&SelectivePolicy>,
) -> Result<Vec<Tensor>>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    if !is_grad_enabled() {
        return region(inputs);
    }
    let region: Arc<Region> = Arc::new(region);
    let site = strata_alloc::Site::new(std::panic::Location::caller(), "checkpoint")
        .in_scope(crate::scope::current());
    let saved = inputs
        .iter()
        .map(|t| {
            if t.requires_grad() || t.dtype().is_floating() {
                SavedTensor::save("checkpoint", site, t).map(Some)
            } else {
                Ok(None)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let plain_inputs = inputs
        .iter()
        .zip(&saved)
        .filter(|(_, s)| s.is_none())
        .map(|(t, _)| t.clone())
        .collect();
    let frame = Arc::new(Frame {
        region: region.clone(),
        inputs: saved,
        plain_inputs,
        requires_grad: inputs.iter().map(Tensor::requires_grad).collect(),
        rng_state: global_generator().get_state(),
        autocast: cast_scope::autocast_state(),
        holders: Mutex::new(Vec::new()),
        scope: crate::scope::current(),
        selective: policy.map(|p| (p.clone(), Arc::new(KeptStore::default()))),
    });
    let for_pack = frame.clone();
    let pair = HookPair {
        pack: Box::new(move |_t: &Tensor| {
            let holder = Arc::new(Holder {
                slot: Mutex::new(None),
            });
            lock(&for_pack.holders).push(Arc::downgrade(&holder));
            Ok(Box::new(HolderRef {
                frame: for_pack.clone(),
                holder,
            }) as Packed)
        }),
        unpack: Box::new(unpack_holder),
    };
    let pair = Arc::new(pair);
    match &frame.selective {
        Some((policy, store)) => {
            selective::forward(policy, store, || with_hook_pair(pair, || region(inputs)))
        }
        None => with_hook_pair(pair, || region(inputs)),
    }
}

fn unpack_holder(p: &Packed) -> Result<Tensor> {
    let Some(h) = p.downcast_ref::<HolderRef>() else {
        return Err(Error::Autograd {
            message: "checkpoint: a saved value of another kind reached the checkpoint".into(),
        });
    };
    if let Some(t) = lock(&h.holder.slot).take() {
        return Ok(t);
    }
    recompute(&h.frame)?;
    let t = lock(&h.holder.slot).take();
    t.ok_or_else(|| Error::Autograd {
        message: "checkpoint: recomputing the region saved fewer tensors than its forward did. \
                  Hint: a checkpointed function must do the same ops every time it runs (no \
                  branching on global state)"
            .into(),
    })
}

fn recompute(frame: &Arc<Frame>) -> Result<()> {
    // The region's inputs as they were, cut from the outer graph but requiring grad as
    // before, so that the same tensors are saved.
    let mut plain = frame.plain_inputs.iter();
    let mut inputs = Vec::with_capacity(frame.inputs.len());
    for (s, &rg) in frame.inputs.iter().zip(&frame.requires_grad) {
        let t = match s {
            Some(s) => s.get()?.detached_alias(),
            None => plain.next().cloned().ok_or_else(|| Error::Autograd {
                message: "checkpoint: an input went missing".into(),
            })?,
        };
        if rg {
            t.requires_grad_(true)?;
        }
        inputs.push(t);
    }
    let holders: Vec<Weak<Holder>> = lock(&frame.holders).clone();
    let count = Arc::new(Mutex::new(0usize));
    let counter = count.clone();
    let targets = holders.clone();
    let pair = HookPair {
        pack: Box::new(move |t: &Tensor| {
            let mut k = lock(&counter);
            let Some(slot) = targets.get(*k) else {
                return Err(Error::Autograd {
                    message: "checkpoint: recomputing the region saved more tensors than its \
                              forward did. Hint: a checkpointed function must do the same ops \
                              every time it runs"
                        .into(),
                });
            };
            if let Some(h) = slot.upgrade() {
                *lock(&h.slot) = Some(t.detached_alias());
            }
            *k += 1;
            Ok(Box::new(()) as Packed)
        }),
        unpack: Box::new(|_| {
            Err(Error::Autograd {
                message: "checkpoint: a recomputed value was used before recomputation ended"
                    .into(),
            })
        }),
    };
    // The region's ops run as in its forward: under its scope, attributed to their own
    // source lines rather than to the backward node that asked for the recomputation.
    let _scope = crate::scope::restore(frame.scope);
    let _site = crate::op::BackwardSite::enter(None);
    let saved_rng = global_generator().get_state();
    global_generator().set_state(&frame.rng_state)?;
    let result = {
        let _grad = GradModeGuard::enable_grad();
        cast_scope::with_autocast_state(frame.autocast, || {
            let pair = Arc::new(pair);
            let run = || with_hook_pair(pair, || (frame.region)(&inputs));
            match &frame.selective {
                Some((policy, store)) => selective::recompute(policy, store, run),
                None => run(),
            }
        })
    };
    global_generator().set_state(&saved_rng)?;
    drop(result?);
    if *lock(&count) != holders.len() {
        return Err(Error::Autograd {
            message: format!(
                "checkpoint: recomputing the region saved {} tensors where its forward saved {}. \
                 Hint: a checkpointed function must do the same ops every time it runs",
                lock(&count),
                holders.len()
            ),
        });
    }
    Ok(())
}
