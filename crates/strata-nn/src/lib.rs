//! strata's nn modules: PyTorch's `torch.nn` over strata tensors.
//!
//! - [`Module`]: the trait every layer implements, over a shared registry ([`ModuleCore`]):
//!   parameters, buffers and children with PyTorch's dotted names, training mode, scopes that
//!   name each module in memory reports, in-place device and dtype conversion.
//! - The layers ([`Linear`], [`Conv2d`], [`Sequential`], ...) with PyTorch's defaults.
//! - [`init`]: the initialisers of `torch.nn.init`.
//! - [`state`]: state dicts, saved and loaded as safetensors files that PyTorch reads.
//! - [`prune`]: magnitude and random pruning with masks.
//! - [`optim`]: optimizers, learning-rate schedules, gradient clipping, optimizer in backward.
//! - [`gpt`]: nanoGPT's GPT, with its module names.
//! - [`amp`]: loss scaling for f16 mixed precision ([`amp::GradScaler`]).

pub mod amp;
pub mod container;
mod derive;
pub mod gpt;
pub mod init;
pub mod layers;
pub mod module;
pub mod optim;
pub mod prune;
pub mod state;

pub use container::{checkpoint_sequential, Checkpointing, ModuleDict, ModuleList, Sequential};
#[doc(hidden)]
pub use derive::__derive;
pub use derive::{Forward, ModuleField};
pub use layers::*;
pub use module::{Module, ModuleCore, TensorSlot};
/// `#[derive(Module)]`: registers every field that is a module, a `Vec` or `Option` of
/// modules, or a [`TensorSlot`]; see the [`module`] docs.
pub use strata_derive::Module;
