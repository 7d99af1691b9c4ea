//! The out-of-memory report: what was asked, what is held and by whom, and what to try.

use std::collections::HashMap;
use std::fmt;

use super::history::TraceAction;
use super::state::State;
use super::summary::format_size;
use crate::backing::{Backing, StreamId};
use crate::Site;

/// Live memory allocated from one site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteUsage {
    /// Where the memory was requested.
    pub site: Site,
    /// Bytes of the live blocks (rounded sizes).
    pub bytes: usize,
    /// The callers' bytes.
    pub requested_bytes: usize,
    /// Number of live blocks.
    pub count: usize,
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

impl State {
    /// Live bytes and blocks grouped by site, largest first.
    pub fn live_by_site(&self) -> Vec<SiteUsage> {
        let mut by: HashMap<Site, SiteUsage> = HashMap::new();
        for &id in self.live.values() {
            let b = &self.heap.blocks[id];
            let Some(site) = b.site else { continue };
            let u = by.entry(site).or_insert(SiteUsage {
                site,
                bytes: 0,
                requested_bytes: 0,
                count: 0,
            });
            u.bytes += b.size;
            u.requested_bytes += b.requested;
            u.count += 1;
        }
        let mut v: Vec<SiteUsage> = by.into_values().collect();
        v.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(b.count.cmp(&a.count))
                .then_with(|| {
                    (a.site.file, a.site.line, a.site.column, a.site.op).cmp(&(
                        b.site.file,
                        b.site.line,
                        b.site.column,
                        b.site.op,
                    ))
                })
        });
        v
    }

    /// Counts and records the out-of-memory and builds its report.
    pub fn out_of_memory<B: Backing>(
        &mut self,
        b: &B,
        requested: usize,
        rounded: usize,
        segment_size: usize,
        stream: StreamId,
    ) -> OomReport {
        let (device_free, device_total) = b.mem_info();
        self.stats.num_ooms += 1;
        self.trace(TraceAction::Oom, device_free, rounded, stream, None);
        let allocated = self.stats.allocated_bytes.all.current.max(0) as usize;
        let mut top = self.live_by_site();
        top.truncate(OOM_TOP_SITES);
        let report = OomReport {
            device: b.device_name().to_string(),
            requested,
            rounded,
            segment_size,
            stream,
            allocated,
            reserved: self.reserved,
            reserved_unallocated: self.reserved.saturating_sub(allocated),
            limit: self.limit,
            device_free,
            device_total,
            largest_free_block: self.largest_free_block(),
            top_sites: top,
            expandable_segments: self.cfg.expandable_segments,
        };
        self.last_oom = Some(report.clone());
        report
    }
}
