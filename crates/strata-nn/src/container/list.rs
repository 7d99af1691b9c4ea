//! `ModuleList`: an indexed list of modules whose owner decides how to run them.

use std::sync::Arc;

use strata_core::{Error, Result, Tensor};

use crate::module::{Module, ModuleCore};

/// Holds modules under `"0"`, `"1"`, ... so their parameters are registered
/// (`nn.ModuleList`). It has no forward of its own: its owner iterates over it.
#[derive(Debug, Clone)]
pub struct ModuleList {
    core: ModuleCore,
}

indexed_container!(ModuleList);

impl Module for ModuleList {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    /// A list has no forward (as in PyTorch): this is always an error.
    fn forward(&self, _x: &Tensor) -> Result<Tensor> {
        Err(Error::Unsupported {
            op: "ModuleList::forward",
            message: "a ModuleList has no forward; iterate over its modules() instead".into(),
        })
    }
}
