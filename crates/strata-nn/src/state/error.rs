//! Why a state dict could not be saved, read or loaded.

use std::path::PathBuf;

/// A shape or dtype that does not fit the module's tensor of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The state-dict key.
    pub key: String,
    /// What the module's tensor is (`[64, 32] f32`).
    pub expected: String,
    /// What the state dict holds.
    pub found: String,
}

/// Everything that keeps a state dict from loading, found before anything is written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadProblems {
    /// Keys the module has and the dict lacks (an error when loading strictly).
    pub missing: Vec<String>,
    /// Keys the dict has and the module lacks (an error when loading strictly).
    pub unexpected: Vec<String>,
    /// Keys whose shape or dtype kind does not fit (always an error).
    pub mismatched: Vec<Mismatch>,
}

impl std::fmt::Display for LoadProblems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("missing keys: {}", self.missing.join(", ")));
        }
        if !self.unexpected.is_empty() {
            parts.push(format!("unexpected keys: {}", self.unexpected.join(", ")));
        }
        for m in &self.mismatched {
            parts.push(format!(
                "`{}`: the module has {}, the state dict {}",
                m.key, m.expected, m.found
            ));
        }
        f.write_str(&parts.join("; "))
    }
}

/// An error from saving, reading or loading a state dict.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system reported.
        source: std::io::Error,
    },
    /// The file is not a well-formed safetensors file (before any key could be blamed).
    #[error("{path}: not a valid safetensors file: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// One entry of the file or dict is unusable.
    #[error("{path}: key `{key}`: {message}")]
    Entry {
        /// The file (empty for a dict in memory).
        path: PathBuf,
        /// The entry's key.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// The dict does not fit the module; nothing was loaded.
    #[error("the state dict does not fit the module, nothing was loaded: {0}")]
    Mismatch(LoadProblems),
    /// A tensor operation failed.
    #[error(transparent)]
    Tensor(#[from] strata_core::Error),
}

impl StateError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        StateError::Io {
            path: path.to_owned(),
            source,
        }
    }

    pub(crate) fn format(path: &std::path::Path, message: impl Into<String>) -> Self {
        StateError::Format {
            path: path.to_owned(),
            message: message.into(),
        }
    }

    pub(crate) fn entry(path: &std::path::Path, key: &str, message: impl Into<String>) -> Self {
        StateError::Entry {
            path: path.to_owned(),
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

impl From<StateError> for strata_core::Error {
    /// A state-dict error as the program's one error type (so `?` works in functions that
    /// return `strata::Result`): tensor errors pass through, the others become
    /// `Error::Other`, whose `downcast_ref::<StateError>()` gives them back.
    fn from(e: StateError) -> Self {
        match e {
            StateError::Tensor(e) => e,
            other => strata_core::Error::wrap(other),
        }
    }
}
