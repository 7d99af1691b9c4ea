//! The `Module` trait: PyTorch's `nn.Module` as a Rust trait over a shared registry
//! ([`ModuleCore`]).
//!
//! Most modules are structs with `#[derive(Module)]` (re-exported beside the trait): the
//! derive registers every field that is a module, a `Vec` or `Option` of modules, or a
//! [`TensorSlot`] under its name on first use, and the struct implements `Forward`. By
//! hand, as below (for children known only at run time), an author implements
//! [`Module::core`] and [`Module::forward`] and registers parameters, buffers and children
//! on the core in the constructor; users run a module with
//! [`Module::call`], which enters the module's scope (so memory reports name the part of
//! the model that allocated) and runs the pre-forward hooks before `forward`.
//!
//! ```
//! use strata_core::{DType, Result, Tensor};
//! use strata_nn::{Linear, Module, ModuleCore, ReLU};
//!
//! #[derive(Clone)]
//! struct Mlp { core: ModuleCore, fc1: Linear, act: ReLU, fc2: Linear }
//!
//! impl Mlp {
//!     fn new() -> Result<Self> {
//!         let core = ModuleCore::new("Mlp");
//!         let (fc1, act, fc2) = (Linear::new(4, 8, true)?, ReLU::new(), Linear::new(8, 2, true)?);
//!         core.register_module("fc1", &fc1)?;
//!         core.register_module("act", &act)?;
//!         core.register_module("fc2", &fc2)?;
//!         Ok(Mlp { core, fc1, act, fc2 })
//!     }
//! }
//!
//! impl Module for Mlp {
//!     fn core(&self) -> &ModuleCore { &self.core }
//!     fn forward(&self, x: &Tensor) -> Result<Tensor> {
//!         self.fc2.call(&self.act.call(&self.fc1.call(x)?)?)
//!     }
//! }
//!
//! let m = Mlp::new()?;
//! let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
//! assert_eq!(m.call(&Tensor::ones(&[3, 4], DType::F32)?)?.shape().as_slice(), [3, 2]);
//! # Ok::<(), strata_core::Error>(())
//! ```

mod convert;
mod core;

use std::any::Any;
use std::sync::Arc;

use strata_core::{Result, Tensor};

pub(crate) use self::core::join as join_path;
pub use self::core::{ModuleCore, PreForwardHook, TensorSlot};

/// A neural-network module. Implementations are cheap handles (an `Arc` inside, through
/// [`ModuleCore`] and [`TensorSlot`]): clones share parameters, buffers and the training flag,
/// so a clone can move into a checkpointed closure.
pub trait Module: Any + Send + Sync {
    /// The registry of parameters, buffers and children.
    fn core(&self) -> &ModuleCore;

    /// The computation. Call modules through [`call`](Module::call), which wraps this.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// Runs the module on `x`: enters its scope, runs its pre-forward hooks, then `forward`.
    /// What a built-in layer allocates is attributed to the line that called it.
    #[track_caller]
    fn call(&self, x: &Tensor) -> Result<Tensor> {
        let at = std::panic::Location::caller();
        self.core().called_at(at, || self.forward(x))
    }

    /// Every parameter with its dotted name (`0.weight`), in registration order.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.core().named_parameters()
    }

    /// Every parameter, in the order of [`named_parameters`](Module::named_parameters).
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Every buffer with its dotted name (`1.running_mean`), in registration order.
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        self.core()
            .named_buffers()
            .into_iter()
            .map(|(n, t, _)| (n, t))
            .collect()
    }

    /// Puts this module and every descendant in training mode.
    fn train(&self) {
        self.core().set_training(true);
    }

    /// Puts this module and every descendant in evaluation mode (dropout off, batch norm on
    /// its running statistics).
    fn eval(&self) {
        self.core().set_training(false);
    }

    /// Whether the module is in training mode.
    fn is_training(&self) -> bool {
        self.core().is_training()
    }

    /// Drops every parameter's `.grad` (PyTorch's `zero_grad(set_to_none=True)`), freeing
    /// the gradients' memory.
    fn zero_grad(&self) -> Result<()> {
        self.parameters().iter().try_for_each(|p| p.zero_grad(true))
    }

    /// The number of parameter elements.
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(Tensor::numel).sum()
    }

    /// The bytes the parameters' elements take.
    fn parameter_bytes(&self) -> usize {
        self.parameters().iter().map(Tensor::nbytes).sum()
    }

    /// Moves every parameter and buffer (and gradient) to `device` in place: each tensor
    /// stays the same tensor (through [`Tensor::set_data`]), so an optimizer that holds the
    /// parameters sees them moved. Every copy is made before any tensor changes, so an error
    /// changes nothing. Moving to or from the meta device gives the module new tensors
    /// instead, as PyTorch does.
    ///
    /// # Safety
    ///
    /// `set_data`'s contract, for every parameter and buffer of the module: no op may be
    /// using any of them meanwhile, not on another thread through any handle (an optimizer's
    /// or a clone of the module included) and not from a hook or observer that such an op
    /// calls. Converting between training steps, with the other threads' work joined, is
    /// sound.
    unsafe fn to_device(&self, device: strata_core::Device) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { convert::to_device(self.core(), device) }
    }

    /// Converts every floating parameter and buffer (and gradient) to `dtype` in place,
    /// keeping each tensor's identity as [`to_device`](Module::to_device) does; integer
    /// buffers (`num_batches_tracked`) keep their dtype. `dtype` must be floating.
    ///
    /// # Safety
    ///
    /// As for [`to_device`](Module::to_device).
    unsafe fn to_dtype(&self, dtype: strata_core::DType) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { convert::to_dtype(self.core(), dtype) }
    }

    /// Calls `f` on every descendant, children before their parents, and last on this module
    /// (PyTorch's `apply`, used for custom initialisation with [`downcast_ref`]).
    fn apply(&self, f: &mut dyn FnMut(&dyn Module) -> Result<()>) -> Result<()>
    where
        Self: Sized,
    {
        apply_to(self, f)
    }
}

/// [`Module::apply`] for a module behind `dyn`.
pub fn apply_to(module: &dyn Module, f: &mut dyn FnMut(&dyn Module) -> Result<()>) -> Result<()> {
    let mut all = module.core().named_descendants();
    // Parents come before their children; run deepest paths first, as PyTorch's recursion
    // visits children before their parent.
    all.sort_by_key(|(p, _)| std::cmp::Reverse(p.matches('.').count()));
    for (_, m) in &all {
        f(m.as_ref())?;
    }
    f(module)
}

impl dyn Module {
    /// The module as its concrete type, when it is one.
    pub fn downcast_ref<T: Module>(&self) -> Option<&T> {
        (self as &dyn Any).downcast_ref::<T>()
    }
}

/// The module `m` as its concrete type, when it is one (for closures given to
/// [`Module::apply`]).
pub fn downcast_ref<T: Module>(m: &dyn Module) -> Option<&T> {
    m.downcast_ref::<T>()
}

/// Shares `m` behind an `Arc` as a `dyn Module` (containers hold their children so).
pub fn shared<M: Module>(m: M) -> Arc<dyn Module> {
    Arc::new(m)
}
