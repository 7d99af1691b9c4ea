//! Errors of the diagnostics.

use strata_core::Device;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// A lower layer refused (an unknown device, ...).
    #[error(transparent)]
    Core(#[from] strata_core::Error),
    /// A plan cannot be made as asked (a replica unlike its model, ...).
    #[error("plan: {0}")]
    Plan(String),
    /// A module's tensors or its inputs are not all on one device.
    #[error(
        "device mismatch: {expected_from} {} on {expected}, but {}. Hint: move them with \
         `to_device`, or make the inputs on {expected}",
        if expected_from.ends_with('s') { "are" } else { "is" },
        list(.mismatched)
    )]
    DeviceMismatch {
        /// The device most of the module's parameters are on.
        expected: Device,
        /// What that device was taken from (`"the module's parameters"`).
        expected_from: String,
        /// Every tensor elsewhere: its name and device.
        mismatched: Vec<(String, Device)>,
    },
}

fn list(m: &[(String, Device)]) -> String {
    m.iter()
        .map(|(n, d)| format!("{n} is on {d}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The diagnostics' result.
pub type Result<T> = std::result::Result<T, ProfileError>;

/// `?` turns a diagnostic's error into the program's one error type; a tensor op's error
/// inside it comes out as itself, anything else as `Error::Other`
/// (`downcast_ref::<ProfileError>()`).
impl From<ProfileError> for strata_core::Error {
    fn from(error: ProfileError) -> strata_core::Error {
        match error {
            ProfileError::Core(e) => e,
            e => strata_core::Error::wrap(e),
        }
    }
}
