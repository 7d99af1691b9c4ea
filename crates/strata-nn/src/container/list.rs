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

impl ModuleList {
    /// An empty list.
    pub fn new() -> Self {
        ModuleList {
            core: ModuleCore::new("ModuleList"),
        }
    }

    /// Appends `m` and returns the list; refused when `m` contains this list.
    pub fn append<M: Module>(self, m: M) -> Result<Self> {
        self.push(Arc::new(m))?;
        Ok(self)
    }

    /// Appends a shared module under the next index; an error when `m` is (or contains)
    /// this list.
    pub fn push(&self, m: Arc<dyn Module>) -> Result<()> {
        let name = self.len().to_string();
        self.core.register_dyn(&name, m)
    }

    /// The number of modules.
    pub fn len(&self) -> usize {
        self.core.children().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The module at `index`.
    pub fn get(&self, index: usize) -> Option<Arc<dyn Module>> {
        self.core.children().get(index).map(|(_, m)| m.clone())
    }

    /// The modules, in order.
    pub fn modules(&self) -> Vec<Arc<dyn Module>> {
        self.core.children().into_iter().map(|(_, m)| m).collect()
    }
}

impl Default for ModuleList {
    fn default() -> Self {
        Self::new()
    }
}

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
