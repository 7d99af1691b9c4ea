//! What `#[derive(Module)]` builds on: [`Forward`], the computation a derived module runs,
//! and [`ModuleField`], how each field registers itself.

use std::sync::Arc;

use strata_core::{Result, Tensor};

use crate::container::ModuleList;
use crate::module::{Module, ModuleCore, TensorSlot};

/// The computation of a `#[derive(Module)]` struct: the derive implements
/// [`Module::forward`] by calling this. Run the module with [`Module::call`].
pub trait Forward {
    /// The computation, as [`Module::forward`].
    fn forward(&self, x: &Tensor) -> Result<Tensor>;
}

/// A field a derived module registers under its name: a module (a child), `Vec` of modules
/// (children `name.0`, `name.1`, ... as a [`ModuleList`]), `Option` of one (registered when
/// present), or a [`TensorSlot`] (a parameter; `#[module(buffer)]` makes it a buffer).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a module, a list or option of modules, or a TensorSlot",
    label = "#[derive(Module)] registers this field",
    note = "mark a field that is not part of the model with #[module(skip)]"
)]
pub trait ModuleField {
    /// Registers this field on `core` as `name`.
    fn register_field(&self, core: &ModuleCore, name: &str) -> Result<()>;
}

impl<M: Module + Clone> ModuleField for M {
    fn register_field(&self, core: &ModuleCore, name: &str) -> Result<()> {
        core.register_module(name, self)
    }
}

impl<M: Module + Clone> ModuleField for Vec<M> {
    fn register_field(&self, core: &ModuleCore, name: &str) -> Result<()> {
        let list = ModuleList::new();
        for m in self {
            list.push(Arc::new(m.clone()))?;
        }
        core.register_module(name, &list)
    }
}

impl<F: ModuleField> ModuleField for Option<F> {
    fn register_field(&self, core: &ModuleCore, name: &str) -> Result<()> {
        match self {
            Some(f) => f.register_field(core, name),
            None => Ok(()),
        }
    }
}

impl ModuleField for TensorSlot {
    fn register_field(&self, core: &ModuleCore, name: &str) -> Result<()> {
        core.register_parameter_slot(name, self)
    }
}

/// The paths the derive's generated code names, so it needs only `strata::nn` (or
/// `strata_nn`) in scope.
#[doc(hidden)]
pub mod __derive {
    pub use super::{Forward, ModuleField};
    pub use crate::module::{Module, ModuleCore, TensorSlot};
    pub use strata_core::{Result, Tensor};
}
