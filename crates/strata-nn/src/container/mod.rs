//! Containers: `Sequential`, `ModuleList`, `ModuleDict`, and checkpointing a `Sequential` in
//! segments.

mod checkpoint;
mod dict;
mod list;
mod sequential;

pub use checkpoint::checkpoint_sequential;
pub use dict::ModuleDict;
pub use list::ModuleList;
pub use sequential::Sequential;

#[cfg(test)]
mod tests;
