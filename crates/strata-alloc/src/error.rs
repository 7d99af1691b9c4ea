//! Allocation failures: a recoverable out-of-memory (with the report of what was held and by
//! whom), or a request that can never be served.
//!
//! The allocators build these errors; nothing here knows how an allocator works, so this module
//! sits below every allocator (it needs only sites, sizes and stream ids).

use std::fmt;

use crate::backing::StreamId;
use crate::site::SiteUsage;
use crate::size::format_size;

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

/// How many sites an out-of-memory report lists.
pub const OOM_TOP_SITES: usize = 5;

/// Why an allocation failed, with what the allocator held at that moment.
#[derive(Debug, Clone, PartialEq)]
pub struct OomReport {
    /// Device name (`cpu`, `virtual`).
    pub device: String,
    /// The caller's bytes.
    pub requested: usize,
    /// The request rounded to the allocator's block size.
    pub rounded: usize,
    /// The segment size the allocator tried to obtain (what PyTorch's message calls "Tried to
    /// allocate").
    pub segment_size: usize,
    /// The stream of the request.
    pub stream: StreamId,
    /// Bytes in live blocks.
    pub allocated: usize,
    /// Bytes held from the device.
    pub reserved: usize,
    /// `reserved - allocated`: cached (and pending-free) memory that could not serve the
    /// request. Large values mean fragmentation.
    pub reserved_unallocated: usize,
    /// The memory limit, if one is set.
    pub limit: Option<usize>,
    /// The device's free bytes.
    pub device_free: usize,
    /// The device's capacity.
    pub device_total: usize,
    /// The largest free cached block.
    pub largest_free_block: usize,
    /// The sites holding the most live memory, largest first.
    pub top_sites: Vec<SiteUsage>,
    /// Whether expandable segments were on.
    pub expandable_segments: bool,
}

impl fmt::Display for OomReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of memory on {}: tried to allocate {} ({} bytes",
            self.device,
            format_size(self.requested),
            self.requested
        )?;
        if self.segment_size > self.rounded {
            write!(
                f,
                "; no cached block fitted, so a new {} segment was needed",
                format_size(self.segment_size)
            )?;
        }
        writeln!(f, ").")?;
        write!(
            f,
            "The device has {} in total, of which {} is free",
            format_size(self.device_total),
            format_size(self.device_free)
        )?;
        match self.limit {
            Some(l) => writeln!(f, "; this allocator may hold at most {}.", format_size(l))?,
            None => writeln!(f, ".")?,
        }
        writeln!(
            f,
            "Of the {} this allocator holds, {} is allocated to live tensors and {} is \
             reserved but unallocated (the largest free block is {}).",
            format_size(self.reserved),
            format_size(self.allocated),
            format_size(self.reserved_unallocated),
            format_size(self.largest_free_block)
        )?;
        if !self.top_sites.is_empty() {
            writeln!(f, "Largest live allocations:")?;
            for s in &self.top_sites {
                writeln!(
                    f,
                    "  {:>12} in {:>5} block{} from {}",
                    format_size(s.bytes),
                    s.count,
                    if s.count == 1 { " " } else { "s" },
                    s.site
                )?;
            }
        }
        write!(
            f,
            "What to try: drop tensors you no longer need (above: who holds the memory), use a \
             smaller batch"
        )?;
        if self.limit.is_some() {
            write!(f, ", or raise the memory limit")?;
        }
        write!(
            f,
            ". This allocator already returned its wholly free cached segments before failing; \
             if other allocators share the device, empty_cache() on them frees theirs."
        )?;
        if !self.expandable_segments
            && self.reserved_unallocated > 0
            && self.reserved_unallocated >= self.rounded.min(self.reserved / 4).max(1)
        {
            write!(
                f,
                " Much memory is reserved but unallocated: set \
                 STRATA_ALLOC_CONF=expandable_segments:True to reduce fragmentation."
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for OomReport {}
