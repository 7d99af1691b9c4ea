//! What-if replay: a recorded allocation history (a snapshot's `device_traces`, strata's or
//! PyTorch's) run again through a fresh caching allocator over the virtual backing, under
//! other settings and optionally another capacity, to see what they would have done to the
//! peaks, to fragmentation and to out-of-memory errors, without rerunning the job.

use std::collections::{HashMap, HashSet};

use super::config::{AllocatorConfig, ROUNDUP_INTERVALS};
use super::history::TraceAction;
use super::snapshot::{AllocatorSettings, Frame, Snapshot, TraceEntrySnapshot};
use super::CachingAllocator;
use crate::backing::VirtualBacking;
use crate::{Block, DeviceAllocator, Site};

/// The capacity of the replay's device when none is given: larger than any real one.
const UNBOUNDED: usize = 1 << 50;

/// A request the replay could not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOom {
    /// Index of the `alloc` entry in the trace.
    pub entry: usize,
    /// Bytes asked for.
    pub bytes: u64,
    /// Bytes allocated and reserved when it failed.
    pub allocated: u64,
    /// See `allocated`.
    pub reserved: u64,
    /// Where the request came from (`file:line (op)`), when the trace says.
    pub site: String,
}

/// The figures of one replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayFigures {
    /// The settings it ran under (`STRATA_ALLOC_CONF` syntax; empty: defaults).
    pub settings: String,
    /// The device capacity it ran with (`None`: unbounded).
    pub capacity: Option<u64>,
    /// Peak bytes of blocks handed out.
    pub peak_allocated: u64,
    /// Peak bytes reserved from the device.
    pub peak_reserved: u64,
    /// Peak of the bytes asked for.
    pub peak_requested: u64,
    /// Reserved bytes at the moment allocated bytes peaked.
    pub reserved_at_peak: u64,
    /// Reserved over allocated at that moment (1.0: no waste).
    pub reserved_per_allocated: f64,
    /// The largest free (cached) block at that moment.
    pub largest_free_block: u64,
    /// Requests that would have run out of memory.
    pub ooms: Vec<ReplayOom>,
}

/// How much of the run the trace covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coverage {
    /// Every block freed in the trace was allocated in it: the replay is the whole run.
    Complete,
    /// The trace starts after the run did (a full ring buffer, or recording switched on
    /// late): `missing` blocks were allocated before it; they are allocated first, in
    /// address order, so the figures are a reconstruction, not the run.
    Truncated {
        /// Blocks allocated before the first entry.
        missing: usize,
        /// Their bytes.
        missing_bytes: u64,
    },
}

/// A replay beside the recorded run.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayReport {
    /// Trace entries replayed.
    pub entries: usize,
    /// How much of the run the trace covers.
    pub coverage: Coverage,
    /// Peak requested and reserved bytes as the trace itself records them (reserved from
    /// its segment events), and the out-of-memory errors it recorded.
    pub traced_peak_requested: u64,
    /// See `traced_peak_requested`.
    pub traced_peak_reserved: u64,
    /// See `traced_peak_requested`.
    pub traced_ooms: usize,
    /// The replay under the recorded run's own settings and capacity: its allocated bytes
    /// and fragmentation, which the trace does not record.
    pub recorded: ReplayFigures,
    /// The replay under the settings asked for.
    pub what_if: ReplayFigures,
}

/// Why a replay cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The snapshot has no trace to replay.
    #[error(
        "the snapshot has no allocation history (device_traces is empty): record it with \
         record_memory_history before the run. What it can still answer, from its segments: \
         {reserved} bytes reserved, {allocated} allocated, largest free block {largest_free}"
    )]
    NoTrace {
        /// Reserved bytes in the snapshot's segments.
        reserved: u64,
        /// Allocated bytes in them.
        allocated: u64,
        /// The largest inactive block.
        largest_free: u64,
    },
    /// The settings do not parse.
    #[error("allocator settings `{settings}`: {message}")]
    Settings {
        /// The text.
        settings: String,
        /// What is wrong with it.
        message: String,
    },
}

/// The settings a snapshot records, as a configuration: its raw text when strata can read
/// it, else rebuilt from the recorded fields (PyTorch's text may hold keys strata does not
/// take, such as CUDA's backend names).
pub fn recorded_config(s: &AllocatorSettings) -> AllocatorConfig {
    if let Ok(c) = AllocatorConfig::parse(&s.conf) {
        return c;
    }
    let mut c = AllocatorConfig {
        raw: s.conf.clone(),
        max_split_size: (s.max_split_size > 0 && s.max_split_size < (1i64 << 62))
            .then_some(s.max_split_size as usize),
        garbage_collection_threshold: s.garbage_collection_threshold,
        expandable_segments: s.expandable_segments,
        ..AllocatorConfig::default()
    };
    for (mib, d) in &s.roundup_power2_divisions {
        if let Ok(m) = mib.parse::<u64>() {
            let i = (m.max(1).ilog2() as usize).min(ROUNDUP_INTERVALS - 1);
            c.roundup_power2_divisions[i] = *d as usize;
        }
    }
    c
}

/// The site a trace entry names (its innermost frame, with the scope frame if any).
fn site_of(e: &TraceEntrySnapshot) -> String {
    let (site, scope) = Frame::site_and_scope(&e.frames);
    let site = site.unwrap_or_else(|| "<unknown>".to_owned());
    match scope {
        Some(scope) => format!("{site} in {scope}"),
        None => site,
    }
}

/// Blocks the trace frees, or the snapshot holds, without the trace allocating them:
/// `(address, bytes)`, in address order.
fn missing_blocks(trace: &[TraceEntrySnapshot], snapshot: &Snapshot) -> Vec<(u64, u64)> {
    let mut seen = HashSet::new();
    let mut missing: HashMap<u64, u64> = HashMap::new();
    for e in trace {
        let Some(addr) = e.addr else { continue };
        match e.action {
            TraceAction::Alloc => {
                seen.insert(addr);
            }
            TraceAction::FreeRequested | TraceAction::FreeCompleted if !seen.contains(&addr) => {
                missing.entry(addr).or_insert(e.size);
            }
            _ => {}
        }
    }
    for seg in &snapshot.segments {
        for b in &seg.blocks {
            if b.state != super::snapshot::BlockState::Inactive && !seen.contains(&b.address) {
                missing.entry(b.address).or_insert(b.requested_size.max(1));
            }
        }
    }
    let mut out: Vec<(u64, u64)> = missing.into_iter().collect();
    out.sort_unstable();
    out
}

/// Runs `trace` (after allocating `missing`) through a fresh allocator.
fn run(
    trace: &[TraceEntrySnapshot],
    missing: &[(u64, u64)],
    config: AllocatorConfig,
    capacity: Option<u64>,
    limit: Option<u64>,
) -> ReplayFigures {
    let settings = config.raw.clone();
    let a = CachingAllocator::with_config(
        VirtualBacking::new(capacity.map_or(UNBOUNDED, |c| c as usize)),
        config,
    );
    a.set_memory_limit(limit.map(|l| l as usize));
    let mut live: HashMap<u64, Block> = HashMap::new();
    let mut ooms = Vec::new();
    let mut largest_free = 0u64;
    let (mut peak_allocated, mut reserved_at_peak) = (0u64, 0u64);
    // At each new peak of allocated bytes: what was reserved then and the largest free block.
    let mut observe = |a: &CachingAllocator<VirtualBacking>| {
        let allocated = a.memory_allocated() as u64;
        if allocated > peak_allocated {
            peak_allocated = allocated;
            reserved_at_peak = a.memory_reserved() as u64;
            largest_free = a.largest_free_block() as u64;
        }
    };
    let unknown = Site::unknown("replay");
    for &(addr, bytes) in missing {
        if let Ok(b) = a.allocate(bytes as usize, &unknown) {
            live.insert(addr, b);
        }
        observe(&a);
    }
    let mut releasing = false;
    for (i, e) in trace.iter().enumerate() {
        let segment_free = matches!(
            e.action,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap
        );
        match (e.action, e.addr) {
            (TraceAction::Alloc, Some(addr)) => match a.allocate(e.size as usize, &unknown) {
                Ok(b) => {
                    if let Some(old) = live.insert(addr, b) {
                        // SAFETY: `old` came from `a` and its owner (the trace) freed it.
                        unsafe { a.deallocate(old) };
                    }
                    observe(&a);
                }
                Err(_) => ooms.push(ReplayOom {
                    entry: i,
                    bytes: e.size,
                    allocated: a.memory_allocated() as u64,
                    reserved: a.memory_reserved() as u64,
                    site: site_of(e),
                }),
            },
            (TraceAction::FreeCompleted, Some(addr)) => {
                if let Some(b) = live.remove(&addr) {
                    // SAFETY: `b` came from `a` and is not used again.
                    unsafe { a.deallocate(b) };
                }
            }
            // The run released cached memory here (`empty_cache`, or a retry before running
            // out of memory): the replay releases its own.
            (TraceAction::SegmentFree | TraceAction::SegmentUnmap, _) if !releasing => {
                let _ = a.empty_cache();
            }
            _ => {}
        }
        releasing = segment_free;
    }
    let stats = a.memory_stats();
    ReplayFigures {
        settings,
        capacity,
        peak_allocated: stats.allocated_bytes.all.peak.max(0) as u64,
        peak_reserved: stats.reserved_bytes.all.peak.max(0) as u64,
        peak_requested: stats.requested_bytes.all.peak.max(0) as u64,
        reserved_at_peak,
        reserved_per_allocated: if peak_allocated > 0 {
            reserved_at_peak as f64 / peak_allocated as f64
        } else {
            0.0
        },
        largest_free_block: largest_free,
        ooms,
    }
}

/// The peaks the trace records by itself: requested bytes from its `alloc` and
/// `free_completed` entries, reserved bytes from its segment events.
fn traced_peaks(trace: &[TraceEntrySnapshot], missing: &[(u64, u64)]) -> (u64, u64, usize) {
    let mut requested: i128 = missing.iter().map(|(_, b)| i128::from(*b)).sum();
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    let (mut reserved, mut peak_req, mut peak_res, mut ooms) = (0i128, requested, 0i128, 0);
    for e in trace {
        match (e.action, e.addr) {
            (TraceAction::Alloc, Some(addr)) => {
                sizes.insert(addr, e.size);
                requested += i128::from(e.size);
                peak_req = peak_req.max(requested);
            }
            (TraceAction::FreeCompleted, Some(addr)) => {
                requested -= i128::from(sizes.remove(&addr).unwrap_or(e.size));
            }
            (TraceAction::SegmentAlloc | TraceAction::SegmentMap, _) => {
                reserved += i128::from(e.size);
                peak_res = peak_res.max(reserved);
            }
            (TraceAction::SegmentFree | TraceAction::SegmentUnmap, _) => {
                reserved -= i128::from(e.size);
            }
            (TraceAction::Oom, _) => ooms += 1,
            _ => {}
        }
    }
    (peak_req.max(0) as u64, peak_res.max(0) as u64, ooms)
}

/// Replays device `device`'s trace of `snapshot` under its own settings and under `what_if`
/// (`STRATA_ALLOC_CONF` syntax), on a device of `capacity` bytes (`None`: the recorded
/// run's memory limit, else unbounded).
///
/// ```
/// use strata_alloc::caching::replay;
/// use strata_alloc::{CachingAllocator, DeviceAllocator, RecordContext, Site, VirtualBacking};
/// let a = CachingAllocator::new(VirtualBacking::new(1 << 34));
/// a.record_memory_history(true, RecordContext::All, 10_000);
/// let site = Site::unknown("example");
/// let blocks: Vec<_> = (1..20).map(|i| a.allocate(i * (3 << 20), &site).unwrap()).collect();
/// for b in blocks { unsafe { a.deallocate(b) } }
/// let r = replay(&a.snapshot(), 0, "expandable_segments:True", None).unwrap();
/// assert_eq!(r.recorded.peak_reserved, a.memory_stats().reserved_bytes.all.peak as u64);
/// assert!(r.what_if.peak_reserved <= r.recorded.peak_reserved);
/// ```
pub fn replay(
    snapshot: &Snapshot,
    device: usize,
    what_if: &str,
    capacity: Option<u64>,
) -> Result<ReplayReport, ReplayError> {
    let trace = snapshot
        .device_traces
        .get(device)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let settings_error = |message: String| ReplayError::Settings {
        settings: what_if.to_owned(),
        message,
    };
    let config = AllocatorConfig::parse(what_if).map_err(|e| settings_error(e.to_string()))?;
    if trace.is_empty() {
        let blocks = snapshot.segments.iter().flat_map(|s| &s.blocks);
        return Err(ReplayError::NoTrace {
            reserved: snapshot.total_reserved(),
            allocated: snapshot.total_allocated(),
            largest_free: blocks
                .filter(|b| b.state == super::snapshot::BlockState::Inactive)
                .map(|b| b.size)
                .max()
                .unwrap_or(0),
        });
    }
    let missing = missing_blocks(trace, snapshot);
    let coverage = if missing.is_empty() {
        Coverage::Complete
    } else {
        Coverage::Truncated {
            missing: missing.len(),
            missing_bytes: missing.iter().map(|(_, b)| b).sum(),
        }
    };
    let (traced_peak_requested, traced_peak_reserved, traced_ooms) = traced_peaks(trace, &missing);
    let limit = snapshot.allocator_settings.memory_limit;
    let recorded = run(
        trace,
        &missing,
        recorded_config(&snapshot.allocator_settings),
        None,
        limit,
    );
    let what_if = run(trace, &missing, config, capacity.or(limit), None);
    Ok(ReplayReport {
        entries: trace.len(),
        coverage,
        traced_peak_requested,
        traced_peak_reserved,
        traced_ooms,
        recorded,
        what_if,
    })
}
