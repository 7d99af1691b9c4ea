//! Allocation failures: a recoverable out-of-memory, or a failure of the device itself.

use crate::caching::OomReport;

/// The message of [`AllocError::OutOfMemory`]: the full report when there is one.
fn describe_oom(
    device: &str,
    requested: usize,
    allocated: usize,
    limit: Option<usize>,
    report: Option<&OomReport>,
) -> String {
    if let Some(r) = report {
        return r.to_string();
    }
    let limit_text = match limit {
        Some(l) => format!(" under a limit of {l} bytes"),
        None => String::new(),
    };
    format!(
        "out of memory on {device}: tried to allocate {requested} bytes with {allocated} bytes \
         already allocated{limit_text}. Free tensors you no longer need (drop them), use a \
         smaller batch, or raise the memory limit"
    )
}

/// Why an allocation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AllocError {
    /// Not enough memory under the device's capacity or the configured limit. Recoverable:
    /// free tensors, lower the batch size, or raise the limit, then try again.
    #[error("{}", describe_oom(device, *requested, *allocated, *limit, report.as_deref()))]
    OutOfMemory {
        /// Device name, e.g. `cpu`.
        device: String,
        /// Bytes asked for.
        requested: usize,
        /// Bytes allocated to live blocks at the time of the request.
        allocated: usize,
        /// The configured limit, if any.
        limit: Option<usize>,
        /// The caching allocator's full report (what is reserved but unallocated, the largest
        /// free block, who holds the memory, what to try), when a caching allocator failed.
        report: Option<Box<OomReport>>,
    },
    /// The request can never be satisfied (for example its size overflows).
    #[error("invalid allocation request: {0}")]
    Invalid(String),
}
