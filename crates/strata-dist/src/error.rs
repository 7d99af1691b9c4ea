//! What can go wrong between processes.

use thiserror::Error;

/// A failure of a collective or of the process group itself. It reaches callers inside a
/// [`strata_core::Error`] (`Error::downcast_ref::<DistError>()` gives it back).
#[derive(Debug, Error)]
pub enum DistError {
    /// The communication library returned an error code from a call.
    #[error("{op}: the MPI call failed with error code {code}: {message}")]
    Mpi {
        /// The collective that failed.
        op: &'static str,
        /// MPI's error code.
        code: i32,
        /// MPI's own description of the code.
        message: String,
    },
    /// The process group could not be created or used.
    #[error("{op}: {message}")]
    Group {
        /// What was asked of the group.
        op: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Ranks disagree about something they must agree on (sizes, parameter counts).
    #[error("{op}: the ranks disagree: {message}")]
    Mismatch {
        /// What was being checked.
        op: &'static str,
        /// What differed.
        message: String,
    },
}

impl From<DistError> for strata_core::Error {
    fn from(e: DistError) -> Self {
        strata_core::Error::wrap(e)
    }
}
