//! Tensors saved for backward, and the saved-tensor hooks that may pack them elsewhere.
//!
//! A saved tensor keeps a handle that shares the storage and version counter of what was
//! saved, without its `grad_fn` (so a node saving its own output makes no cycle). At unpack
//! the version is checked: a saved tensor modified in place since is an error naming the op.

use std::any::Any;
use std::cell::RefCell;
use std::sync::Arc;

use strata_alloc::Site;

use crate::mode::GradModeGuard;
use crate::storage::Role;
use crate::tensor::graph_usage;
use crate::{DType, Error, Result, Tensor};

/// What a pack hook returns: anything, boxed.
pub type Packed = Box<dyn Any + Send + Sync>;

/// Packs a tensor being saved.
pub(crate) type PackFn = Box<dyn Fn(&Tensor) -> Result<Packed> + Send + Sync>;
/// Gives back the tensor a [`PackFn`] packed.
pub(crate) type UnpackFn = Box<dyn Fn(&Packed) -> Result<Tensor> + Send + Sync>;

/// A pack/unpack pair applied to every tensor autograd saves while it is installed.
pub(crate) struct HookPair {
    pub pack: PackFn,
    pub unpack: UnpackFn,
}

thread_local! {
    static HOOKS: RefCell<Vec<Arc<HookPair>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with `pack`/`unpack` applied to every tensor autograd saves inside it (PyTorch's
/// `torch.autograd.graph.saved_tensors_hooks`). Pairs nest; the innermost applies. `pack`
/// runs with grad mode off when the tensor is saved and its result is stored instead of the
/// tensor; `unpack` runs during backward and must return a tensor with the same values,
/// shape and dtype (its dtype is converted back if it differs).
///
/// ```
/// use strata_core::{autograd, DType, Tensor};
/// let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?.requires_grad_(true)?;
/// // Keep saved activations in bf16: half the bytes, restored to f32 for backward.
/// let y = autograd::saved_tensors_hooks(
///     |t: &Tensor| t.to(DType::BF16),
///     |p: &Tensor| p.to(DType::F32),
///     || w.exp()?.sum(None, false),
/// )?;
/// y.backward()?;
/// assert!(w.grad().is_some());
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn saved_tensors_hooks<P, R>(
    pack: impl Fn(&Tensor) -> Result<P> + Send + Sync + 'static,
    unpack: impl Fn(&P) -> Result<Tensor> + Send + Sync + 'static,
    f: impl FnOnce() -> R,
) -> R
where
    P: Any + Send + Sync,
{
    let pair = HookPair {
        pack: Box::new(move |t| Ok(Box::new(pack(t)?) as Packed)),
        unpack: Box::new(move |p| match p.downcast_ref::<P>() {
            Some(p) => unpack(p),
            None => Err(Error::Autograd {
                message: "a saved-tensor unpack hook got a value of another type than its \
                          pack hook made"
                    .into(),
            }),
        }),
    };
    with_hook_pair(Arc::new(pair), f)
}

/// Runs `f` with the activations autograd saves kept in host memory (PyTorch's
/// `save_on_cpu`): a tensor on another device is copied to the host when saved and back when
/// backward needs it; host tensors are kept as they are. `pin_memory` asks for page-locked
/// host buffers, which matter once a device backend copies asynchronously.
pub fn save_on_cpu<R>(pin_memory: bool, f: impl FnOnce() -> R) -> R {
    let _ = pin_memory;
    saved_tensors_hooks(
        |t: &Tensor| {
            if t.device() == crate::Device::Cpu {
                return Ok(t.clone());
            }
            Err(Error::Unsupported {
                op: "save_on_cpu",
                message: format!(
                    "moving a saved tensor from {} to host memory needs that device's backend",
                    t.device()
                ),
            })
        },
        |t: &Tensor| Ok(t.clone()),
        f,
    )
}

/// Runs `f` with `pair` installed (innermost).
pub(crate) fn with_hook_pair<R>(pair: Arc<HookPair>, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            HOOKS.with(|h| h.borrow_mut().pop());
        }
    }
    HOOKS.with(|h| h.borrow_mut().push(pair));
    let _pop = Pop;
    f()
}

/// Runs `f` with no hooks installed (recomputation inside a checkpoint installs its own).
pub(crate) fn current_hooks() -> Option<Arc<HookPair>> {
    HOOKS.with(|h| h.borrow().last().cloned())
}

enum Content {
    Plain(Tensor),
    Packed(Packed, Arc<HookPair>),
    /// Dropped (only while the saved tensor itself is being dropped).
    Released,
}

impl Drop for SavedTensor {
    fn drop(&mut self) {
        if let Content::Plain(t) = std::mem::replace(&mut self.content, Content::Released) {
            graph_usage::count_saved_storage(t.storage_id(), self.bytes, false);
            graph_usage::count(&self.site, 0, -1, -(self.bytes as isize));
            t.release_role(Role::Saved);
        }
    }
}

/// One tensor saved by a node.
pub(crate) struct SavedTensor {
    content: Content,
    version: u32,
    /// The node that saved it, for error messages.
    op: &'static str,
    shape: Vec<usize>,
    dtype: DType,
    /// The forward op that saved it, for the live-graph report.
    site: Site,
    /// Bytes of the storage it holds (0 when hooks packed it).
    bytes: usize,
}

impl SavedTensor {
    /// Saves `t` for the backward of `op`, recorded at `site` (applying the innermost
    /// saved-tensor hooks).
    pub fn save(op: &'static str, site: Site, t: &Tensor) -> Result<SavedTensor> {
        if t.is_inference() {
            return Err(Error::Autograd {
                message: format!(
                    "{op}: an inference tensor (made inside inference_mode) cannot be saved for \
                     backward. Hint: clone it outside inference mode, or make it under \
                     no_grad instead of inference_mode"
                ),
            });
        }
        let mut bytes = 0;
        let content = match current_hooks() {
            Some(pair) => {
                let _g = GradModeGuard::no_grad();
                let packed = (pair.pack)(t)?;
                Content::Packed(packed, pair)
            }
            None => {
                // Its memory counts as an activation while this node keeps it.
                t.with_body(|b| {
                    b.storage.take_role(Role::Saved, true);
                    bytes = b.storage.nbytes();
                    graph_usage::count_saved_storage(b.storage.id(), bytes, true);
                });
                graph_usage::count(&site, 0, 1, bytes as isize);
                Content::Plain(t.detached_alias())
            }
        };
        Ok(SavedTensor {
            content,
            version: t.version(),
            op,
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
            site,
            bytes,
        })
    }

    /// The saved tensor, checked against the version it was saved at.
    pub fn get(&self) -> Result<Tensor> {
        match &self.content {
            Content::Plain(t) => {
                let now = t.version();
                if now != self.version {
                    let by = match t.last_write() {
                        "" => String::new(),
                        op => format!(" (last by `{op}`)"),
                    };
                    return Err(Error::Autograd {
                        message: format!(
                            "a tensor needed to compute the gradient of {} ({} {:?}) was \
                             modified in place{by}: it was saved at version {}, now it is at \
                             version {}. Hint: deep_clone() it before modifying it (clone() \
                             copies the handle, which shares the memory), or use the \
                             out-of-place op instead of the in-place one",
                            self.op, self.dtype, self.shape, self.version, now
                        ),
                    });
                }
                Ok(t.clone())
            }
            Content::Packed(p, pair) => {
                let t = (pair.unpack)(p)?;
                if t.shape().as_slice() != self.shape {
                    return Err(Error::Autograd {
                        message: format!(
                            "a saved-tensor unpack hook returned shape {:?} for a tensor of \
                             shape {:?} saved by {}",
                            t.shape(),
                            self.shape,
                            self.op
                        ),
                    });
                }
                if t.dtype() != self.dtype {
                    return t.to(self.dtype);
                }
                Ok(t)
            }
            Content::Released => Err(Error::Autograd {
                message: format!("a tensor saved by {} was already released", self.op),
            }),
        }
    }
}
