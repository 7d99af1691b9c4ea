//! State dicts: a module's parameters and persistent buffers under PyTorch's key names,
//! saved and read as safetensors files (`safetensors.torch.load_file` reads what
//! [`StateDict::save`] writes, and the other way round).
//!
//! ```
//! use strata_nn::state::{LoadOptions, StateDictExt};
//! use strata_nn::{LayerNorm, Linear, Module, Sequential};
//! let dir = std::env::temp_dir().join(format!("strata-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).ok();
//! let path = dir.join("model.safetensors");
//! let a = Sequential::new().append(Linear::new(4, 4, true)?)?.append(LayerNorm::new(&[4])?)?;
//! a.save(&path)?;
//! let b = Sequential::new().append(Linear::new(4, 4, true)?)?.append(LayerNorm::new(&[4])?)?;
//! b.load(&path, LoadOptions::default())?;       // copies into b's parameters
//! assert_eq!(a.state_dict().keys(), b.state_dict().keys());
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), strata_core::Error>(())
//! ```

mod error;
mod format;
mod load;
mod mapping;

use std::path::Path;

use strata_core::Tensor;

pub use error::{LoadProblems, Mismatch, StateError};
pub use load::{LoadOptions, LoadReport, StateDictExt};

/// Tensors by key, in order: a module's parameters and persistent buffers
/// (`0.weight`, `1.running_mean`, `1.num_batches_tracked`, ...).
#[derive(Debug, Clone, Default)]
pub struct StateDict {
    entries: Vec<(String, Tensor)>,
    /// Strings saved in the file's `__metadata__` (an optimizer's step counts and groups).
    metadata: format::Metadata,
}

impl StateDict {
    /// An empty dict.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces `key`.
    pub fn insert(&mut self, key: impl Into<String>, t: Tensor) {
        let key = key.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = t,
            None => self.entries.push((key, t)),
        }
    }

    /// Removes `key`, returning its tensor.
    pub fn remove(&mut self, key: &str) -> Option<Tensor> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    /// The tensor under `key`.
    pub fn get(&self, key: &str) -> Option<&Tensor> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, t)| t)
    }

    /// The keys, in order.
    pub fn keys(&self) -> Vec<String> {
        self.entries.iter().map(|(k, _)| k.clone()).collect()
    }

    /// The entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.entries.iter().map(|(k, t)| (k.as_str(), t))
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the dict to `path` as a safetensors file, atomically (a temporary file beside
    /// it, synced, then renamed over it).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), StateError> {
        format::write(path.as_ref(), &self.entries, &self.metadata)
    }

    /// The dict as the bytes of a safetensors file (what [`StateDict::save`] writes), for a
    /// container that holds one inside its own framing.
    pub fn to_bytes(&self) -> Result<Vec<u8>, StateError> {
        format::encode(&self.entries, &self.metadata)
    }

    /// Reads a dict from the bytes of a safetensors file, copying every tensor; `origin`
    /// names the bytes in errors. Every problem is an error, as for [`StateDict::load`].
    pub fn from_bytes(bytes: &[u8], origin: impl AsRef<Path>) -> Result<StateDict, StateError> {
        let path = origin.as_ref();
        let header = format::parse(path, bytes)?;
        let mut entries = Vec::with_capacity(header.entries.len());
        for e in &header.entries {
            let data = &bytes[header.data_start + e.start..header.data_start + e.end];
            entries.push((e.key.clone(), format::decode(path, e, data)?));
        }
        Ok(StateDict {
            entries,
            metadata: header.metadata,
        })
    }

    /// Sets a metadata string, saved in the file's `__metadata__`.
    pub fn set_metadata(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.metadata.insert(key.into(), value.into());
    }

    /// Every metadata string, by key.
    pub fn metadata_entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The metadata string under `key` (a loaded file's `format` is `pt`).
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).map(String::as_str)
    }

    /// Reads a safetensors file. The file is memory-mapped privately (copy-on-write):
    /// tensors whose bytes start 8-byte aligned view the mapping without a copy, the rest are
    /// copied; the mapping is counted in the host's `mapped_bytes` statistic until the last
    /// tensor viewing it drops. Every problem (a truncated file, a bad header, an entry
    /// whose bytes do not match its shape, an unsupported dtype) is an error naming the key.
    ///
    /// The file must not be truncated or rewritten in place by another program while
    /// tensors view it (replacing it by a rename, as [`StateDict::save`] does, is fine).
    pub fn load(path: impl AsRef<Path>) -> Result<StateDict, StateError> {
        let (entries, metadata) = mapping::read(path.as_ref())?;
        Ok(StateDict { entries, metadata })
    }
}

impl FromIterator<(String, Tensor)> for StateDict {
    fn from_iter<I: IntoIterator<Item = (String, Tensor)>>(iter: I) -> Self {
        let mut d = StateDict::new();
        for (k, t) in iter {
            d.insert(k, t);
        }
        d
    }
}

#[cfg(test)]
mod tests;
