//! The autograd methods of [`Tensor`]: `requires_grad_`, `backward`, `.grad`, hooks, `detach_`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::engine::{run, Sink};
use super::record::{current_grad_fn, gradient_edge};
use crate::mode::is_inference_mode_enabled;
use crate::tensor::graph::{Edge, GradHook};
use crate::{Error, Result, Tensor};

static NEXT_HOOK: AtomicU64 = AtomicU64::new(1);

/// Removes a hook registered with [`Tensor::register_hook`] when [`HookHandle::remove`] is
/// called (dropping the handle keeps the hook).
#[derive(Debug)]
pub struct HookHandle {
    id: u64,
    tensor: std::sync::Weak<crate::tensor::TensorImpl>,
}

impl HookHandle {
    /// Unregisters the hook.
    pub fn remove(self) {
        let Some(t) = Tensor::upgrade(&self.tensor) else {
            return;
        };
        t.autograd_meta()
            .state()
            .leaf_hooks
            .retain(|(id, _)| *id != self.id);
        t.autograd_meta()
            .state()
            .post_accumulate_hooks
            .retain(|(id, _)| *id != self.id);
        if let Some(node) = current_grad_fn(&t) {
            node.hooks().retain(|(id, _)| *id != self.id);
        }
    }
}

impl Tensor {
    /// Whether gradients are computed for this tensor (a leaf that asked for it, or the
    /// result of an op recorded on such tensors).
    pub fn requires_grad(&self) -> bool {
        self.autograd_meta().requires_grad()
    }

    /// Asks for (or stops asking for) this leaf's gradient; returns the tensor.
    ///
    /// Floating dtypes only. A non-leaf always requires grad: asking it to stop is an error
    /// (use [`Tensor::detach`]).
    pub fn requires_grad_(&self, flag: bool) -> Result<Tensor> {
        if flag && !self.dtype().is_floating() {
            return Err(Error::Autograd {
                message: format!(
                    "requires_grad_: only floating-point tensors can require gradients, this \
                     one is {}. Hint: convert it with .to(DType::F32) first",
                    self.dtype()
                ),
            });
        }
        if flag && self.is_inference() && !is_inference_mode_enabled() {
            return Err(Error::Autograd {
                message: "requires_grad_: an inference tensor cannot require grad outside \
                          inference mode. Hint: deep_clone() it outside inference mode first"
                    .into(),
            });
        }
        if !self.is_leaf() {
            if flag {
                return Ok(self.clone());
            }
            return Err(Error::Autograd {
                message: "requires_grad_(false): only a leaf tensor's flag can change; this \
                          tensor is the result of a recorded op. Hint: use detach() to get a \
                          tensor without history"
                    .into(),
            });
        }
        self.autograd_meta().set_requires_grad(flag);
        Ok(self.clone())
    }

    /// True when the tensor was not made by a recorded op (every tensor that does not
    /// require grad is a leaf).
    pub fn is_leaf(&self) -> bool {
        current_grad_fn(self).is_none()
    }

    /// The accumulated gradient (`.grad`): for leaves that require grad, and non-leaves that
    /// [`Tensor::retain_grad`].
    pub fn grad(&self) -> Option<Tensor> {
        self.autograd_meta().state().grad.get()
    }

    /// Replaces `.grad` (`None` frees it, as `x.grad = None`). A gradient must have this
    /// tensor's shape and dtype.
    pub fn set_grad(&self, grad: Option<Tensor>) -> Result<()> {
        if let Some(g) = &grad {
            if g.shape() != self.shape() || g.dtype() != self.dtype() {
                return Err(Error::Autograd {
                    message: format!(
                        "set_grad: a gradient of {} {:?} does not fit a tensor of {} {:?}",
                        g.dtype(),
                        g.shape(),
                        self.dtype(),
                        self.shape()
                    ),
                });
            }
        }
        let mut st = self.autograd_meta().state();
        st.grad.set(grad);
        st.accumulations = 0;
        Ok(())
    }

    /// Clears `.grad`: drops it (`set_to_none`, the default in PyTorch and the one that frees
    /// memory) or fills it with zeros in place.
    pub fn zero_grad(&self, set_to_none: bool) -> Result<()> {
        self.autograd_meta().state().accumulations = 0;
        if set_to_none {
            self.autograd_meta().state().grad.set(None);
            return Ok(());
        }
        let g = self.autograd_meta().state().grad.take();
        if let Some(g) = g {
            let g = g.detached_alias();
            crate::mode::no_grad(|| g.zero_())?;
            self.autograd_meta().state().grad.set(Some(g));
        }
        Ok(())
    }

    /// How many backward passes added into `.grad` since it was last cleared
    /// ([`Tensor::zero_grad`]) or set ([`Tensor::set_grad`]): 1 after one backward, 2 after
    /// two without `zero_grad` (gradients accumulate in place), 0 with no gradient.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let w = Tensor::ones(&[3], DType::F32)?.requires_grad_(true)?;
    /// w.sum(None, false)?.backward()?;
    /// w.sum(None, false)?.backward()?;
    /// assert_eq!(w.grad_accumulations(), 2);
    /// w.zero_grad(true)?;
    /// assert_eq!(w.grad_accumulations(), 0);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    pub fn grad_accumulations(&self) -> u32 {
        self.autograd_meta().state().accumulations
    }

    /// The name of the node that made this tensor (`"MulBackward0"`, ...), if any.
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        current_grad_fn(self).map(|n| n.name)
    }

    /// Keeps this non-leaf's gradient in `.grad` during backward (leaves always keep theirs).
    pub fn retain_grad(&self) -> Result<()> {
        if !self.requires_grad() {
            return Err(Error::Autograd {
                message: "retain_grad: this tensor does not require grad, so it gets no \
                          gradient"
                    .into(),
            });
        }
        let Some(node) = current_grad_fn(self) else {
            return Ok(()); // a leaf keeps its gradient anyway
        };
        {
            let mut st = self.autograd_meta().state();
            if st.retains_grad {
                return Ok(());
            }
            st.retains_grad = true;
        }
        let weak = self.downgrade();
        let hook: GradHook = Arc::new(move |g: &Tensor| {
            if let Some(t) = Tensor::upgrade(&weak) {
                let mut st = t.autograd_meta().state();
                let next = match st.grad.take() {
                    Some(prev) => prev.add(g)?,
                    None => g.deep_clone()?,
                };
                st.grad.set(Some(next));
            }
            Ok(None)
        });
        node.hooks().push((0, hook));
        Ok(())
    }

    /// Whether [`Tensor::retain_grad`] was called on this non-leaf.
    pub fn retains_grad(&self) -> bool {
        self.autograd_meta().state().retains_grad
    }

    /// Runs `hook` on this tensor's gradient during backward; a returned tensor replaces the
    /// gradient.
    pub fn register_hook(
        &self,
        hook: impl Fn(&Tensor) -> Result<Option<Tensor>> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        if !self.requires_grad() {
            return Err(Error::Autograd {
                message: "register_hook: this tensor does not require grad, so a hook on its \
                          gradient would never run"
                    .into(),
            });
        }
        let id = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
        let hook: GradHook = Arc::new(hook);
        match current_grad_fn(self) {
            Some(node) => node.hooks().push((id, hook)),
            None => self.autograd_meta().state().leaf_hooks.push((id, hook)),
        }
        Ok(HookHandle {
            id,
            tensor: self.downgrade(),
        })
    }

    /// Runs `hook` on this leaf after each backward has accumulated a gradient into its
    /// `.grad` (PyTorch's `register_post_accumulate_grad_hook`): the hook sees the complete
    /// gradient and may use it and drop it (`set_grad(None)`), which is how an optimizer
    /// steps inside backward. Leaves only.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use strata_core::{DType, Tensor};
    /// let w = Tensor::ones(&[3], DType::F32)?.requires_grad_(true)?;
    /// let seen = Arc::new(AtomicUsize::new(0));
    /// let s = seen.clone();
    /// w.register_post_accumulate_grad_hook(move |leaf| {
    ///     s.fetch_add(leaf.grad().map_or(0, |g| g.numel()), Ordering::SeqCst);
    ///     leaf.set_grad(None) // the gradient is freed as soon as it was used
    /// })?;
    /// w.mul(&w)?.sum(None, false)?.backward()?;
    /// assert_eq!(seen.load(Ordering::SeqCst), 3);
    /// assert!(w.grad().is_none());
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    pub fn register_post_accumulate_grad_hook(
        &self,
        hook: impl Fn(&Tensor) -> Result<()> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        if !self.requires_grad() || !self.is_leaf() {
            return Err(Error::Autograd {
                message: "register_post_accumulate_grad_hook: only a leaf that requires grad \
                          accumulates gradients. Hint: register it on the parameter, or use \
                          register_hook on an intermediate tensor"
                    .into(),
            });
        }
        let id = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
        self.autograd_meta()
            .state()
            .post_accumulate_hooks
            .push((id, Arc::new(hook)));
        Ok(HookHandle {
            id,
            tensor: self.downgrade(),
        })
    }

    /// Computes the gradient of this scalar with respect to every leaf that requires grad,
    /// adding it to their `.grad`, and frees the graph's saved tensors.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?.requires_grad_(true)?;
    /// let loss = x.mul(&x)?.sum(None, false)?;
    /// loss.backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
    /// assert!(loss.backward().is_err()); // the graph was freed
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn backward(&self) -> Result<()> {
        self.backward_with(None, false)
    }

    /// [`Tensor::backward`] with an explicit output gradient (needed for non-scalars) and
    /// `retain_graph` (keep saved tensors for another backward).
    #[track_caller]
    pub fn backward_with(&self, gradient: Option<&Tensor>, retain_graph: bool) -> Result<()> {
        let root = root_edge(self, gradient)?;
        run(vec![root], retain_graph, Sink::Accumulate)?;
        Ok(())
    }

    /// Cuts this tensor off its history in place (`requires_grad` becomes false). Views
    /// cannot be detached in place: use [`Tensor::detach`]. Inside inference mode, and on an
    /// inference tensor, it does nothing, as in PyTorch.
    pub fn detach_(&self) -> Result<Tensor> {
        // PyTorch's detach_ does its work (and its check on views) in the autograd layer,
        // which inference mode skips, and which inference tensors never reach.
        if is_inference_mode_enabled() || self.is_inference() {
            return Ok(self.clone());
        }
        if self.view_info().is_some() {
            return Err(Error::Autograd {
                message: "detach_: a view cannot be detached in place. Hint: use detach(), \
                          which returns a new tensor"
                    .into(),
            });
        }
        let meta = self.autograd_meta();
        meta.state().grad_fn = None;
        meta.set_requires_grad(false);
        Ok(self.clone())
    }

    /// True for a tensor made inside inference mode (it has no version counter and autograd
    /// refuses it outside inference mode).
    pub fn is_inference(&self) -> bool {
        self.body().storage.is_inference()
    }

    /// A handle sharing storage, layout and version counter, without autograd history.
    pub(crate) fn detached_alias(&self) -> Tensor {
        let body = self.body();
        Tensor::from_parts(body.storage, body.layout, self.dtype(), None)
    }
}

#[track_caller]
fn root_edge(t: &Tensor, gradient: Option<&Tensor>) -> Result<(Edge, Tensor)> {
    let Some(edge) = gradient_edge(t) else {
        return Err(Error::Autograd {
            message: "backward: this tensor does not require grad and has no grad_fn, so \
                      there is nothing to differentiate. Hint: call requires_grad_(true) on \
                      the parameters before the forward pass, and run it outside no_grad"
                .into(),
        });
    };
    let g = match gradient {
        Some(g) => {
            if g.shape() != t.shape() {
                return Err(Error::Autograd {
                    message: format!(
                        "backward: the gradient has shape {:?} but the tensor has shape {:?}",
                        g.shape(),
                        t.shape()
                    ),
                });
            }
            g.clone()
        }
        None => {
            if t.numel() != 1 {
                return Err(Error::Autograd {
                    message: format!(
                        "backward: a gradient can be created implicitly only for a scalar \
                         output, this one has shape {:?}. Hint: reduce it first (sum or \
                         mean), or pass the output gradient with backward_with",
                        t.shape()
                    ),
                });
            }
            // Not a closure: the seed is attributed to the caller of backward.
            let _no_grad = crate::mode::GradModeGuard::no_grad();
            crate::Tensor::on(t.device()).ones(&t.shape(), t.dtype())?
        }
    };
    Ok((edge, g))
}

/// Gradients of `outputs` (scalars, or with `grad_outputs`) with respect to `inputs`,
/// returned instead of accumulated into `.grad`. An input the outputs do not depend on is an
/// error unless `allow_unused`, which gives `None` for it.
///
/// ```
/// use strata_core::{autograd, Tensor};
/// let x = Tensor::from_vec(vec![3.0f32], &[1])?.requires_grad_(true)?;
/// let y = x.mul(&x)?.sum(None, false)?;
/// let g = autograd::grad(&[&y], &[&x], false)?;
/// assert_eq!(g[0].as_ref().unwrap().to_vec::<f32>()?, vec![6.0]);
/// assert!(x.grad().is_none());
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn grad(
    outputs: &[&Tensor],
    inputs: &[&Tensor],
    allow_unused: bool,
) -> Result<Vec<Option<Tensor>>> {
    grad_with(outputs, None, inputs, false, allow_unused)
}

/// [`grad`] with output gradients and `retain_graph`.
#[track_caller]
pub fn grad_with(
    outputs: &[&Tensor],
    grad_outputs: Option<&[&Tensor]>,
    inputs: &[&Tensor],
    retain_graph: bool,
    allow_unused: bool,
) -> Result<Vec<Option<Tensor>>> {
    let mut roots = Vec::with_capacity(outputs.len());
    for (i, o) in outputs.iter().enumerate() {
        let g = grad_outputs.and_then(|gs| gs.get(i).copied());
        roots.push(root_edge(o, g)?);
    }
    let mut keys = Vec::with_capacity(inputs.len());
    for (i, t) in inputs.iter().enumerate() {
        let Some(edge) = gradient_edge(t) else {
            return Err(Error::Autograd {
                message: format!(
                    "grad: input {i} does not require grad. Hint: call requires_grad_(true) on \
                     it before the forward pass"
                ),
            });
        };
        keys.push(edge.node);
    }
    let ptrs = keys.iter().map(Arc::as_ptr).collect();
    let captured = run(roots, retain_graph, Sink::Capture(ptrs))?;
    keys.iter()
        .enumerate()
        .map(|(i, k)| match captured.get(&Arc::as_ptr(k)) {
            Some(g) => Ok(Some(g.clone())),
            None if allow_unused => Ok(None),
            None => Err(Error::Autograd {
                message: format!(
                    "grad: input {i} was not used to compute the outputs. Hint: pass \
                     allow_unused = true to get None for it"
                ),
            }),
        })
        .collect()
}
