//! Containers: `Sequential`, `ModuleList`, `ModuleDict`, and checkpointing a `Sequential` in
//! segments.

/// The inherent methods of a container that registers its modules under `"0"`, `"1"`, ...:
/// building, appending (refused when the module contains the container), and reading.
macro_rules! indexed_container {
    ($name:ident) => {
        impl $name {
            #[doc = concat!("An empty `", stringify!($name), "`.")]
            pub fn new() -> Self {
                $name {
                    core: ModuleCore::library(stringify!($name)),
                }
            }

            /// Appends `m` under the next index and returns the container; refused (as by
            /// `push`) when `m` contains this container.
            pub fn append<M: Module>(self, m: M) -> Result<Self> {
                self.push(Arc::new(m))?;
                Ok(self)
            }

            /// Appends a shared module under the next index; an error when `m` is (or
            /// contains) this container, which would make it contain itself.
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

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }
    };
}

mod checkpoint;
mod dict;
mod list;
mod sequential;

pub use checkpoint::{checkpoint_sequential, Checkpointing};
pub use dict::ModuleDict;
pub use list::ModuleList;
pub use sequential::Sequential;

#[cfg(test)]
mod tests;
