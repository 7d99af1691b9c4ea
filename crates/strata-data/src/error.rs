//! Why data could not be read, or a batch not built.

use std::path::PathBuf;

/// The data pipeline's result.
pub type Result<T> = std::result::Result<T, DataError>;

/// What went wrong in a dataset, a file or the loader.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A file's contents are not what its format says (truncated, corrupt, another format).
    #[error("{}: {message}", path.display())]
    Format {
        /// The file (or the name given to bytes read from elsewhere).
        path: PathBuf,
        /// What is wrong, and where in the file.
        message: String,
    },
    /// A dataset's files are not where it looked.
    #[error("{message}; {hint}")]
    NotFound {
        /// What was looked for, and where.
        message: String,
        /// How to get the files.
        hint: String,
    },
    /// A sample could not be built: its dataset returned an error or panicked.
    #[error("sample {index}: {message}")]
    Sample {
        /// The sample's index in the dataset.
        index: usize,
        /// What happened.
        message: String,
    },
    /// A dataset, sampler or loader setting that cannot work.
    #[error("{what}: {message}")]
    Argument {
        /// The setting or call.
        what: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A tensor operation failed.
    #[error(transparent)]
    Tensor(#[from] strata_core::Error),
}

impl DataError {
    /// An [`DataError::Argument`].
    pub(crate) fn argument(what: &'static str, message: impl Into<String>) -> Self {
        DataError::Argument {
            what,
            message: message.into(),
        }
    }

    /// A [`DataError::Format`] for `path`.
    pub(crate) fn format(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        DataError::Format {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// `?` turns a data error into the program's one error type; a tensor op's error inside it
/// comes out as itself, anything else as `Error::Other` (`downcast_ref::<DataError>()`).
impl From<DataError> for strata_core::Error {
    fn from(error: DataError) -> strata_core::Error {
        match error {
            DataError::Tensor(e) => e,
            e => strata_core::Error::wrap(e),
        }
    }
}
