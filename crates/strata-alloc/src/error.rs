//! Allocation failures: a recoverable out-of-memory, or a failure of the device itself.

/// Why an allocation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Not enough memory under the device's capacity or the configured limit. Recoverable:
    /// free tensors, lower the batch size, or raise the limit, then try again.
    #[error(
        "out of memory on {device}: tried to allocate {requested} bytes with {allocated} bytes \
         already allocated{limit_text}. Free tensors you no longer need (drop them), use a \
         smaller batch, or raise the memory limit",
        limit_text = match limit { Some(l) => format!(" under a limit of {l} bytes"), None => String::new() }
    )]
    OutOfMemory {
        /// Device name, e.g. `cpu`.
        device: String,
        /// Bytes asked for.
        requested: usize,
        /// Bytes allocated to live blocks at the time of the request.
        allocated: usize,
        /// The configured limit, if any.
        limit: Option<usize>,
    },
    /// The request can never be satisfied (for example its size overflows).
    #[error("invalid allocation request: {0}")]
    Invalid(String),
}
