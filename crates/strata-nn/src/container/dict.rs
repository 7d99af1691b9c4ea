//! `ModuleDict`: modules by name, in insertion order.

use std::sync::Arc;

use strata_core::{Error, Result, Tensor};

use crate::module::{Module, ModuleCore};

/// Holds modules under names of the caller's choosing, in insertion order (`nn.ModuleDict`).
/// It has no forward of its own.
#[derive(Debug, Clone)]
pub struct ModuleDict {
    core: ModuleCore,
}

impl ModuleDict {
    /// An empty dictionary.
    pub fn new() -> Self {
        ModuleDict {
            core: ModuleCore::library("ModuleDict"),
        }
    }

    /// Adds `m` under `name` (non-empty, without `.`, not taken yet).
    pub fn insert<M: Module>(&self, name: &str, m: M) -> Result<()> {
        self.core.register_dyn(name, Arc::new(m))
    }

    /// The module named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Module>> {
        self.core
            .children()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m)
    }

    /// The names, in insertion order.
    pub fn keys(&self) -> Vec<String> {
        self.core.children().into_iter().map(|(n, _)| n).collect()
    }

    /// The number of modules.
    pub fn len(&self) -> usize {
        self.core.children().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for ModuleDict {
    fn default() -> Self {
        Self::new()
    }
}

impl Module for ModuleDict {
    fn core(&self) -> &ModuleCore {
        &self.core
    }

    /// A dictionary has no forward (as in PyTorch): this is always an error.
    fn forward(&self, _x: &Tensor) -> Result<Tensor> {
        Err(Error::Unsupported {
            op: "ModuleDict::forward",
            message: "a ModuleDict has no forward; look its modules up with get() instead".into(),
        })
    }
}
