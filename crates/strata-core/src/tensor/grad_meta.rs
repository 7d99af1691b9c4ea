//! The autograd part of a tensor: whether it requires grad, its `grad_fn`, its `.grad`, its
//! hooks. Changed through `&self`: an atomic flag answers the hot question ("does this
//! require grad?") without a lock, a mutex guards the rest, which is made at its first use:
//! a result computed without grad (most tensors of an inference or evaluation loop) never
//! needs it, and a tensor without it is smaller, cheaper to make and cheaper to drop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use crate::storage::Role;
use crate::tensor::graph::{GradHook, Node, PostAccumulateHook};
use crate::Tensor;

/// Per-tensor autograd state.
#[derive(Default)]
pub(crate) struct AutogradMeta {
    requires_grad: AtomicBool,
    state: OnceLock<Box<Mutex<GradState>>>,
}

impl std::fmt::Debug for AutogradMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutogradMeta")
            .field("requires_grad", &self.requires_grad())
            .finish()
    }
}

#[derive(Default)]
pub(crate) struct GradState {
    /// The node that made this tensor (non-leaves).
    pub grad_fn: Option<Arc<Node>>,
    /// The storage version when `grad_fn` was set: a view whose storage moved on since then
    /// regenerates its `grad_fn` from its base.
    pub fn_version: u32,
    /// `.grad` (leaves, and non-leaves that `retain_grad`).
    pub grad: GradSlot,
    /// The leaf's accumulator, held weakly: it lives as long as a graph uses it.
    pub accumulator: Weak<Node>,
    /// Hooks of a leaf, run before accumulation.
    pub leaf_hooks: Vec<(u64, GradHook)>,
    /// Hooks of a leaf, run after a gradient was accumulated into its `.grad`.
    pub post_accumulate_hooks: Vec<(u64, PostAccumulateHook)>,
    pub retains_grad: bool,
    /// Backward passes that added into `.grad` since it was last cleared or set.
    pub accumulations: u32,
}

/// A tensor's `.grad`: its storage's memory counts as a gradient while it sits here.
#[derive(Default)]
pub(crate) struct GradSlot(Option<Tensor>);

impl GradSlot {
    /// The gradient, if any (another handle to it).
    pub fn get(&self) -> Option<Tensor> {
        self.0.clone()
    }

    /// Puts `new` in the slot, dropping what was there.
    pub fn set(&mut self, new: Option<Tensor>) {
        if let Some(t) = &new {
            t.with_body(|b| b.storage.take_role(Role::Gradient, true));
        }
        if let Some(old) = std::mem::replace(&mut self.0, new) {
            old.release_role(Role::Gradient);
        }
    }

    /// Empties the slot, returning the gradient (no longer counted as one).
    pub fn take(&mut self) -> Option<Tensor> {
        let old = self.0.take();
        if let Some(t) = &old {
            t.with_body(|b| b.storage.take_role(Role::Gradient, false));
        }
        old
    }
}

impl Drop for GradSlot {
    fn drop(&mut self) {
        self.set(None);
    }
}

impl AutogradMeta {
    pub fn requires_grad(&self) -> bool {
        self.requires_grad.load(Ordering::Acquire)
    }

    pub fn set_requires_grad(&self, flag: bool) {
        self.requires_grad.store(flag, Ordering::Release);
    }

    /// Whether the rest of the state was ever made (see [`AutogradMeta::state`]).
    pub fn has_state(&self) -> bool {
        self.state.get().is_some()
    }

    /// Sets `requires_grad` back to false, with no other handle to see it (a spare tensor
    /// object made new; see `tensor::spare`).
    pub fn clear_requires_grad(&mut self) {
        *self.requires_grad.get_mut() = false;
    }

    /// The rest of the state, made at the first call.
    pub fn state(&self) -> MutexGuard<'_, GradState> {
        self.state
            .get_or_init(Box::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}
